"""Processing: the work behind the scheduler tasks (events into pipelines, passes)."""
