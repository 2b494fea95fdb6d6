"""End to end: the bundled trace through readers, rules, health and incidents."""

import io
import json

from daemon.ingest.formats import ColumnarWriter, ReadContext
from daemon.ingest.naming import SeriesMapper
from daemon.replay import replay
from daemon.ingest.trace import Trace
from detectors.schema import node_of


def run(paths, **kw) -> tuple[str, object]:
    out = io.StringIO()
    result = replay(paths, findings_out=out, **kw)
    return out.getvalue(), result


def test_bundled_trace_flags_the_hard_faults_and_nothing_else(trace_dir):
    text, result = run([trace_dir])
    findings = [json.loads(line) for line in text.splitlines()]
    labels = Trace.discover([trace_dir]).labels()
    faults = [lb for lb in labels if not lb.benign]
    assert len(faults) == 3
    for lb in faults:
        failed = [f for f in findings if f["entity"] == lb.entity and f["state"] == "failed"]
        assert failed, f"{lb.fault} on {lb.entity} not flagged failed"
        # Within one tick of the failure.
        assert lb.failure <= failed[0]["ts"] <= lb.failure + 30
    allowed = {lb.entity for lb in faults} | {node_of(lb.entity) for lb in faults}
    flags = [f for f in findings if f["state"] in ("subhealthy", "failed")]
    assert {f["entity"] for f in flags} <= allowed, [f for f in flags if f["entity"] not in allowed]
    assert result.rejects.total == 0
    assert result.stats.events_by_kind["xid"] > 0 and result.pipeline.resolver.merged > 0
    assert {i.entity for i in result.pipeline.incidents.open.values()} == {lb.entity for lb in faults}


def test_findings_have_the_architecture_form(trace_dir):
    text, _ = run([trace_dir])
    for line in text.splitlines():
        f = json.loads(line)
        assert list(f) == ["ts", "entity", "kind", "state", "score", "detector", "reasons"]
        assert f["state"] in ("healthy", "suspect", "subhealthy", "failed")
        assert isinstance(f["reasons"], list) and all(isinstance(r, str) for r in f["reasons"])


def test_findings_identical_whatever_file_order_chunk_size_or_format(trace_dir, tmp_path):
    base, _ = run([trace_dir])
    files = sorted(p for p in trace_dir.rglob("*") if p.is_file())
    reordered, _ = run(list(reversed(files)), chunk_rows=777)
    assert reordered == base
    # The same trace converted to the long columnar form replays the same.
    trace = Trace.discover([trace_dir])
    ctx = ReadContext(mapper=SeriesMapper(topology=trace.topology()))
    out = tmp_path / "long"
    w = ColumnarWriter(out)
    for path, reader in trace.files:
        for b in reader.read(path, ctx):
            w.write(b)
    w.close()
    converted, _ = run([out / "samples.parquet", out / "events.parquet", trace_dir / "topology.yaml"])
    assert converted == base


def test_stock_dcgm_exporter_without_ecc_counters_still_works_and_says_so(trace_dir, tmp_path, capsys):
    """Stock dcgm-exporter exports no ECC counters: the HBM fault is still caught from kernel Xids."""
    import gzip
    import shutil

    from daemon.cli.traces import print_summary
    from rich.console import Console

    stock = tmp_path / "stock"
    stock.mkdir()
    for p in trace_dir.iterdir():
        if p.is_file() and p.name != "dcgm-exporter.om.gz":
            shutil.copy(p, stock / p.name)
    with gzip.open(trace_dir / "dcgm-exporter.om.gz", "rt") as src, gzip.open(stock / "dcgm.om.gz", "wt") as dst:
        for line in src:
            if "DCGM_FI_DEV_ECC_" not in line:
                dst.write(line)
    text, result = run([stock])
    failed = {json.loads(x)["entity"] for x in text.splitlines() if json.loads(x)["state"] == "failed"}
    assert {"sn01-b02/gpu5", "sn01-b03/gpu2"} <= failed
    print_summary(Console(width=200), result)
    out = capsys.readouterr().out
    assert "ecc_dbe_total (double-bit ECC errors (failed))" in out and "ecc_sbe_total" in out


