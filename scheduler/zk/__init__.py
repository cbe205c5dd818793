"""The kazoo layer: the only package that speaks ZooKeeper's protocol.

Recipes, not records: :mod:`~scheduler.zk.client` (connection, deadlines,
watchdog; what it needs to connect is :mod:`~scheduler.zk.endpoint`),
:mod:`~scheduler.zk.context` (lock contexts, fenced transactions),
:mod:`~scheduler.zk.locks`, :mod:`~scheduler.zk.sharding`,
:mod:`~scheduler.zk.stored` and :mod:`~scheduler.zk.doctree` (objects and
trees of objects of any size), :mod:`~scheduler.zk.event_queue`,
:mod:`~scheduler.zk.multiread`, :mod:`~scheduler.zk.flags`,
:mod:`~scheduler.zk.members`, :mod:`~scheduler.zk.ltime`,
:mod:`~scheduler.zk.acls`, and every path of the tree
(:mod:`~scheduler.zk.paths`, Nodepool's in :mod:`~scheduler.zk.paths_nodepool`).
It imports nothing of Sluice but the floor (:mod:`scheduler.errors`,
:mod:`scheduler.processlocal`); the records kept on it are in
:mod:`scheduler.stores`. docs/zookeeper.md describes the tree and the API.
"""
