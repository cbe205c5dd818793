"""Pipeline state persistence: the model mapped onto the ZooKeeper document tree."""
