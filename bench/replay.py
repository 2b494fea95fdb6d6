#!/usr/bin/env python3
"""Replay benchmark: reader and end-to-end throughput, peak memory (issue 2; not a test).

Generates a 640-accelerator supernode trace (80 blades × 8 GPUs × 12 dcgm-exporter metrics with the stock
label set, 320 InfiniBand ports × 7 node_exporter metrics; a healthy fleet at work, or with ``--values random``
white noise) at 15 s (``--step``, ``--nodes``: other sampling and
fleets, e.g. ``--hours 336 --step 300 --nodes 64``, two weeks of 5-minute data of issue 56), written one series
after another as ``promtool tsdb dump-openmetrics`` does, then measures in separate processes (so each peak RSS is
its own):

* samples/s of our OpenMetrics reader, and of prometheus_client's text parser on a prefix of the same file;
* samples/s of the Parquet reader (on the same trace converted);
* end-to-end replay from OpenMetrics and from Parquet (samples/s, wall time, peak RSS);
* peak RSS of the Parquet replay at a quarter of the length, to show memory does not grow with it.

Prints a table and writes JSON (default bench/results/replay.json).
Targets: OpenMetrics ≥ 500,000 samples/s and ≥ 50× prometheus_client; Parquet ≥ 5,000,000 samples/s;
end-to-end ≥ 300,000 samples/s from OpenMetrics; 24 h from Parquet in under 2 minutes; issue 56's end to end from
OpenMetrics, ≥ 1,000,000 samples/s at 15 s and ≥ 500,000 on 5-minute data.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import peak_rss_mb, run_phase, write_results  # noqa: E402

DCGM = ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_XID_ERRORS"]
NODE = ["node_infiniband_symbol_error_total", "node_infiniband_link_error_recovery_total",
        "node_infiniband_link_downed_total", "node_infiniband_port_errors_received_total",
        "node_infiniband_port_data_received_bytes_total", "node_infiniband_port_data_transmitted_bytes_total",
        "node_infiniband_state_id"]

_PORT_ERRORS_PER_H = {"node_infiniband_symbol_error_total": 0.5, "node_infiniband_link_error_recovery_total": 0.01,
                      "node_infiniband_link_downed_total": 0.0005, "node_infiniband_port_errors_received_total": 0.2}


def _fleet_values(rng: np.random.Generator, nodes: int, n: int, step: int) -> dict[str, np.ndarray]:
    """Each DCGM gauge of a healthy fleet at work, [node, gpu, step]: every node runs a job or idles for hours at a
    time (busy GPUs near 95 % utilisation and 600 W, idle ones near 0 % and 90 W), temperatures follow power with
    a GPU's own few degrees of slot and a degree of noise, clocks hold their level. What replay of a fleet's recorded
    telemetry meets; white noise (``--values random``) makes four GPUs in ten flap between sub-healthy and healthy."""
    hours = np.arange(n) * step / 3600.0
    busy = np.zeros((nodes, n), dtype=bool)
    for b in range(nodes):  # a job or an idle spell of 1 to 12 hours, in turn
        at, state = 0.0, bool(rng.random() < 0.8)
        while at < hours[-1] + 1:
            span = rng.uniform(1, 12)
            busy[b, (hours >= at) & (hours < at + span)] = state
            at, state = at + span, not state
    busy = np.repeat(busy[:, None, :], 8, axis=1)
    shape = busy.shape
    util = np.where(busy, rng.normal(95, 2, shape).clip(80, 100), rng.normal(0.5, 0.5, shape).clip(0, 5))
    power = np.where(busy, rng.normal(600, 15, shape), rng.normal(90, 3, shape))
    slot = rng.normal(0, 2, (nodes, 8, 1))
    temp = 28 + 0.07 * power + slot + rng.normal(0, 0.7, shape)
    return {
        "DCGM_FI_DEV_GPU_UTIL": util.round(), "DCGM_FI_DEV_POWER_USAGE": power.round(3),
        "DCGM_FI_DEV_GPU_TEMP": temp.round(), "DCGM_FI_DEV_MEMORY_TEMP": (temp + 6 + rng.normal(0, 0.7, shape)).round(),
        "DCGM_FI_DEV_SM_CLOCK": np.where(busy, 1980, 345) - 15 * rng.integers(0, 2, shape),
        "DCGM_FI_DEV_MEM_CLOCK": np.full(shape, 2619),
        "DCGM_FI_DEV_MEM_COPY_UTIL": np.where(busy, rng.integers(20, 60, shape), 0),
        "DCGM_FI_DEV_FB_USED": np.where(busy, 71_000 + rng.integers(0, 800, shape), 0),
        "DCGM_FI_DEV_FB_FREE": np.where(busy, 10_000 - rng.integers(0, 800, shape), 81_000),
    }


def generate(path: Path, hours: float, step: int = 15, nodes: int = 80, values: str = "fleet") -> int:
    """Write the trace; returns the number of samples. ``values``: ``fleet`` (a healthy fleet at work, see
    :func:`_fleet_values`) or ``random`` (each gauge white noise over its range, the trace before 2026-12-04)."""
    rng = np.random.default_rng(7)
    t0 = 1772409600
    n = int(hours * 3600 / step)
    ts = [str(t0 + step * (i + 1)) for i in range(n)]
    fleet = _fleet_values(rng, nodes, n, step) if values == "fleet" else None
    total = 0
    with open(path, "w") as fh:
        for m in DCGM:
            fh.write(f"# HELP {m} {m}.\n# TYPE {m} {'counter' if 'COUNTER' in m or 'ENERGY' in m else 'gauge'}\n")
            for b in range(nodes):
                host = f"sn01-b{b + 1:02d}"
                for g in range(8):
                    labels = (f'gpu="{g}",UUID="GPU-{b:08x}-{g:04x}-4e1a-9c2d-5f6a7b8c9d0e",pci_bus_id="00000000:'
                              f'{0x18 + 0x10 * g:02X}:00.0",device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",'
                              f'Hostname="{host}",DCGM_FI_DRIVER_VERSION="550.90.07"')
                    if m.endswith("CONSUMPTION"):
                        per_step = (fleet["DCGM_FI_DEV_POWER_USAGE"][b, g] * step * 1000).astype(np.int64) if fleet \
                            else rng.integers(9_000_000, 12_000_000, n)
                        vals = np.cumsum(per_step).astype(str)
                    elif m.endswith("COUNTER"):
                        vals = np.cumsum(rng.poisson(0.01, n)).astype(str)
                    elif m.endswith("XID_ERRORS"):
                        vals = np.zeros(n, dtype=np.int64).astype(str)
                    elif fleet is not None:
                        vals = np.char.mod("%g", fleet[m][b, g])
                    elif m.endswith("TEMP"):
                        vals = rng.integers(45, 75, n).astype(str)
                    else:
                        vals = rng.integers(0, 2000, n).astype(str)
                    prefix = f"{m}{{{labels}}} "
                    fh.write("".join(f"{prefix}{v} {t}\n" for v, t in zip(vals, ts)))
                    total += n
        for m in NODE:
            fh.write(f"# HELP {m} {m}.\n# TYPE {m} {'gauge' if m.endswith('_id') else 'counter'}\n")
            for b in range(nodes):
                for p in range(4):
                    prefix = f'{m}{{device="mlx5_{p}",instance="sn01-b{b + 1:02d}:9100",job="node",port="1"}} '
                    if m.endswith("_id"):
                        vals = np.full(n, 4).astype(str)
                    elif "bytes" in m:
                        vals = np.cumsum(rng.integers(10**11, 2 * 10**11, n)).astype(str)
                    else:  # a healthy link's errors an hour (white noise: 0.002 a sample, 11 link downs a day at 15 s)
                        lam = 0.002 if fleet is None else _PORT_ERRORS_PER_H[m] * step / 3600
                        vals = np.cumsum(rng.poisson(lam, n)).astype(str)
                    fh.write("".join(f"{prefix}{v} {t}\n" for v, t in zip(vals, ts)))
                    total += n
        fh.write("# EOF\n")
    return total


def phase(name: str, path: str, extra: str) -> dict:
    """Run one measurement in this process; returns its figures."""
    from daemon.ingest.formats import ColumnarReader, ColumnarWriter, OpenMetricsReader, ReadContext
    from daemon.replay import replay

    p = Path(path)
    t = time.perf_counter()
    if name == "openmetrics_reader":
        ctx = ReadContext()
        n = sum(len(b.samples) for b in OpenMetricsReader().read(p, ctx))
    elif name == "prometheus_client":
        from prometheus_client.parser import text_string_to_metric_families

        lines = []
        with open(p) as fh:
            for line in fh:
                lines.append(line)
                if len(lines) >= int(extra):
                    break
        text = "".join(lines)
        t = time.perf_counter()
        n = sum(len(f.samples) for f in text_string_to_metric_families(text))
    elif name == "convert":
        ctx = ReadContext()
        w = ColumnarWriter(Path(extra))
        n = 0
        for b in OpenMetricsReader().read(p, ctx):
            w.write(b)
            n += len(b.samples)
        w.close()
    elif name == "parquet_reader":
        ctx = ReadContext()
        n = sum(len(b.samples) for b in ColumnarReader().read(p, ctx))
    elif name in ("replay_openmetrics", "replay_parquet"):
        r = replay([p], spill_dir=Path(extra) if extra else None)
        n = r.stats.samples
    else:
        raise SystemExit(f"unknown phase {name}")
    wall = time.perf_counter() - t
    return {"phase": name, "samples": n, "seconds": round(wall, 2), "samples_per_s": round(n / wall),
            "peak_rss_mb": peak_rss_mb()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hours", type=float, default=24.0, help="trace length (default 24)")
    ap.add_argument("--step", type=int, default=15, help="seconds between samples (default 15; 300: 5-minute data)")
    ap.add_argument("--nodes", type=int, default=80, help="blades of 8 GPUs and 4 ports (default 80: 640 GPUs)")
    ap.add_argument("--values", choices=("fleet", "random"), default="fleet",
                    help="the gauges: a healthy fleet at work (default) or white noise over each range (the trace "
                         "before 2026-12-04: four GPUs in ten flap between sub-healthy and healthy)")
    ap.add_argument("--workdir", type=Path, default=None, help="where to write the trace (default a temp dir)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "replay.json")
    ap.add_argument("--phase", nargs=3, metavar=("NAME", "PATH", "EXTRA"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(*args.phase)))
        return
    work = Path(args.workdir or tempfile.mkdtemp(prefix="raswarden-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {"hours": args.hours, "step_s": args.step, "nodes": args.nodes, "values": args.values,
                     "cpu": os.cpu_count(),
                     "python": sys.version.split()[0]}
    om = work / "trace.om"
    t = time.perf_counter()
    results["samples"] = generate(om, args.hours, args.step, args.nodes, args.values)
    results["generate_s"] = round(time.perf_counter() - t, 1)
    results["file_mb"] = round(om.stat().st_size / 1e6)
    print(f"generated {results['samples']:,} samples ({results['file_mb']:,} MB) in {results['generate_s']} s",
          flush=True)
    rows = []
    for name, path, extra in (
        ("openmetrics_reader", om, ""),
        ("prometheus_client", om, "200000"),
        ("convert", om, str(work / "long")),
        ("parquet_reader", work / "long" / "samples.parquet", ""),
        ("replay_parquet", work / "long" / "samples.parquet", str(work / "spill")),
        ("replay_openmetrics", om, str(work / "spill")),
    ):
        r = run_phase(__file__, name, str(path), extra)
        rows.append(r)
        print(f"{r['phase']:<20} {r['samples']:>12,} samples {r['seconds']:>8.1f} s {r['samples_per_s']:>11,}/s "
              f"peak {r['peak_rss_mb']:>6,} MB", flush=True)
    by = {r["phase"]: r for r in rows}
    # Memory independence: the same replay on a quarter of the trace.
    short = work / "short.om"
    generate(short, args.hours / 4, args.step, args.nodes, args.values)
    run_phase(__file__, "convert", str(short), str(work / "short-long"))
    quarter = run_phase(__file__, "replay_parquet", str(work / "short-long" / "samples.parquet"), str(work / "spill-q"))
    results["phases"] = rows
    results["replay_parquet_quarter_length"] = quarter
    results["ratios"] = {
        "openmetrics_vs_prometheus_client": round(by["openmetrics_reader"]["samples_per_s"]
                                                  / by["prometheus_client"]["samples_per_s"], 1),
        "peak_rss_full_over_quarter": round(by["replay_parquet"]["peak_rss_mb"] / quarter["peak_rss_mb"], 2),
    }
    targets = {
        "openmetrics_reader >= 500k/s": by["openmetrics_reader"]["samples_per_s"] >= 500_000,
        "openmetrics >= 50x prometheus_client": results["ratios"]["openmetrics_vs_prometheus_client"] >= 50,
        "parquet_reader >= 5M/s": by["parquet_reader"]["samples_per_s"] >= 5_000_000,
        "replay_openmetrics >= 300k/s": by["replay_openmetrics"]["samples_per_s"] >= 300_000,
        "replay_parquet < 120 s": by["replay_parquet"]["seconds"] < 120 * args.hours / 24,
    }
    # issue 56's, on a fleet's telemetry: a 640-accelerator day at 15 s, and 5-minute data
    if args.step <= 15:
        targets["replay_openmetrics >= 1M/s (issue 56)"] = by["replay_openmetrics"]["samples_per_s"] >= 1_000_000
    elif args.step >= 300:
        targets["replay_openmetrics >= 500k/s (issue 56)"] = by["replay_openmetrics"]["samples_per_s"] >= 500_000
    results["targets"] = targets
    print(f"quarter-length parquet replay peak {quarter['peak_rss_mb']:,} MB "
          f"(full/quarter = {results['ratios']['peak_rss_full_over_quarter']})")
    print(f"openmetrics / prometheus_client = {results['ratios']['openmetrics_vs_prometheus_client']}x")
    for k, ok in targets.items():
        print(f"  {'met ' if ok else 'MISS'} {k}")
    write_results(args.out, results)


if __name__ == "__main__":
    main()
