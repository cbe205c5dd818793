"""Callback plugins: :mod:`.sluice_log` writes a playbook's run into the job log."""
