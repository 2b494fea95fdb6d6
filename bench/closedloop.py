#!/usr/bin/env python3
"""Closed loop over many seeds (issue 5's targets; not a test): every policy on every seed of a scenario.

Runs ``daemon.closedloop.run`` for the policies none, reactive and full on each seed, one process per seed
(``--jobs`` at a time), with the learned detectors of ``--model`` for the full policy (a model trained on
other scenarios and seeds). Prints the table (means ± standard deviation across seeds, policies side by
side) and writes every run as JSON (default bench/results/closedloop.json); an interrupted run resumes
from that file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import write_results  # noqa: E402

SCENARIOS = ROOT / "fixtures" / "scenarios"


def one_seed(scenario: str, seed: int, model: str, interval: float, policies: list[str]) -> list[dict]:
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from daemon.closedloop import LoopOptions, run
    from daemon.sim.engine import Simulator
    from daemon.sim.scenario import Scenario
    from detectors.model import ModelBundle

    bundle = ModelBundle.load(model) if model else None
    out = []
    for policy in policies:
        sc = Scenario.load(SCENARIOS / f"{scenario}.yaml")
        sc.seed = seed
        out.append(run(Simulator(sc, ROOT / "fixtures" / "faults"), policy, LoopOptions(interval_s=interval),
                       model=bundle).as_dict())
    return out


def seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("..")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="dense-all-classes")
    ap.add_argument("--seeds", default="1001..1020", help="e.g. 1001..1020 or 1,2,3")
    ap.add_argument("--model", default="", help="learned detectors for the full policy (raswarden train)")
    ap.add_argument("--interval", type=float, default=30.0)
    ap.add_argument("--policies", default="none,reactive,full")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "closedloop.json")
    ap.add_argument("--report", action="store_true", help="only print the table of --out")
    args = ap.parse_args()
    from daemon.closedloop import LoopOptions, LoopResult, table

    policies = args.policies.split(",")
    done: list[dict] = []
    if args.out.exists():
        done = [r for r in json.loads(args.out.read_text()).get("runs", []) if r["scenario"] == args.scenario]
    if not args.report:
        have = {r["seed"] for r in done if r["policy"] == policies[-1]}
        todo = [s for s in seeds(args.seeds) if s not in have]
        started = time.perf_counter()
        with ProcessPoolExecutor(args.jobs) as pool:
            futures = {pool.submit(one_seed, args.scenario, s, args.model, args.interval, policies): s for s in todo}
            for fut in as_completed(futures):
                rows = fut.result()
                done = [r for r in done if r["seed"] != futures[fut]] + rows
                print(f"seed {futures[fut]}: " + ", ".join(
                    f"{r['policy']} net loss {r['gpu_hours']['net_loss']:.0f} GPU-h" for r in rows) +
                      f" ({time.perf_counter() - started:.0f} s)", flush=True)
                opts = LoopOptions(interval_s=args.interval)
                write_results(args.out, {"scenario": args.scenario, "model": args.model,
                                         "options": {k: v for k, v in opts.__dict__.items() if k != "guards"}
                                         | {"guards": opts.guards.__dict__}, "runs": done})
    results = [LoopResult(r["scenario"], r["seed"], r["policy"], r["node_days"], r["gpu_hours"], r["drains_true"],
                          r["drains_false"], r["faults"], r["hard_faults"], r["acted_before_failure"],
                          r.get("symptom_to_action_s", []), r["wall_s"], r["ticks"]) for r in done]
    print(table(results))


if __name__ == "__main__":
    main()
