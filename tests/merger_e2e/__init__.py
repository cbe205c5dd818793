"""Merges as Celery tasks with state in ZooKeeper: real ZooKeeper, Redis, git and workers."""
