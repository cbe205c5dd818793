"""Ansible plugins shipped with the executor (``callback/``: the job log's format).

Ansible loads them by path (``callback_plugins`` in the build's
``ansible.cfg``); nothing in Sluice imports them.
"""