def test_kernel_xid_line_wins_over_the_gauge_at_the_same_time():
    from daemon.ingest.naming import SeriesMapper
    from daemon.judgement.resolve import EventResolver
    from detectors.schema import events_frame

    r = EventResolver(SeriesMapper())
    ev = events_frame([(10.0, "n/gpu0", "xid", 154, "error", "reported by dcgm-exporter DCGM_FI_DEV_XID_ERRORS",
                        "dcgm-exporter", None, None),
                       (10.0, "n/gpu0", "xid", 154, "error", "... to 0x2 (Node Reboot Required)", "kernel", None,
                        None)])
    out = r.merge_xids(ev, 30.0)
    assert list(out["source"]) == ["kernel"] and r.merged == 1


def test_other_vendors_recorded_samples_replay_to_findings(tmp_path):
    """AMD and Ascend exporter samples and an amdgpu kernel log, one trace: each vendor's fault is found."""
    import shutil
    from pathlib import Path

    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "exporters"
    for name in ("amd-device-metrics-exporter.prom", "npu-exporter.prom", "sn02-b01.dmesg"):
        shutil.copy(fixtures / name, tmp_path / name)
    (tmp_path / "topology.yaml").write_text(
        "racks:\n- name: r02\n  nodes:\n  - name: sn02-b01\n    accelerators:\n"
        "    - {index: 0, pci_bus_id: '0000:05:00.0'}\n    - {index: 1, pci_bus_id: '0000:26:00.0'}\n"
        "- name: r03\n  nodes:\n  - name: sn03-b01\n")
    text, result = run([tmp_path])
    flags = {(f["entity"], f["state"]): f for f in map(json.loads, text.splitlines())}
    assert result.rejects.total == 0
    npu = flags[("sn03-b01/npu1", "failed")]
    assert "Ascend fault code 0x80E18402 (MindCluster SeparateNPU" in " ".join(npu["reasons"])
    assert ("sn03-b01/hccn1:1", "failed") in flags  # its RoCE port went down
    amd = flags[("sn02-b01/gpu1", "failed")]
    assert "xgmi_wafl block" in " ".join(amd["reasons"]) or "ATHUB" in " ".join(amd["reasons"])
    assert ("sn02-b01/gpu0", "subhealthy") in flags  # poisoned (deferred) UMC errors
    assert not any(e in ("sn03-b01/npu0", "sn03-b01/hccn0:1") for e, _ in flags)
    assert result.stats.events_by_kind["ascend"] == 1 and result.stats.events_by_kind["amdgpu"] == 8


def test_a_features_only_replay_computes_the_same_frames_and_runs_no_detector(trace_dir):
    """``raswarden train`` replays with ``features_only``: the frames must be those the daemon's models see."""
    import numpy as np

    from daemon.judgement.pipeline import PipelineConfig

    def frames_of(config):
        seen = []

        def on_tick(now, pipeline):
            for kind, f in sorted((pipeline.features.frames or {}).items()):
                seen.append((now, kind, tuple(f.entities), f.X.copy()))

        text, result = run([trace_dir], config=config, on_tick=on_tick)
        return seen, text, result

    full, full_text, _ = frames_of(PipelineConfig(features=True))
    only, only_text, result = frames_of(PipelineConfig(features_only=True))
    assert full_text and not only_text and result.pipeline.detectors == []
    assert len(only) == len(full) > 100
    for (t1, k1, e1, x1), (t2, k2, e2, x2) in zip(full, only):
        assert (t1, k1, e1) == (t2, k2, e2)
        np.testing.assert_array_equal(x1, x2)


