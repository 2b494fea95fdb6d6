"""nvidia-smi's default table, on the real outputs gpud's tests kept (fixtures/real/gpud/gpu-node-08.nvidia-smi.txt:
eight H100s on 550.90.07, timed; gpu-node-09: a GeForce on 525.125.06 whose fan reads ERR!, untimed)."""

from __future__ import annotations

import pytest

from daemon.ingest.formats import NvidiaSmiTableReader, sniff
from tests.conftest import REAL
from tests.daemon.ingest.formats.conftest import read_all

H100 = REAL / "gpud" / "gpu-node-08.nvidia-smi.txt"


def test_a_real_table_of_eight_h100s(ctx):
    assert isinstance(sniff(H100), NvidiaSmiTableReader)
    s = read_all(NvidiaSmiTableReader(), H100, ctx).samples
    assert sorted(set(s["entity"])) == [f"gpu-node-08/gpu{i}" for i in range(8)] and ctx.rejects.total == 0
    first = s[s["entity"] == "gpu-node-08/gpu0"]
    assert dict(zip(first["metric"], first["value"])) == pytest.approx(
        {"ecc_dbe_total": 0, "gpu_temp_c": 27, "power_w": 72, "fb_used_mib": 1, "gpu_util_pct": 0})
    assert set(s["ts"]) == {1737368306.0}  # Mon Jan 20 10:18:26 2025, read as UTC
    assert sorted(s[s["metric"] == "gpu_temp_c"]["value"]) == [22, 23, 23, 23, 24, 24, 27, 27]
    assert ctx.mapper.accelerator_model["gpu-node-08/gpu0"] == "NVIDIA H100 80GB HBM3"
    assert ctx.mapper.accelerator_at("gpu-node-08", "0000:db:00") == "gpu-node-08/gpu7"


def test_a_table_without_its_time_is_rejected_saying_so(ctx):
    path = REAL / "gpud" / "gpu-node-09.nvidia-smi.txt"
    assert isinstance(sniff(path), NvidiaSmiTableReader)
    assert read_all(NvidiaSmiTableReader(), path, ctx).samples.empty
    assert ctx.rejects.messages == [f"{path}:2: a table without the time nvidia-smi prints above it (cut off?): "
                                    "cannot be placed in time"]


def test_a_log_of_tables_each_at_its_time_and_err_seen(tmp_path, ctx):
    """``nvidia-smi -l 60``: each table at its time; a GPU whose uncorrected ECC count rose and whose temperature
    nvidia-smi could not read (ERR!, as a failing GPU shows: rejected with its line, so it is seen); a broken row
    costs itself."""
    table = H100.read_text()
    later = table.replace("Mon Jan 20 10:18:26 2025", "Mon Jan 20 10:19:26 2025")
    ecc_cell = "|   00000000:5D:00.0 Off |                    {} |"
    later = later.replace(ecc_cell.format(0), ecc_cell.format(2))
    later = later.replace("| N/A   23C    P0             72W", "| N/A   ERR!   P0             72W", 1)  # GPU 3's
    path = tmp_path / "sn01-b01.nvidia-smi.txt"
    path.write_text(table.rstrip("\n") + "\n" + later)
    s = read_all(NvidiaSmiTableReader(), path, ctx).samples
    ecc = s[(s["entity"] == "sn01-b01/gpu3") & (s["metric"] == "ecc_dbe_total")]
    assert list(zip(ecc["ts"], ecc["value"])) == [(1737368306.0, 0), (1737368366.0, 2)]
    lines = path.read_text().splitlines()
    err = next(i + 1 for i, line in enumerate(lines) if "ERR!" in line)
    assert ctx.rejects.messages == [f"{path}:{err}: temperature.gpu: 'ERR!' is no reading (nvidia-smi could not "
                                    "read it)"]
    assert len(s[s["ts"] == 1737368366.0]) == 39  # the other 39 readings of the second table
