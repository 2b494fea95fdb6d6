import gzip
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.ingest.formats import OpenMetricsReader, sniff
from tests.daemon.ingest.formats.conftest import read_all

GOOD = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",pci_bus_id="00000000:18:00.0",Hostname="sn01-b01"} 41 1772409630'


def test_openmetrics_seconds_with_eof(tmp_path, ctx):
    p = tmp_path / "a.om"
    p.write_text(
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        f"{GOOD}\n" + GOOD.replace(" 41 1772409630", " 42 1772409660.5") + "\n# EOF\n"
    )
    b = read_all(OpenMetricsReader(), p, ctx)
    assert list(b.samples["ts"]) == [1772409630.0, 1772409660.5]
    assert list(b.samples["value"]) == [41.0, 42.0]
    assert set(b.samples["entity"]) == {"sn01-b01/gpu0"} and set(b.samples["metric"]) == {"gpu_temp_c"}


def test_prometheus_text_milliseconds_without_eof(tmp_path, ctx):
    p = tmp_path / "a.prom"
    p.write_text('node_infiniband_link_downed_total{device="mlx5_0",instance="10.0.1.11:9100",port="1"} 3 '
                 "1772409630000\n")
    b = read_all(OpenMetricsReader(), p, ctx)
    assert list(b.samples["ts"]) == [1772409630.0]
    assert list(b.samples["entity"]) == ["sn01-b01/mlx5_0:1"]
    assert list(b.samples["metric"]) == ["link_downed_total"]


def test_gzip_unit_from_magnitude(tmp_path, ctx):
    p = tmp_path / "a.om.gz"
    with gzip.open(p, "wt") as fh:
        fh.write(GOOD + "\n# EOF\n")
    assert isinstance(sniff(p), OpenMetricsReader)
    assert list(read_all(OpenMetricsReader(), p, ctx).samples["ts"]) == [1772409630.0]


def test_bad_lines_are_rejected_by_position_and_the_rest_read(tmp_path, ctx):
    p = tmp_path / "bad.om"
    p.write_text("\n".join([
        GOOD,
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="sn01-b01"} 41',  # no timestamp
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="sn01-b01"} NaN 1772409690',
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="sn01-b01"} +Inf 1772409690',
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="sn01-b01" 41 1772409690',  # unclosed
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="sn01-b01"} forty 1772409690',
        "garbage",
        'DCGM_FI_DEV_GPU_TEMP{Hostname="sn01-b01"} 41 1772409690',  # no gpu label
        GOOD.replace("1772409630", "1772409720"),
        "# EOF",
    ]) + "\n")
    b = read_all(OpenMetricsReader(), p, ctx)
    assert list(b.samples["ts"]) == [1772409630.0, 1772409720.0]
    rejects = ctx.rejects
    assert rejects.total == 7
    assert any(m.startswith(f"{p}:2: no timestamp") for m in rejects.messages)
    assert any(m.startswith(f"{p}:3: value is NaN") for m in rejects.messages)
    assert any(f"{p}:8: DCGM_FI_DEV_GPU_TEMP lacks the 'gpu' label" in m for m in rejects.messages)


def test_histograms_summaries_and_unknown_metrics_are_skipped(tmp_path, ctx):
    p = tmp_path / "h.om"
    p.write_text(
        "# TYPE http_request_duration_seconds histogram\n"
        'http_request_duration_seconds_bucket{le="0.1",instance="10.0.1.11:9100"} 3 1772409630\n'
        'http_request_duration_seconds_sum{instance="10.0.1.11:9100"} 0.2 1772409630\n'
        'go_gc_duration_seconds{quantile="0.5",instance="10.0.1.11:9100"} 0.001 1772409630\n'
        'node_infiniband_symbol_error_total{device="mlx5_0",instance="10.0.1.11:9100",port="1"} 1 1772409630 '
        '# {trace_id="abc"} 1 1772409630\n'
        "# EOF\n"
    )
    b = read_all(OpenMetricsReader(), p, ctx)
    assert list(b.samples["metric"]) == ["symbol_error_total"]
    assert ctx.rejects.total == 0
    assert ctx.mapper.unmapped_metrics["http_request_duration_seconds_bucket"] == 1


def test_throttle_bitmask_becomes_thermal_flag(tmp_path, ctx):
    p = tmp_path / "t.om"
    lines = [f'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{gpu="0",Hostname="sn01-b01"}} {v} {1772409630 + i}'
             for i, v in enumerate((0, 0x4, 0x40, 0x24))]
    p.write_text("\n".join(lines) + "\n# EOF\n")
    b = read_all(OpenMetricsReader(), p, ctx)
    assert list(b.samples["value"]) == [0.0, 0.0, 1.0, 1.0]


def test_truncated_file_keeps_what_came_before(tmp_path, ctx):
    p = tmp_path / "cut.om"
    p.write_text(GOOD + "\n" + GOOD.replace("1772409630", "17724"))
    b = read_all(OpenMetricsReader(), p, ctx)
    assert len(b.samples) >= 1 and b.samples["ts"].iloc[0] == 1772409630.0