def test_a_gpu_replaced_in_its_slot_starts_afresh_and_its_old_identity_is_kept(tmp_path):
    """A recorded dcgm-exporter trace in which gpu1 of sn01-b01 comes back, after a gap, with another UUID and serial
    (a replaced GPU): the store keeps the old UUID with when it left, the new one is the slot's identity now, the
    replacement is counted once, and gpu0 (same UUID throughout) is untouched."""
    from daemon import metrics
    from daemon.store import EntityRow, Store

    t0 = 1_772_409_600
    lines = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge", "# TYPE DCGM_FI_DEV_POWER_USAGE gauge"]
    for k in range(240):  # two hours at 30 s; gpu1 out for ten minutes at 1 h, then its successor
        t = t0 + 30 * k
        for gpu in (0, 1):
            if gpu == 1 and 3600 <= 30 * k < 4200:
                continue
            uuid = f"GPU-{gpu}aaa" if gpu == 0 or 30 * k < 3600 else "GPU-1bbb"
            labels = f'gpu="{gpu}",UUID="{uuid}",pci_bus_id="00000000:{3 + gpu:02X}:00.0",modelName="NVIDIA H100",' \
                     'Hostname="sn01-b01"'
            lines.append(f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 55 {t * 1000}")
            lines.append(f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} 400 {t * 1000}")
    lines.append("# EOF")
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "dcgm.om").write_text("\n".join(lines) + "\n")
    before = metrics.PARTS_REPLACED._value.get()
    db = f"sqlite:///{tmp_path / 'rw.db'}"
    forgotten: list[str] = []

    def watch(pipeline) -> None:
        plain = pipeline.forget
        pipeline.forget = lambda scope: (forgotten.append(scope), plain(scope))

    _, result = run([trace], db_url=db, on_start=watch)
    assert metrics.PARTS_REPLACED._value.get() - before == 1
    assert forgotten == ["sn01-b01/gpu1"]  # that slot alone: gpu0 keeps what the detectors learned of it
    peer = next(d for d in result.pipeline.detectors if d.name == "peer")
    rows = peer._rows.index.rows_within("sn01-b01/gpu0")
    assert len(rows) == 1
    store = Store(db)
    with store.session() as s:
        gpu1, gpu0 = s.get(EntityRow, "sn01-b01/gpu1").attrs, s.get(EntityRow, "sn01-b01/gpu0").attrs
    store.close()
    assert gpu1["identity"] == "GPU-1bbb" and [r["identity"] for r in gpu1["replaced"]] == ["GPU-1aaa"]
    assert t0 + 3600 <= gpu1["replaced"][0]["until"] <= t0 + 4300
    assert gpu0 == {"identity": "GPU-0aaa"}


