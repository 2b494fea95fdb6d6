#!/usr/bin/env python3
"""Where the simulator puts a GPU at its slowdown limit during its rack's coolant swing (not a test).

That is the only case ``detectors/shared_heat.py`` judges: a GPU at or over 87 °C, or throttled, while a
``benign_coolant_swing`` of its rack is on (to ten minutes after it). Scanning the simulator's traces (no pipeline:
seconds a run) says which runs of record a change there can touch, so only those need running again
(docs/detectors.md, 2026-11-27). Runs: the matrix's (``--matrix dense`` or ``quiet``, its cells and seeds) or a
scenario's seeds (``--scenario``, with ``--profile``). Prints one line per run that has such a GPU, a count of the
others, and writes JSON (default bench/results/swing_limits.json).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import seeds, write_results  # noqa: E402

SLOWDOWN_C = 87.0
AFTER_S = 600.0


def hot_in_swings(sim) -> dict[str, dict]:
    """GPUs at the limit (or throttled) during a swing of their rack: entity -> samples and the first one's time."""
    swings = [(lab["entity"], lab["onset"], lab["failure"] or lab["onset"]) for lab in sim.labels()
              if lab["fault"] == "benign_coolant_swing"]
    racks = list(sim.topo.racks)
    hits: dict[str, dict] = {}
    for chunk in sim.chunks():
        hot = ((chunk.gpu["gpu_temp_c"] >= SLOWDOWN_C) | (chunk.gpu["throttle_thermal"] > 0)) & chunk.gpu_emitted()
        if not hot.any():
            continue
        for rack, on, off in swings:
            inside = (chunk.ts >= on) & (chunk.ts <= off + AFTER_S)
            if not inside.any() or rack not in racks:
                continue
            rows = np.flatnonzero(sim.gpu_rack == racks.index(rack))
            seen = hot[rows][:, inside]
            for i in np.flatnonzero(seen.any(axis=1)):
                name = sim.gpu_ids[int(rows[i])]
                hit = hits.setdefault(name, {"samples": 0, "first": float(chunk.ts[inside][seen[i]][0])})
                hit["samples"] += int(seen[i].sum())
    faults = {lab["entity"]: lab["fault"] for lab in sim.labels() if lab.get("kind") == "accelerator"}
    for name, hit in hits.items():
        hit["fault"] = faults.get(name)
    return hits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", choices=("dense", "quiet"), help="the matrix's runs of this kind")
    ap.add_argument("--sampling", default="15s,60s,300s,mixed")
    ap.add_argument("--noise", default="quiet,realistic,noisy")
    ap.add_argument("--warmup", default="24h", help="dense runs' warm-up, as the matrix of record ran them")
    ap.add_argument("--scenario", help="a bundled scenario's name instead (e.g. scalex640-30d, dense-template-a)")
    ap.add_argument("--profile", help="with --scenario: the exporter profile (full, stock)")
    ap.add_argument("--seeds", required=True)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "swing_limits.json"))
    args = ap.parse_args()

    from lab.bundled import FAULTS, SCENARIOS
    from lab.matrix import scenario_for
    from lab.sim.faults import load_library, parse_duration
    from lab.sim.scenario import Scenario
    from lab.sim.simulator import Simulator

    library = load_library(FAULTS)
    runs = []
    if args.matrix:
        warmup = parse_duration(args.warmup, "warmup") if args.matrix == "dense" else 0.0
        for sampling in args.sampling.split(","):
            for noise in args.noise.split(","):
                for seed in seeds(args.seeds):
                    d = scenario_for(args.matrix, sampling, noise, seed, warmup)
                    runs.append(({"kind": args.matrix, "sampling": sampling, "noise": noise, "seed": seed},
                                 Scenario.from_dict(d, d["name"])))
    elif args.scenario:
        for seed in seeds(args.seeds):
            sc = Scenario.load(SCENARIOS / f"{args.scenario}.yaml")
            sc.seed = seed
            if args.profile:
                sc.profile = args.profile
            runs.append(({"scenario": args.scenario, "profile": sc.profile, "seed": seed}, sc))
    else:
        ap.error("give --matrix or --scenario")
    results, clear = [], 0
    for what, sc in runs:
        hits = hot_in_swings(Simulator(sc, library))
        results.append({**what, "gpus": hits})
        if hits:
            print(" ".join(f"{k}={v}" for k, v in what.items()), hits, flush=True)
        else:
            clear += 1
    print(f"{len(runs) - clear} of {len(runs)} runs have a GPU at the slowdown limit in its rack's coolant swing")
    write_results(Path(args.out), {"runs": results})


if __name__ == "__main__":
    main()