def test_block_boundaries_do_not_split_lines(tmp_path, ctx):
    p = tmp_path / "many.om"
    p.write_text("".join(GOOD.replace("1772409630", str(1772409630 + 30 * i)) + "\n" for i in range(500)) + "# EOF\n")
    ctx.read_bytes = 97  # far smaller than a line
    ctx.chunk_rows = 7
    b = read_all(OpenMetricsReader(), p, ctx)
    assert len(b.samples) == 500 and ctx.rejects.total == 0


line_text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\n\r"), max_size=80)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.lists(line_text, max_size=20), positions=st.lists(st.integers(0, 20), max_size=20))
def test_hostile_lines_never_crash_and_good_lines_survive(tmp_path_factory, garbage, positions):
    from daemon.ingest.formats import ReadContext
    from daemon.ingest.naming import SeriesMapper

    good = [GOOD.replace("1772409630", str(1772409630 + 30 * i)) for i in range(10)]
    lines = list(good)
    for g, pos in zip(garbage, positions):
        if g.startswith(GOOD.split("{")[0]):
            continue  # a fuzzed line may itself be a valid sample of the same series
        lines.insert(min(pos, len(lines)), g)
    p = tmp_path_factory.mktemp("fuzz") / "f.om"
    p.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"))
    ctx = ReadContext(mapper=SeriesMapper())
    b = read_all(OpenMetricsReader(), p, ctx)
    got = set(b.samples["ts"]) if len(b.samples) else set()
    assert {1772409630.0 + 30 * i for i in range(10)} <= got
    assert all(math.isfinite(v) for v in b.samples["value"])


def test_fast_path_positions_count_comment_lines(tmp_path, ctx):
    p = tmp_path / "c.om"
    p.write_text("# HELP x y\n# TYPE x gauge\n" + GOOD + "\n# HELP z\n\n"
                 'DCGM_FI_DEV_GPU_TEMP{Hostname="sn01-b01"} 41 1772409690\n'
                 + GOOD.replace("NaN", "x").replace(" 41 ", " NaN ") + "\n# EOF\n")
    b = read_all(OpenMetricsReader(), p, ctx)
    assert len(b.samples) == 1
    assert ctx.rejects.messages[0].startswith(f"{p}:6: DCGM_FI_DEV_GPU_TEMP lacks the 'gpu' label")
    assert ctx.rejects.messages[1].startswith(f"{p}:7: value is NaN")


def test_a_scrape_saved_as_served_is_read_at_the_files_time(tmp_path, ctx):
    """``curl node:9400/metrics > FILE``: no timestamps, so the file's modification time, said in the summary; two
    scrapes in one such file cannot be dated and are refused; a recording with one line missing its timestamp is
    still a recording (that line rejected)."""
    import os

    from tests.conftest import REAL

    line = next(x for x in (REAL / "quoted" / "dcgm-exporter-k8s-hostname.prom").read_text().splitlines()
                if x.startswith("DCGM_FI_DEV_GPU_UTIL"))  # NVIDIA/dcgm-exporter issue 490, a host's own name
    saved = tmp_path / "scrape.prom"
    saved.write_text("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
                     + line + "\n" + line.replace('gpu="0"', 'gpu="1"').rsplit(" ", 1)[0] + " 87\n")
    os.utime(saved, (1772409630, 1772409630))
    s = read_all(OpenMetricsReader(), saved, ctx).samples
    assert list(zip(s["entity"], s["ts"], s["value"])) == [
        ("computeinstance-e00c1p6dpy98xytphp/gpu0", 1772409630.0, 0.0),
        ("computeinstance-e00c1p6dpy98xytphp/gpu1", 1772409630.0, 87.0)]
    assert ctx.rejects.total == 0
    assert "read at the file's modification time, 2026-03-02T00:00:30Z" in ctx.rejects.notes[0]
    twice = tmp_path / "twice.prom"
    twice.write_text(saved.read_text() * 2)
    assert read_all(OpenMetricsReader(), twice, ctx).samples.empty
    assert "several scrapes without timestamps" in ctx.rejects.messages[-1]
    mixed = tmp_path / "mixed.prom"
    mixed.write_text(line + " 1772409600000\n" + line + "\n")
    s = read_all(OpenMetricsReader(), mixed, ctx).samples
    assert s["ts"].tolist() == [1772409600.0] and "no timestamp" in ctx.rejects.messages[-1]


