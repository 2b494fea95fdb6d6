"""sniff's table of shapes: each kind of file is told by the first shape that matches it, in the table's order."""

import sqlite3

import pytest

from daemon.ingest.formats import SHAPES, sniff
from daemon.ingest.formats.journalfile import MAGIC

HEADS = {
    "Parquet": b"PAR1" + b"\0" * 64,
    "journal file": MAGIC + b"\0" * 64,
    "promtool dump": b'{__name__="up", job="x"} 1 1700000000000\n',
    "VictoriaMetrics export": b'{"metric":{"__name__":"x"},"values":[1],"timestamps":[1700000000000]}\n',
    "journal export": b"__CURSOR=s=1;i=1\n__REALTIME_TIMESTAMP=1772409600000000\n",
    "journal JSON": b'{"__REALTIME_TIMESTAMP": "1772409600000000", "_TRANSPORT": "kernel", "MESSAGE": "x"}\n',
    "journal verbose": b"Tue 2025-01-21 04:41:44.283302 UTC [s=7ee4d0fb;i=1;b=0123456789abcdef;m=1;t=62c2ffe72c4a6;"
                       b"x=b3681efc]\n    _TRANSPORT=kernel\n",
    "smi snapshots": b'{"ts": 1772409600, "host": "n1", "tool": "amd-smi", "output": {}}\n',
    "Prometheus query_range": b'{"status": "success", "data": {"resultType": "matrix", "result": []}}\n',
    "columnar CSV": b"ts,entity,metric,value\n1772409600,n1/gpu0,gpu_temp_c,40\n",
    "nvidia-smi CSV": b"timestamp, index, uuid, temperature.gpu\n",
    "nvidia-smi XML": b'<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n'
                      b"<nvidia_smi_log>\n",
    "nvidia-smi text": b"\n==============NVSMI LOG==============\n\nTimestamp : Wed Jul 31 11:22:39 2024\n",
    "nvidia-smi table": b"Mon Jan 20 10:18:26 2025\n+-----------------+\n| NVIDIA-SMI 550.90.07   Driver Version: "
                        b"550.90.07   CUDA Version: 12.4 |\n",
    "IPMI SEL": b"   f | 12/05/26 | 18:31:45 UTC | Memory #0x88 | Uncorrectable ECC | Asserted\n",
    "ras-mc-ctl --errors": b"No Memory errors.\n\nNo PCIe AER errors.\n\nMCE events:\n",
    "kernel log": b"2026-03-02T00:00:00+00:00 sn01-b01 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=0, x\n",
    "Fabric Manager log": b"[Feb 25 2025 13:59:45] [INFO] [tid 1803] Received an inband message\n",
    "exposition": b"# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n",
}


def test_every_shape_has_a_sample_and_a_name_of_its_own():
    names = [s.name for s in SHAPES]
    assert len(set(names)) == len(names)
    assert set(names) == set(HEADS) | {"rasdaemon SQLite"}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_a_sample_of_each_shape_is_taken_by_that_shape(tmp_path, name):
    path = tmp_path / "sample"
    path.write_bytes(HEADS[name])
    shape = next(s for s in SHAPES if s.name == name)
    assert type(sniff(path)) is type(shape.reader())
    first = next(ln.strip() for ln in HEADS[name].splitlines() if ln.strip())
    assert next(s.name for s in SHAPES if s.matches(HEADS[name], first)) == name


def test_a_rasdaemon_database_and_nothing_known(tmp_path):
    db = tmp_path / "n1.db"
    sqlite3.connect(db).execute("CREATE TABLE mc_event (id INTEGER PRIMARY KEY)").connection.commit()
    assert next(s for s in SHAPES if s.name == "rasdaemon SQLite").matches(db.read_bytes()[:4096], b"")
    assert type(sniff(db)).__name__ == "RasdaemonReader"
    other = tmp_path / "notes.txt"
    other.write_bytes(b"shopping list\n")
    assert sniff(other) is None
