"""Ansible plugins shipped with the executor.

* ``callback/``: ``sluice_log``, the job log's format;
* ``action/``: ``zuul_return``, a task's data merged into the build's result
  data (``library/`` holds its documentation for ``ansible-doc``).

Ansible loads them by path (``callback_plugins``, ``action_plugins`` and
``library`` in the build's ``ansible.cfg``); Sluice itself never imports
them (its tests call ``zuul_return``'s merge directly).
"""
