"""The ZooKeeper model layer: the only package that imports kazoo.

Everything else talks to ZooKeeper through the typed objects and recipes
here; every path is built by :mod:`scheduler.zk.paths`.
"""
