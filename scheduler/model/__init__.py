"""Domain objects of the scheduler: changes, queue items, buildsets, builds.

Plain dataclasses with no I/O; :mod:`scheduler.zk` maps them to znodes.
Every object serializes to a JSON-able dict (``to_dict``) and reads back
(``from_dict``) tolerating fields it does not know, so workers of two
versions can run side by side during an upgrade (STYLE.md habit 5).
"""
