"""The settings of every Sluice process, by role.

- :mod:`~scheduler.settings.sections`: the settings as frozen dataclasses,
  one per section of ``sluice.yaml``, and :class:`Settings`, the whole file;
- :mod:`~scheduler.settings.reader`: the YAML reader that names the file,
  line and key of every error;
- :mod:`~scheduler.settings.nodes`, :mod:`~scheduler.settings.images`: the
  ``nodes:`` and ``images:`` sections, their values and their readers;
- :mod:`~scheduler.settings.environment`: the ``SLUICE_*`` overrides;
- :mod:`~scheduler.settings.exposure`: credentials completed into the
  settings, and the checks that refuse an open listener or ZooKeeper;
- :mod:`~scheduler.settings.load`: finding ``sluice.yaml``, reading its
  sections and applying all of the above
  (:func:`~scheduler.settings.load.load_settings`).

Import each name from the module that defines it; this package re-exports nothing.
"""
