"""The ZooKeeper model layer: the only package that imports kazoo.

Everything else talks to ZooKeeper through the typed objects and recipes
here; every path is built by :mod:`scheduler.zk.paths` (Nodepool's subtree
by :mod:`scheduler.zk.paths_nodepool`). One recipe per module:
:mod:`~scheduler.zk.client` (connection, deadlines, watchdog),
:mod:`~scheduler.zk.context` (lock contexts, fenced transactions),
:mod:`~scheduler.zk.sharding` and :mod:`~scheduler.zk.stored` (objects of
any size), :mod:`~scheduler.zk.event_queue`, :mod:`~scheduler.zk.locks`,
:mod:`~scheduler.zk.semaphores`,
:mod:`~scheduler.zk.job_requests`, :mod:`~scheduler.zk.components` and
:mod:`~scheduler.zk.ltime`. docs/zookeeper.md describes the tree and the API.
"""