def test_a_saved_scrape_without_a_host_label_takes_its_files_name(tmp_path, ctx):
    """node_exporter's own end-to-end scrape (real, its repository's fixture) names no host on any series: saved as
    ``<host>.prom`` its series are that host's, as a dmesg is ``<host>.dmesg``; under a name that gives no host it is
    refused line by line, saying how to name it; a host a series names itself wins over the file's."""
    import os
    import shutil

    from daemon.ingest.formats.openmetrics import host_of_saved_scrape
    from tests.conftest import REAL

    real = REAL / "node_exporter_e2e" / "e2e-output.txt"
    s = read_all(OpenMetricsReader(), real, ctx).samples
    assert s.empty and ctx.rejects.total == 41
    assert "a scrape saved without timestamps takes its host from its file's name, '<host>.prom'" in \
        ctx.rejects.messages[0]
    named = tmp_path / "gpu-node-7.node_exporter.prom"
    shutil.copy(real, named)
    os.utime(named, (1772409630, 1772409630))
    ctx.rejects.messages.clear()
    s = read_all(OpenMetricsReader(), named, ctx).samples
    got = {(e, m): v for e, m, v in zip(s["entity"], s["metric"], s["value"])}
    assert got[("gpu-node-7/mlx4_0:1", "port_state")] == 4 and got[("gpu-node-7/mlx4_0:2", "link_downed_total")] == 0
    assert got[("gpu-node-7/mlx4_0:1", "xmit_wait_total")] == 4294967295
    assert got[("gpu-node-7/mc0", "edac_ue_total")] == 5
    assert {e.split("/")[0] for e in s["entity"]} == {"gpu-node-7"} and len(s) == 41 and not ctx.rejects.messages
    assert "taken to be on gpu-node-7 (the file's name)" in ctx.rejects.notes[-1]
    own = tmp_path / "gpu-node-8.prom"
    own.write_text(GOOD.rsplit(" ", 1)[0] + "\n" + 'node_infiniband_state_id{device="mlx5_0",port="1"} 4\n')
    assert sorted(read_all(OpenMetricsReader(), own, ctx).samples["entity"]) == ["gpu-node-8/mlx5_0:1",
                                                                                "sn01-b01/gpu0"]
    assert [host_of_saved_scrape(tmp_path / n) for n in (
        "sn01-b07.prom", "sn01-b07.cluster.local.metrics.gz", "10.0.1.11.prom", "node-exporter.prom", "metrics.txt",
        "sn01-b07.dmesg", ".prom")] == ["sn01-b07", "sn01-b07", "10.0.1.11", None, None, None, None]


def test_blocks_scanned_in_threads_read_as_one_after_another(tmp_path):
    """The reader's blocks are scanned side by side in threads: the same samples in the same order, and the same
    rejects with the same line numbers, as scanned in turn (small blocks, bad lines and a non-UTF-8 byte among
    them, so that some blocks go the line-by-line way)."""
    from daemon.ingest.formats import ReadContext
    from daemon.ingest.naming import SeriesMapper

    lines = []
    for i in range(600):
        lines.append(GOOD.replace(" 41 1772409630", f" {40 + i % 7} {1772409630 + 30 * i}").replace(
            'gpu="0"', f'gpu="{i % 3}"'))
        if i % 97 == 5:
            lines.append(GOOD.replace(" 41 ", " forty-one "))
        if i % 151 == 9:
            lines.append(GOOD.replace(" 41 ", " NaN "))
    raw = ("\n".join(lines) + "\n# EOF\n").encode()
    raw = raw.replace(b'Hostname="sn01-b01"} 44', b'Hostname="sn01-b01\xff"} 44', 1)
    p = tmp_path / "threads.om"
    p.write_bytes(raw)
    results = []
    for threads in (1, 3):
        ctx = ReadContext(mapper=SeriesMapper(), read_bytes=2048, chunk_rows=100, scan_threads=threads)
        b = read_all(OpenMetricsReader(), p, ctx)
        results.append((b.samples.astype({"entity": str, "metric": str}).to_dict("list"), ctx.rejects.messages,
                        dict(ctx.rejects.counts)))
    assert results[0] == results[1]
    assert len(results[0][0]["ts"]) >= 590 and results[0][2]  # most lines read, and the bad ones rejected


def test_an_ipmi_exporters_nan_in_a_dump_is_counted_on_either_path(tmp_path, ctx):
    """ipmi_exporter's NaN (N/A) in a dump with timestamps: counted as not read, not rejected, on the fast path (clean
    lines) and on the line-by-line one (a bad line beside it); another exporter's NaN is rejected on both."""
    lines = ['ipmi_temperature_state{id="18",name="Inlet Temp",node="sn01-b01"} NaN 1772409630',
             'ipmi_temperature_state{id="18",name="Inlet Temp",node="sn01-b01"} 2 1772409660',
             'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="sn01-b01"} NaN 1772409690']
    for name, extra in (("clean.prom", []), ("mixed.prom", ["garbage"])):
        ctx.rejects.__init__()
        ctx.mapper.values_not_read.clear()
        p = tmp_path / name
        p.write_text("\n".join(lines + extra) + "\n")
        s = read_all(OpenMetricsReader(), p, ctx).samples
        assert list(zip(s["entity"], s["value"])) == [("sn01-b01/bmc-18-Inlet_Temp", 2.0)], name
        assert ctx.mapper.values_not_read == {"the exporter's N/A (no reading)": 1}, name
        assert ctx.rejects.total == 1 + len(extra) and f"{p}:3" in ctx.rejects.messages[0], name
