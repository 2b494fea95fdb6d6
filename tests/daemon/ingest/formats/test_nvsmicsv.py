"""``nvidia-smi --query-gpu=... --format=csv`` logs, on the real output nvidia_gpu_exporter's tests keep
(fixtures/real/nvidia_gpu_exporter/query.txt: its header and rows, units in the values, ``[N/A]``)."""

from __future__ import annotations

import pytest

from daemon.ingest.formats import NvidiaSmiCsvReader, sniff
from tests.conftest import REAL
from tests.daemon.ingest.formats.conftest import read_all

QUERY = (REAL / "nvidia_gpu_exporter" / "query.txt").read_text().splitlines()


def logged(rows: list[str], stamps: list[str]) -> str:
    """The real header and rows as ``--query-gpu=timestamp,...`` logs them: a timestamp column first."""
    return "\n".join(["timestamp, " + QUERY[0]] + [f"{t}, {r}" for t, r in zip(stamps, rows)]) + "\n"


def test_a_log_of_the_real_output_names_each_gpu_and_undoes_the_units(tmp_path, ctx):
    path = tmp_path / "sn01-b01.nvidia-smi.csv"
    path.write_text(logged(QUERY[1:3] * 2, ["2026/03/02 00:00:30.125", "2026/03/02 00:00:30.127",
                                            "2026/03/02 00:01:00.125", "2026/03/02 00:01:00.127"]))
    assert isinstance(sniff(path), NvidiaSmiCsvReader)
    s = read_all(NvidiaSmiCsvReader(), path, ctx).samples
    used = s[s["metric"] == "fb_used_mib"]
    assert list(zip(used["entity"], used["value"])) == [("sn01-b01/gpu0", 575), ("sn01-b01/gpu1", 1234)] * 2
    assert used["ts"].tolist() == [1772409630.125, 1772409630.127, 1772409660.125, 1772409660.127]
    assert ctx.rejects.total == 0  # text fields (driver model, vbios) and [N/A] are no reading, not bad lines
    assert ctx.mapper.unmapped_metrics["nvidia_smi_fan_speed_ratio"] == 1  # no table reads it: counted once
    assert ctx.mapper.accelerator_model["sn01-b01/gpu0"] == "NVIDIA GeForce RTX 2080 SUPER"
    assert ctx.mapper.accelerator_at("sn01-b01", "0000:01:00") == "sn01-b01/gpu0"
    assert [i[:2] for i in ctx.mapper.take_identities(2e9)] == [
        ("sn01-b01/gpu0", "GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"),
        ("sn01-b01/gpu1", "GPU-04757e3e-3077-4e2e-b988-7e2d647b52e9")]


def test_nounits_hex_bitmasks_and_the_ras_fields(tmp_path, ctx):
    path = tmp_path / "sn01-b01.nvidia-smi.csv"
    path.write_text("timestamp, index, temperature.gpu, power.draw [W], clocks.sm [MHz], utilization.gpu [%], "
                    "ecc.errors.uncorrected.volatile.total, retired_pages.pending, clocks_event_reasons.active\n"
                    "2026/03/02 00:00:30.000, 2, 83, 690.5, 1410, 97, 1, Yes, 0x0000000000000040\n")
    s = read_all(NvidiaSmiCsvReader(), path, ctx).samples
    got = dict(zip(s["metric"], s["value"]))
    assert got == {"gpu_temp_c": 83, "power_w": 690.5, "sm_clock_mhz": 1410, "gpu_util_pct": 97,
                   "ecc_dbe_total": 1, "retired_pages_pending": 1, "throttle_thermal": 1}
    assert set(s["entity"]) == {"sn01-b01/gpu2"} and ctx.rejects.total == 0


@pytest.mark.parametrize("name,text,said", [
    ("gpus.csv", "timestamp, index, temperature.gpu\n2026/03/02 00:00:30.000, 0, 40\n", "name the file <host>"),
    ("sn01-b01.nvidia-smi.csv", QUERY[0] + "\n" + QUERY[1] + "\n", "no timestamp or index column"),
])
def test_a_log_it_cannot_place_is_refused_saying_what_to_do(tmp_path, ctx, name, text, said):
    path = tmp_path / name
    path.write_text(text)
    assert read_all(NvidiaSmiCsvReader(), path, ctx).samples.empty
    assert said in ctx.rejects.messages[0]


def test_bad_lines_are_rejected_with_their_number(tmp_path, ctx):
    path = tmp_path / "sn01-b01.nvidia-smi.csv"
    path.write_text("timestamp, index, temperature.gpu\n"
                    "2026/03/02 00:00:30.000, 0, 40\n"
                    "2026/13/02 00:00:30.000, 0, 41\n"  # no such month
                    "2026/03/02 00:01:00.000, 0\n"  # cut
                    "2026/03/02 00:01:30.000, 0, hot\n"
                    "2026/03/02 00:02:00.000, 0, 42\n")
    s = read_all(NvidiaSmiCsvReader(), path, ctx).samples
    assert s["value"].tolist() == [40, 42]
    assert sorted(m.split(": ")[0].rsplit(":", 1)[1] for m in ctx.rejects.messages) == ["3", "4", "5"]


def test_the_recovery_action_is_read_as_nvmls_number(tmp_path, ctx):
    """``gpu_recovery_action`` (drivers from R570) is a word: None, Reset, Reboot, ... as NVML's
    nvmlDeviceGpuRecoveryAction_t numbers; a word NVML does not have is a bad value, rejected with its line."""
    path = tmp_path / "sn01-b01.nvidia-smi.csv"
    path.write_text("timestamp, index, gpu_recovery_action\n"
                    "2026/03/02 00:00:30.000, 0, None\n"
                    "2026/03/02 00:00:30.000, 1, Reset\n"
                    "2026/03/02 00:00:30.000, 2, Reboot\n"
                    "2026/03/02 00:00:30.000, 3, Drain P2P\n"
                    "2026/03/02 00:00:30.000, 4, Drain and Reset\n"
                    "2026/03/02 00:00:30.000, 5, Soon\n")
    s = read_all(NvidiaSmiCsvReader(), path, ctx).samples
    assert set(s["metric"]) == {"gpu_recovery_action"}
    assert s["value"].tolist() == [0, 1, 2, 3, 4]
    assert len(ctx.rejects.messages) == 1 and "sn01-b01.nvidia-smi.csv:7" in ctx.rejects.messages[0]
    assert "'Soon' is not a number" in ctx.rejects.messages[0]
