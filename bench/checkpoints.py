#!/usr/bin/env python3
"""Checkpoint intervals over many seeds (issue 29's targets; not a test): the closed loop's ``full`` policy with the
jobs checkpointing every hour (``fixed``), at the best fixed interval for their size a job could pick without
raswarden (``daly``: the fleet's long-run failure rate), at the best for the seed's own failures, which no job could
know beforehand (``oracle``), and on raswarden's advice (``advised``), on the same seeds (docs/playbooks.md,
"Checkpoint advice").

Each (seed, checkpoint policy) runs in a process of its own (``bench/closedloop.py``'s ``one_run``), ``--jobs`` at a
time, and is written to ``--out`` as it finishes (an interrupted run resumes; ``--with`` joins other writers' files,
e.g. ``bench/closedloop.py --checkpoint-policy`` runs). Prints the comparison table (means with their spread, the
seeds' differences between policies, work lost per failure against half the interval then) and writes it
beside the runs. A 30-day scalex640 run takes about 4 minutes of a core at a 5-minute detection tick.
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

from closedloop import one_run  # noqa: E402
from common import cores, seeds, write_results  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="scalex640-30d")
    ap.add_argument("--seeds", default="2001..2020", help="e.g. 2001..2020 or 2001,2002")
    ap.add_argument("--policies", default="fixed,daly,oracle,advised", help="checkpoint policies to compare")
    ap.add_argument("--tick", type=float, default=300.0, help="raswarden's detection tick (s; the world steps 30 s)")
    ap.add_argument("--jobs", type=int, default=cores(), help="processes at once (default: the cores this may use)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "checkpoints.json")
    ap.add_argument("--with", dest="extra", type=Path, nargs="*", default=[], help="more result files joined in")
    ap.add_argument("--report", action="store_true", help="only print the table of --out (and --with)")
    args = ap.parse_args()
    from lab.closedloop import ACCOUNTING_VERSION, LoopResult
    from lab.closedloop.options import CHECKPOINT_POLICIES
    from lab.closedloop.report import checkpoint_table

    policies = args.policies.split(",")
    if set(policies) - set(CHECKPOINT_POLICIES):
        ap.error(f"--policies: one or more of {', '.join(CHECKPOINT_POLICIES)}")
    missing = [str(p) for p in args.extra if not p.is_file()]
    if missing:
        ap.error(f"--with: no such result file: {', '.join(missing)}")
    tick = None if args.tick == 30.0 else args.tick

    def loop_of(policy: str) -> dict:  # as bench/closedloop.py writes it: the options that are not the default
        return {k: v for k, v in (("tick_s", tick), ("checkpoint_policy", policy)) if v not in (None, "fixed")}

    def policy_of(r: dict) -> str | None:  # the checkpoint policy of a run of this comparison, or None
        cp = r.get("loop", {}).get("checkpoint_policy", "fixed")
        ok = (r["scenario"] == args.scenario and r["policy"] == "full" and r.get("model", "") == ""
              and r.get("playbooks", "") == "" and r.get("accounting") == ACCOUNTING_VERSION
              and r.get("loop", {}) == loop_of(cp))
        return cp if ok else None

    runs: list[dict] = json.loads(args.out.read_text()).get("runs", []) if args.out.exists() else []
    for extra in args.extra:
        runs += json.loads(extra.read_text()).get("runs", [])
    # one run per scenario, seed, policy and options (a file joined twice, or a run in both)
    runs = list({(r["scenario"], r["seed"], r["policy"], json.dumps(r.get("loop", {}), sort_keys=True)): r
                 for r in runs}.values())
    have = {(r["seed"], policy_of(r)) for r in runs}
    if not args.report:
        todo = [(s, p) for s in seeds(args.seeds) for p in policies if (s, p) not in have]
        print(f"{len(todo)} run(s) to do", flush=True)
        started = time.perf_counter()
        with ProcessPoolExecutor(args.jobs) as pool:
            futures = {pool.submit(one_run, args.scenario, s, "full", "", 30.0, "", loop_of(p)): (s, p)
                       for s, p in todo}
            for fut in as_completed(futures):
                row = fut.result()
                runs.append(row)
                g = row["gpu_hours"]
                print(f"seed {row['seed']} {futures[fut][1]}: ratio {g['productive'] / g['allocated']:.4f} "
                      f"({row['wall_s']:.0f} s; {time.perf_counter() - started:.0f} s in all)", flush=True)
                write_results(args.out, {"runs": runs})
    wanted = set(seeds(args.seeds))
    by: dict[str, dict[int, LoopResult]] = {p: {} for p in policies}
    for r in runs:
        if r["seed"] in wanted and policy_of(r) in by:
            by[policy_of(r)][r["seed"]] = LoopResult.from_dict(r)
    complete = set.intersection(*(set(v) for v in by.values()))
    print(f"{args.scenario}, full policy, tick {args.tick:g} s: {len(complete)} seed(s) with every checkpoint "
          f"policy ({', '.join(map(str, sorted(complete)))})")
    report = checkpoint_table({p: [by[p][s] for s in sorted(complete)] for p in policies}) if complete else ""
    print(report)
    write_results(args.out, {"runs": runs, "report": report, "seeds": sorted(complete)})


if __name__ == "__main__":
    main()
