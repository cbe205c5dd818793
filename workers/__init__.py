"""What runs on worker hosts: the merger, the executor, worker bootsteps."""
