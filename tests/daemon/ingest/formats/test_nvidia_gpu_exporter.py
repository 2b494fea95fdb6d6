"""utkuozdemir/nvidia_gpu_exporter: series that name their GPU by uuid only, joined to its slot by the info series.

On the exporter's own real scrapes (fixtures/real/nvidia_gpu_exporter: an H100, an H200, an H100 in MIG mode) and
on scrapes, dumps and query_range answers made from their lines: two GPUs of a node, a replaced GPU, the info series
after the others or missing."""

from __future__ import annotations

import json
import re

import pytest

from daemon.ingest.formats import OpenMetricsReader, QueryRangeReader
from daemon.ingest.formats.openmetrics import parse_scrape
from daemon.ingest.naming import NOT_JOINED
from daemon.topology import normalize_pci
from tests.conftest import REAL
from tests.daemon.ingest.formats.conftest import read_all

CAPTURES = sorted((REAL / "nvidia_gpu_exporter").glob("*.metrics"))
ZERO = "00000000-0000-0000-0000-000000000000"
TARGET = {"instance": "10.0.1.11:9835", "job": "nvidia_gpu_exporter"}  # 10.0.1.11 is sn01-b01 (conftest TOPO)


def value(text: str, metric: str) -> float:
    """The value of ``metric`` (its one series) in an exposition text."""
    return float(re.search(rf"^{metric}{{[^}}]*}} (\S+)$", text, re.M).group(1))


def read(ctx, text: str, now: float = 1.8e9):
    ctx.target_labels = dict(TARGET)
    batch = parse_scrape(text.encode(), ctx, {}, "scrape", now)
    return {(e, m): v for e, m, v in zip(batch.samples["entity"].astype(str), batch.samples["metric"].astype(str),
                                         batch.samples["value"])}


def test_the_captures_cover_what_the_table_reads():
    assert {p.name.split("__")[1] for p in CAPTURES} == {"nvidia-h100-80gb-hbm3", "nvidia-h200", "nvidia-h100-mig"}


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name.split("__")[1])
def test_a_real_scrape_names_its_gpu_by_the_info_series_and_undoes_the_units(ctx, capture):
    text = capture.read_text()
    # as the exporter writes it: clocks and ECC before the info series that names the GPU
    assert text.index("nvidia_smi_ecc_errors_corrected_volatile_total{") < text.index("nvidia_smi_gpu_info{")
    got = read(ctx, text)
    gpu = "sn01-b01/gpu0"
    assert {e for e, _ in got} == {gpu}
    assert got[(gpu, "gpu_temp_c")] == value(text, "nvidia_smi_temperature_gpu")
    assert got[(gpu, "hbm_temp_c")] == value(text, "nvidia_smi_temperature_memory")
    assert got[(gpu, "power_w")] == value(text, "nvidia_smi_power_draw_watts")
    assert got[(gpu, "sm_clock_mhz")] == pytest.approx(value(text, "nvidia_smi_clocks_current_sm_clock_hz") / 1e6)
    assert got[(gpu, "fb_used_mib")] == pytest.approx(value(text, "nvidia_smi_memory_used_bytes") / 2**20)
    counts = {"nvidia_smi_ecc_errors_corrected_volatile_total": "ecc_sbe_total",
              "nvidia_smi_ecc_errors_uncorrected_volatile_total": "ecc_dbe_total",
              "nvidia_smi_remapped_rows_uncorrectable": "row_remap_uncorrectable_total",  # N/A under MIG: absent
              "nvidia_smi_remapped_rows_failure": "row_remap_failure",
              "nvidia_smi_remapped_rows_pending": "row_remap_pending",
              "nvidia_smi_remapped_rows_histogram_none": "row_remap_banks_exhausted"}
    for source, metric in counts.items():
        assert got.get((gpu, metric)) == (value(text, source) if f"{source}{{" in text else None), metric
    # the active reasons' bitmask: the idle MIG GPU shows 0x1 (GPU idle), not a thermal slowdown (0x20, 0x40)
    assert value(text, "nvidia_smi_clocks_event_reasons_active") in (0, 1) and got[(gpu, "throttle_thermal")] == 0
    if "nvidia_smi_utilization_gpu_ratio{" in text:  # not under MIG
        assert got[(gpu, "gpu_util_pct")] == pytest.approx(100 * value(text, "nvidia_smi_utilization_gpu_ratio"))
    mapper = ctx.mapper
    assert ctx.rejects.total == 0 and not mapper.values_not_read and not mapper.unmapped_hosts
    name = re.search(r'nvidia_smi_gpu_info{[^}]*\bname="([^"]+)"', text).group(1)
    assert mapper.accelerator_model[gpu] == name and name.startswith("NVIDIA H")
    pci = re.search(r'nvidia_smi_gpu_info{[^}]*\bpci_bus_id="([^"]+)"', text).group(1)
    assert mapper.accelerator_at("sn01-b01", normalize_pci(pci)) == gpu  # for the kernel lines that name it
    assert mapper.take_identities(2e9) == [(gpu, ZERO, 1.8e9)]


