"""The demo of ``make run``: sample repositories, changes, a live view, a summary."""
