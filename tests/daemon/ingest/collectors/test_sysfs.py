"""sysfs: the node_exporter fixture tree (real mlx4 counters incl. a saturated 32-bit one, N/A ports, EDAC,
hwmon, AER), plus a RoCE hw_counters port and a broken file."""

import shutil

from daemon.ingest.collectors.sysfs import SysfsCollector
from daemon.ingest.formats.reader import ReadContext
from daemon.ingest.naming import SeriesMapper
from daemon.topology import Topology
from tests.conftest import REAL

TREE = REAL / "node_exporter_sysfs" / "sys"


def rows(batch):
    return {(e, m): v for e, m, v in zip(batch.samples["entity"], batch.samples["metric"], batch.samples["value"])}


def test_reads_the_node_exporter_fixture_tree():
    ctx = ReadContext()
    c = SysfsCollector("sysfs", ctx, root=str(TREE), node="n1")
    batch, outcome = c.collect(1_700_000_000.0)
    r = rows(batch)
    assert outcome.ok and ctx.rejects.total == 0
    assert r[("n1/mlx4_0:1", "xmit_wait_total")] == 4294967295  # saturated 32-bit counter, as read
    assert r[("n1/mlx4_0:1", "port_state")] == 4 and r[("n1/mlx4_0:1", "port_phys_state")] == 5
    assert r[("n1/mlx4_0:1", "port_rate_bytes")] == 40e9 / 8
    data = int((TREE / "class/infiniband/mlx4_0/ports/1/counters/port_rcv_data").read_text())
    assert r[("n1/mlx4_0:1", "rcv_bytes_total")] == 4 * data  # 4-byte words
    assert not any(e == "n1/i40iw0:1" and m.endswith("_total") for e, m in r)  # "N/A (no PMA)": no data
    assert r[("n1/mc0", "edac_ce_total")] >= 0 and ("n1/mc0", "edac_ue_total") in r
    assert any(m == "hwmon_temp_c" for _, m in r)
    assert r[("n1/pci-0000:45:00", "aer_correctable_total")] == 0
    assert (batch.samples["ts"] == 1_700_000_000.0).all()


def test_roce_hw_counters_aer_on_the_accelerator_and_a_broken_file(tmp_path):
    root = tmp_path / "sys"
    shutil.copytree(TREE, root, symlinks=True)
    port = root / "class/infiniband/mlx5_0/ports/1"
    (port / "hw_counters").mkdir(parents=True)
    (port / "counters").mkdir()
    (port / "hw_counters/out_of_sequence").write_text("12\n")
    (port / "hw_counters/local_ack_timeout_err").write_text("3\n")
    (port / "counters/symbol_error").write_text("garbage\n")
    (port / "state").write_text("1: DOWN\n")
    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [
        {"name": "n1", "accelerators": [{"index": 0, "pci_bus_id": "0000:45:00.0"}]}]}]})
    ctx = ReadContext(mapper=SeriesMapper(topology=topo))
    batch, outcome = SysfsCollector("sysfs", ctx, root=str(root), node="n1").collect(1.0)
    r = rows(batch)
    assert r[("n1/mlx5_0:1", "roce_out_of_sequence_total")] == 12
    assert r[("n1/mlx5_0:1", "roce_local_ack_timeout_err_total")] == 3
    assert r[("n1/mlx5_0:1", "port_state")] == 1
    assert ("n1/mlx5_0:1", "symbol_error_total") not in r
    assert any("counters/symbol_error: not a number" in m for m in ctx.rejects.messages)
    assert ("n1/gpu0", "aer_fatal_total") in r  # the AER device is the GPU the topology places there


def test_missing_root_is_an_error_not_a_crash(tmp_path):
    batch, outcome = SysfsCollector("sysfs", ReadContext(), root=str(tmp_path / "nope"), node="n1").collect(1.0)
    assert not outcome.ok and len(batch.samples) == 0