def two_gpus(uuids: tuple[str, str], temps: tuple[int, int]) -> str:
    """The H100 capture as a node with two GPUs (index 0 and 2) would be scraped: each family's lines together."""
    text = (REAL / "nvidia_gpu_exporter" / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.metrics").read_text()
    out = []
    for line in text.splitlines():
        if line.startswith("#") or ZERO not in line:
            out.append(line)
            continue
        for index, uuid, temp in zip((0, 2), uuids, temps):
            one = line.replace(ZERO, uuid).replace('index="0"', f'index="{index}"')
            if one.startswith("nvidia_smi_temperature_gpu{"):
                one = one.rsplit(" ", 1)[0] + f" {temp}"
            out.append(one)
    return "\n".join(out) + "\n"


def test_two_gpus_of_a_node_each_in_its_slot_and_a_replaced_one_is_a_new_part(ctx):
    a, b, c = "GPU-0a1b", "GPU-2c3d", "GPU-9e8f"
    got = read(ctx, two_gpus((a, b), (59, 71)))
    assert got[("sn01-b01/gpu0", "gpu_temp_c")] == 59 and got[("sn01-b01/gpu2", "gpu_temp_c")] == 71
    assert sorted(ctx.mapper.take_identities(2e9)) == [("sn01-b01/gpu0", a, 1.8e9), ("sn01-b01/gpu2", b, 1.8e9)]
    # the GPU in slot 2 replaced: a new uuid there is a new part (its series are new keys, named through the info)
    got = read(ctx, two_gpus((a, c), (60, 45)), now=1.8e9 + 30)
    assert got[("sn01-b01/gpu0", "gpu_temp_c")] == 60 and got[("sn01-b01/gpu2", "gpu_temp_c")] == 45
    assert ctx.mapper.take_identities(2e9) == [("sn01-b01/gpu2", c, 1.8e9 + 30)]
    assert ctx.rejects.total == 0 and not ctx.mapper.values_not_read


def test_a_dump_and_a_query_range_answer_with_the_info_series_last_are_read_whole(ctx, tmp_path):
    """promtool's dump and Prometheus' answers sort series by name: every nvidia_smi_* family before gpu_info
    ("nvidia_smi_gpu_info" > "nvidia_smi_ecc..."), each series' samples together."""
    info = ('nvidia_smi_gpu_info{index="2",instance="10.0.1.11:9835",name="NVIDIA H100 80GB HBM3",'
            'pci_bus_id="00000000:3A:00.0",uuid="GPU-2c3d"}')
    ecc = 'nvidia_smi_ecc_errors_corrected_volatile_total{instance="10.0.1.11:9835",uuid="GPU-2c3d"}'
    temp = 'nvidia_smi_temperature_gpu{instance="10.0.1.11:9835",uuid="GPU-2c3d"}'
    dump = tmp_path / "dump.om"
    lines = [f"{ecc} {n} {1772409600 + 30 * i}" for i, n in enumerate((3, 3, 5))]
    lines += [f"{info} 1 {1772409600 + 30 * i}" for i in range(3)]
    lines += [f"{temp} {t} {1772409600 + 30 * i}" for i, t in enumerate((61, 62, 64))]
    dump.write_text("\n".join(lines) + "\n# EOF\n")
    samples = read_all(OpenMetricsReader(), dump, ctx).samples
    ecc_read = samples[samples["metric"] == "ecc_sbe_total"]
    assert list(ecc_read["value"]) == [3, 3, 5] and set(samples["entity"]) == {"sn01-b01/gpu2"}
    assert len(samples) == 6 and not ctx.mapper.values_not_read and ctx.rejects.total == 0

    def matrix(series_key: str, values: list[float]) -> dict:
        name, _, rest = series_key.partition("{")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        return {"metric": {"__name__": name, **labels},
                "values": [[1772409600 + 30 * i, str(v)] for i, v in enumerate(values)]}

    answer = tmp_path / "range.json"
    answer.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        matrix(ecc, [3, 3, 5]), matrix(info, [1, 1, 1]), matrix(temp, [61, 62, 64])]}}))
    samples = read_all(QueryRangeReader(), answer, ctx).samples
    assert sorted(samples["value"]) == [3, 3, 5, 61, 62, 64] and set(samples["entity"]) == {"sn01-b01/gpu2"}


def test_samples_of_a_gpu_no_info_series_names_are_dropped_and_counted(ctx, tmp_path):
    path = tmp_path / "no-info.prom"
    path.write_text("".join(f'nvidia_smi_temperature_gpu{{instance="10.0.1.11:9835",uuid="GPU-77"}} 60 '
                            f"{1772409600000 + 30000 * i}\n" for i in range(4)))
    batch = read_all(OpenMetricsReader(), path, ctx)
    assert len(batch.samples) == 0
    assert ctx.mapper.values_not_read == {NOT_JOINED: 4}
    # an info series with no node to put it on is rejected with its position, not guessed
    got = read(ctx, 'nvidia_smi_gpu_info{index="0",uuid="GPU-78",instance="10.9.9.9:9835"} 1\n')
    assert got == {} and "nvidia_smi_gpu_info names no node" in " ".join(ctx.rejects.messages)
