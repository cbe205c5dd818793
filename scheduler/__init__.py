"""Sluice's scheduler: the ZooKeeper model, configuration, pipelines, the CLI."""
