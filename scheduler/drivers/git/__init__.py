"""The git driver's event gathering: polling remotes for ref updates."""
