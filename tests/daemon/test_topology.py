"""The topology file: where a part is, as alerts and the incident page tell it."""

from daemon.topology import Topology

DOC = {"racks": [{"name": "r01", "supernode": "sn01", "cooling": "cdu01", "nodes": [
    {"name": "sn01-b07", "scheduler_name": "node07",
     "accelerators": [{"index": 3, "pci_bus_id": "00000000:9B:00.0", "uuid": "GPU-5f3c", "serial": "1652222014738",
                       "model": "NVIDIA H100 80GB HBM3"}],
     "ports": [{"device": "mlx5_2", "port": 1, "pci": "0000:41:00.1", "netdev": "ibp65s0f1",
                "switchport": "leaf03/17"}]}]}]}


def test_a_part_is_placed_from_rack_to_serial_and_a_link_to_its_far_end():
    topo = Topology.from_dict(DOC)
    assert topo.place("sn01-b07/gpu3") == [
        ("supernode", "sn01"), ("rack", "r01"), ("cooling", "cdu01"), ("node", "sn01-b07 (Slurm: node07)"),
        ("slot", "gpu3"), ("model", "NVIDIA H100 80GB HBM3"), ("serial", "1652222014738"), ("UUID", "GPU-5f3c"),
        ("PCI", "00000000:9B:00.0")]
    assert topo.place("sn01-b07/mlx5_2:1")[-4:] == [("port", "mlx5_2:1"), ("netdev", "ibp65s0f1"),
                                                     ("PCI", "0000:41:00.1"), ("far end", "leaf03/17")]
    assert topo.place("sn01-b07") == [("supernode", "sn01"), ("rack", "r01"), ("cooling", "cdu01"),
                                      ("node", "sn01-b07 (Slurm: node07)")]
    assert topo.place("r01") == [("supernode", "sn01"), ("rack", "r01"), ("cooling", "cdu01")]  # a rack's incident
    assert topo.place("cdu01") == [("cooling", "cdu01"), ("racks", "r01")]  # a cooling loop's
    assert Topology().place("n9/gpu0") == [("node", "n9"), ("slot", "gpu0")]  # without a topology: what the id says


def test_the_hosts_time_zone_is_checked_when_the_topology_is_read():
    """'CST' is China's and America's Central time both: refused, as any name that is no zone."""
    import pytest

    from daemon.topology import TopologyError

    assert Topology.from_dict({"timezone": "Asia/Shanghai"}).timezone == "Asia/Shanghai"
    assert Topology.from_dict({}).timezone is None
    with pytest.raises(TopologyError, match="topology: timezone: 'CST' is no time zone"):
        Topology.from_dict({"timezone": "CST"})
