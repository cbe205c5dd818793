"""The commands of ``sluice``, one module per group (loaded lazily by ``cli.main``)."""
