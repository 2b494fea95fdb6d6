#!/usr/bin/env python3
"""Detection benchmark: one tick (features + every detector + health + incidents) at scale (issue 4; not a test).

For 1,000, 10,000 and 100,000 accelerators (with half as many fabric ports), drives the simulator's
telemetry for the sizes through ``Pipeline.tick`` in its own process and reports the median and worst
wall time per tick after warm-up, and peak RSS. Target: ≤ 2 s per tick at 100,000 on one core, peak ≤ 4 GB,
growing linearly. Prints a table and writes JSON (default bench/results/detect.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import peak_rss_mb, run_phase, write_results  # noqa: E402


def phase(accelerators: int, ticks: int, model: str = "") -> dict:
    import numpy as np

    from daemon.ingest.naming import SeriesMapper
    from daemon.judgement.pipeline import Pipeline, PipelineConfig
    from lab.sim.batches import chunk_to_batch
    from lab.sim.simulator import Simulator
    from lab.sim.scenario import Scenario
    from daemon.ingest.timeorder import tick_index

    sc = Scenario.from_dict({"name": "bench", "seed": 1, "topology": {"accelerators": accelerators},
                             "duration": f"{(ticks + 1) * 30}s", "resolution": "30s", "profile": "full",
                             "faults": [{"entity": "random", "fault": "hbm_degradation", "template": "b",
                                         "onset": "0s", "failure": "1h"}]})
    sim = Simulator(sc, ROOT / "lab" / "library" / "faults")
    from detectors.bundle import ModelBundle

    bundle = ModelBundle.load(model) if model else None
    pipeline = Pipeline(SeriesMapper(), PipelineConfig(interval_s=30.0, model=bundle))
    times = []
    for chunk in sim.chunks(chunk_steps=1):
        batch = chunk_to_batch(sim, chunk)
        now = float(tick_index(np.array([chunk.ts[-1]]), 30.0)[0] * 30.0)
        t = time.perf_counter()
        pipeline.tick(now, batch)
        times.append(time.perf_counter() - t)
    warm = sorted(times[2:]) or sorted(times)
    tick_peak = peak_rss_mb()
    # the warm state a restart or a standby takes up (daemon/judgement/warmstate.py): its size and cost, each way.
    # The ticking pipeline saves it; a restarted daemon or a standby takes it up, in a process of its own: the
    # pipeline that saved it is let go first, so the peak is one daemon's, not two pipelines' in one process
    import gc

    from daemon.judgement import warmstate

    t = time.perf_counter()
    state = warmstate.capture(pipeline, now)
    capture_s = time.perf_counter() - t
    del pipeline
    gc.collect()
    t = time.perf_counter()
    taken = warmstate.take_up(Pipeline(SeriesMapper(), PipelineConfig(interval_s=30.0, model=bundle)), state, now,
                              3600.0, "bench")
    take_up_s = time.perf_counter() - t
    return {"accelerators": accelerators, "ports": sim.topo.n_ports, "ticks": len(times),
            "samples_per_tick": int(len(batch.samples)),
            "model": bool(model), "tick_median_s": round(warm[len(warm) // 2], 3), "tick_max_s": round(warm[-1], 3),
            # the fastest tick: what the code costs where the machine's neighbours took nothing (this machine's
            # median swings by a quarter from one minute to the next; compare code with code on this figure)
            "tick_min_s": round(warm[0], 3),
            "warm_state_kb": state.size // 1024, "warm_capture_s": round(capture_s, 3),
            "warm_take_up_s": round(take_up_s, 3) if taken else None, "tick_peak_rss_mb": tick_peak,
            "peak_rss_mb": peak_rss_mb()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--ticks", type=int, default=12)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "detect.json")
    ap.add_argument("--model", default="", help="also run the learned detectors of this model (raswarden train)")
    ap.add_argument("--phase", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(int(args.phase[0]), int(args.phase[1]), args.phase[2])))
        return
    rows = []
    for size in (int(x) for x in args.sizes.split(",")):
        size -= size % 8
        row = run_phase(__file__, str(size), str(args.ticks), args.model)
        rows.append(row)
        print(f"{row['accelerators']:>7,} accelerators {row['ports']:>6,} ports {row['samples_per_tick']:>10,} "
              f"samples/tick: median {row['tick_median_s']:.3f} s, fastest {row['tick_min_s']:.3f} s, "
              f"max {row['tick_max_s']:.3f} s, "
              f"warm state {row['warm_state_kb']:,} kB (saved in {row['warm_capture_s']:.2f} s, taken up in "
              f"{row['warm_take_up_s']} s), "
              f"peak {row['peak_rss_mb']:,} MB (ticking {row['tick_peak_rss_mb']:,})"
              f"{' (with the learned detectors)' if args.model else ''}", flush=True)
    write_results(args.out, {"rows": rows})


if __name__ == "__main__":
    main()
