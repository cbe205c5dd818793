"""Run as a separate process: rebuild a tenant's layout from ZooKeeper alone, print its JSON.

``python -m tests.layouts.rebuild <hosts> <root> <tenant>``; no merger, no
git, no main.yaml: only the layout state and the config cache.
"""

from __future__ import annotations

import sys

from scheduler.layouts import TenantLayouts
from scheduler.settings.sections import ZooKeeperSettings
from scheduler.zk.client import connect


def main(hosts: str, root: str, tenant: str) -> None:
    client = connect(ZooKeeperSettings(hosts=hosts, root=root))
    try:
        built = TenantLayouts(client).get(tenant)
        errors = [e.describe() for e in built.result.errors]
        sys.stdout.write("\n".join([built.layout.to_json(), built.state.uuid, *errors]) + "\n")
    finally:
        client.stop()
        client.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
