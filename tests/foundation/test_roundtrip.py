"""The ZooKeeper round trip, called directly (no broker)."""

from __future__ import annotations

from scheduler.zk.client import connect
from scheduler.zk.roundtrip import roundtrip
from tests.fixtures.services import ZooKeeperTarget


def test_roundtrip_writes_and_reads_back(zookeeper: ZooKeeperTarget) -> None:
    client = connect(zookeeper.settings())
    try:
        result = roundtrip(client, "abc/..")
        assert result["read"] == result["written"]
        assert result["path"] == "/system/roundtrip/abc%2F.."
        assert client.exists("/system/roundtrip/abc%2F..")
    finally:
        client.stop()
        client.close()