def test_a_trace_whose_hosts_log_in_local_time_replays_as_its_journal_does(trace_dir, tmp_path):
    """The bundled trace's kernel records written as a syslog kern.log in Beijing time (UTC+8, no zone on the line):
    with topology.yaml's ``timezone: Asia/Shanghai`` the replay fails the same parts at the same times as from the
    journal's UTC stamps; read as UTC, the Xids and link lines fall 8 hours after the telemetry and the GPU off the
    bus is no longer failed from its Xid 79 while its telemetry is current."""
    import datetime as dt
    import shutil
    import zoneinfo

    zone = zoneinfo.ZoneInfo("Asia/Shanghai")

    def failed(text: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for line in text.splitlines():
            f = json.loads(line)
            if f["state"] == "failed":
                out.setdefault(f["entity"], f["ts"])
        return out

    reference = failed(run([trace_dir])[0])
    local = tmp_path / "local"
    local.mkdir()
    for p in trace_dir.iterdir():
        if p.is_file() and p.name != "kernel.journal.json":
            shutil.copy(p, local / p.name)
    with open(trace_dir / "kernel.journal.json") as src, open(local / "kern.log", "w") as dst:
        for line in src:
            r = json.loads(line)
            if r.get("SYSLOG_IDENTIFIER", "kernel") != "kernel" and r.get("_TRANSPORT") != "kernel":
                continue
            at = dt.datetime.fromtimestamp(int(r["__REALTIME_TIMESTAMP"]) / 1e6, zone)
            dst.write(f"{at:%b} {at.day:2d} {at:%H:%M:%S} {r['_HOSTNAME']} kernel: {r['MESSAGE']}\n")
    topology = (local / "topology.yaml").read_text()
    utc = failed(run([local])[0])
    (local / "topology.yaml").write_text("timezone: Asia/Shanghai\n" + topology)
    text, result = run([local])
    assert failed(text) == reference and "sn01-b03/gpu2" in reference
    notes = result.pipeline.mapper.rejects.notes
    assert f"{local / 'kern.log'}: its times name no zone: read as Asia/Shanghai" in notes
    assert utc.get("sn01-b03/gpu2") != reference["sn01-b03/gpu2"]


def test_a_gb200_link_counting_recoveries_and_one_that_failed_its_recovery(tmp_path):
    """NVLink 5's counters through the whole pipeline: 18 GB200 trays (72 GPUs, labels as dcgm-exporter 4.x gives
    them, NVIDIA/dcgm-exporter issue 581) scraped every 60 s for 12 h. One GPU's link starts counting recoveries at
    8 h, one every 7 minutes (the rate of the link marin-community/marin issue 9086 saw go down days later); another
    GPU recovers once (a touched cable); a third fails a recovery at 10 h (the link declared down). The first is
    flagged sub-healthy on its scale-up link within two hours for its recoveries, the third for its failed
    recovery; nothing else."""
    t0 = 1_772_409_600
    lines = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
             "# TYPE DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS counter",
             "# TYPE DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS counter"]
    bad, touched, down = ("gb-07", 2), ("gb-11", 0), ("gb-15", 3)
    for k in range(720):
        t = t0 + 60 * k
        for tray in range(1, 19):
            host = f"gb-{tray:02d}"
            for gpu in range(4):
                labels = (f'gpu="{gpu}",UUID="GPU-{tray:02d}{gpu}",pci_bus_id="0000000{8 + gpu:X}:01:00.0",'
                          f'device="nvidia{gpu}",modelName="NVIDIA GB200",Hostname="{host}"')
                recoveries = 0
                if (host, gpu) == bad and k >= 480:
                    recoveries = (k - 480) // 7 + 1
                if (host, gpu) == touched and k >= 180:
                    recoveries = 1
                failed = 1 if (host, gpu) == down and k >= 600 else 0
                lines.append(f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 52 {t}")
                lines.append(f"DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS{{{labels}}} {recoveries} "
                             f"{t}")
                lines.append(f"DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS{{{labels}}} {failed} {t}")
    lines.append("# EOF")
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "dcgm.om").write_text("\n".join(lines) + "\n")
    text, result = run([trace])
    findings = [json.loads(line) for line in text.splitlines()]
    flags = [f for f in findings if f["state"] in ("subhealthy", "failed") and "/" in f["entity"]]
    assert {f["entity"] for f in flags} == {"gb-07/gpu2", "gb-15/gpu3"}, flags
    first = {e: min(f["ts"] for f in flags if f["entity"] == e) for e in ("gb-07/gpu2", "gb-15/gpu3")}
    assert t0 + 480 * 60 < first["gb-07/gpu2"] <= t0 + 600 * 60, first
    assert t0 + 600 * 60 <= first["gb-15/gpu3"] <= t0 + 602 * 60, first
    reasons = {f["entity"]: " ".join(f["reasons"]) for f in flags}
    assert "NVLink recoveries" in reasons["gb-07/gpu2"]
    assert "NVLink recovery failed +1" in reasons["gb-15/gpu3"]
    assert result.rejects.total == 0
