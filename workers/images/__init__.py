"""The image builder (seed 004): builds, uploads and cleans up disk images.

A worker that consumes the ``builder`` queue is a builder. Its tick
(:mod:`workers.images.check`, on the thread of the ``ImageBuilderStep``
bootstep) cleans up its own builds, keeps each image's newest builds,
uploads and nudges due builds; a build runs as the ``sluice.builder.build``
task (:mod:`workers.images.builder`). The state is in ZooKeeper
(:mod:`scheduler.stores.images`); docs/nodes.md explains the whole.
"""
