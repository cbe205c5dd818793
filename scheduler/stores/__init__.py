"""The record stores: Sluice's records kept in ZooKeeper, on the recipes of :mod:`scheduler.zk`.

One kind of record per module, each with its own paths, schema and rules:
job requests (:mod:`~scheduler.stores.job_requests`, its records and
sweeps), the config cache, semaphores (and the ledger that takes them in a
pipeline pass's transaction), autoholds, the project keystore, nodes and
node requests, images, build timings, forge deliveries, parked changes,
management results, the component registry and the inventory of what
exists. A store may use the kazoo layer, the settings and the crypto of
the keystore; it never imports what decides (layouts, managers,
processing) nor the hands. docs/zookeeper.md describes the tree.
"""
