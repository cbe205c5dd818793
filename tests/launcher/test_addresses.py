"""Local nodes' /30 leases (workers/launcher/addresses.py), on a lease folder of the test's."""

from __future__ import annotations

import ipaddress
import multiprocessing
from pathlib import Path

import pytest

from scheduler.errors import SettingsError
from scheduler.settings.nodes import read_nodes
from scheduler.settings.reader import SettingsReader
from workers.launcher.addresses import AddressError, AddressPool, Lease

NETWORK = "10.213.128.0/28"  # four /30s


def test_leases_are_distinct_and_named_after_their_subnet(tmp_path: Path) -> None:
    pool = AddressPool(NETWORK, tmp_path / "leases")
    folders = [tmp_path / f"n{i}" for i in range(4)]
    for folder in folders:
        folder.mkdir()
    leases = [pool.lease(folder) for folder in folders]
    assert len({lease.subnet for lease in leases}) == 4
    first = leases[0]
    assert (first.host_address, first.node_address) == ("10.213.128.1", "10.213.128.2")
    assert first.netns == "sluice-node-0ad58000" and first.veth == "sl0ad58000"
    with pytest.raises(AddressError, match="no free /30"):
        pool.lease(tmp_path)
    pool.release(folders[1])
    assert pool.lease(tmp_path / "n1").subnet == leases[1].subnet


def test_a_lease_whose_folder_is_gone_is_taken_again(tmp_path: Path) -> None:
    pool = AddressPool(NETWORK, tmp_path / "leases")
    gone = tmp_path / "gone"
    gone.mkdir()
    stale = pool.lease(gone)
    gone.rmdir()
    kept = tmp_path / "kept"
    kept.mkdir()
    assert pool.lease(kept).subnet == stale.subnet
    assert [lease.folder for lease in pool.leases()] == [kept]


def _take(lease_dir: str, folder: str) -> str:
    Path(folder).mkdir()
    return str(AddressPool(NETWORK, Path(lease_dir)).lease(Path(folder)).subnet)


def test_processes_leasing_at_once_never_share_a_subnet(tmp_path: Path) -> None:
    folders = [str(tmp_path / f"p{i}") for i in range(4)]
    with multiprocessing.get_context("spawn").Pool(4) as workers:
        subnets = workers.starmap(_take, [(str(tmp_path / "leases"), f) for f in folders])
    assert len(set(subnets)) == 4
    assert {str(lease.subnet) for lease in AddressPool(NETWORK, tmp_path / "leases").leases()} == (
        set(subnets)
    )


def test_the_lease_records_round_trip() -> None:
    lease = Lease(ipaddress.IPv4Network("10.213.0.4/30"), Path("/srv/nodes/0000000001"))
    assert Lease.from_dict(lease.to_dict()) == lease


def test_the_local_network_setting_is_checked() -> None:
    def read(value: str) -> str:
        reader = SettingsReader({"local_network": value}, "sluice.yaml", "nodes.")
        return read_nodes(reader, Path("/")).local_network

    assert read("10.9.0.0/24") == "10.9.0.0/24"
    with pytest.raises(SettingsError, match="local_network: expected an IPv4 network"):
        read("10.9.0.1/24")
    with pytest.raises(SettingsError, match="too small"):
        read("10.9.0.0/31")
