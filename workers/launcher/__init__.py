"""The launcher (issue 19, part 1): serves node requests from providers.

A worker that consumes the ``launcher`` queue is a launcher. Its tick
(:mod:`workers.launcher.loop`, on the thread of the ``LauncherStep``
bootstep) repairs what dead launchers and users left, deletes used nodes
of its providers and nudges waiting requests; a request is served by the
``sluice.launcher.serve`` task (:mod:`workers.launcher.launcher`). The
providers are :mod:`workers.launcher.providers`; a local node boots through
:mod:`workers.launcher.boot` (its address from
:mod:`workers.launcher.addresses`, its sshd from :mod:`workers.launcher.sshd`);
the state is in ZooKeeper (:mod:`scheduler.stores.nodes`); docs/nodes.md
explains the whole.
"""
