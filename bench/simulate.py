#!/usr/bin/env python3
"""Simulator benchmark: generation speed and memory (issue 3; not a test).

For each size, generates a scalex640-preset scenario with listed faults and confounders and measures, in
its own process: samples generated per second in memory (the closed-loop path), and, with ``--write``,
per second written as Parquet; wall time and peak RSS. The 100,000-accelerator, 1-hour run shows the
simulator generates at that scale on this machine. Prints a table and writes JSON
(default bench/results/simulate.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import peak_rss_mb, run_phase, write_results  # noqa: E402


def scenario(accelerators: int, hours: float) -> dict:
    return {
        "name": f"bench-{accelerators}", "seed": 1, "topology": {"accelerators": accelerators},
        "duration": f"{hours}h", "resolution": "15s", "profile": "full",
        "faults": [
            {"entity": "random", "fault": "hbm_degradation", "template": "a", "onset": "5m", "failure": f"{hours}h"},
            {"entity": "random", "fault": "gpu_off_bus", "template": "a", "onset": "5m", "failure": f"{hours}h"},
            {"entity": "random", "fault": "link_degradation", "template": "a", "onset": "5m", "failure": f"{hours}h"},
            {"entity": "random", "fault": "benign_coolant_swing", "template": "b", "onset": "10m"},
            {"entity": "random", "fault": "benign_reboot", "template": "a", "onset": "20m"},
        ],
    }


def phase(accelerators: int, hours: float, out: str) -> dict:
    from lab.sim.batches import chunk_to_batch
    from lab.sim.simulator import Simulator
    from lab.sim.scenario import Scenario
    from lab.sim.writer import simulate_to

    sc = Scenario.from_dict(scenario(accelerators, hours))
    t = time.perf_counter()
    sim = Simulator(sc, ROOT / "lab" / "library" / "faults")
    if out:
        n = simulate_to(sim, Path(out), "parquet").samples
    else:
        n = 0
        for chunk in sim.chunks():
            n += len(chunk_to_batch(sim, chunk).samples)
    wall = time.perf_counter() - t
    return {"accelerators": accelerators, "hours": hours, "mode": "parquet" if out else "memory", "samples": n,
            "seconds": round(wall, 2), "samples_per_s": round(n / wall),
            "peak_rss_mb": peak_rss_mb()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="640,10000,100000", help="accelerator counts (default 640,10000,100000)")
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--write", action="store_true", help="also write each size as Parquet")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "simulate.json")
    ap.add_argument("--phase", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        size, hours, out = args.phase
        print(json.dumps(phase(int(size), float(hours), out if out != "-" else "")))
        return
    rows = []
    for size in (int(x) for x in args.sizes.split(",")):
        modes = ["-"] + ([tempfile.mkdtemp(prefix="raswarden-sim-")] if args.write else [])
        for out in modes:
            row = run_phase(__file__, str(size), str(args.hours), out)
            rows.append(row)
            print(f"{row['accelerators']:>7,} accelerators {row['hours']:g} h {row['mode']:<8} "
                  f"{row['samples']:>13,} samples {row['seconds']:>8.1f} s {row['samples_per_s']:>11,}/s "
                  f"peak {row['peak_rss_mb']:>6,} MB", flush=True)
    write_results(args.out, {"rows": rows})


if __name__ == "__main__":
    main()
