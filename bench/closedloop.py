#!/usr/bin/env python3
"""Closed loop over many seeds (issue 5's targets; not a test): every policy on every seed of a scenario.

Runs ``lab.closedloop.run`` for the policies none, reactive and full on each seed, one process per
(seed, policy) (``--jobs`` at a time), with the learned detectors of ``--model`` for the full policy (a
model trained on other scenarios and seeds). Prints the table (means ± standard deviation across seeds,
policies side by side) and writes every run as JSON (default bench/results/closedloop.json), each as it
finishes: an interrupted run resumes from that file, and runs of other scenarios in it are kept. A 30-day
scalex640 seed takes about an hour of CPU for the three policies, so the 20 seeds accumulate over runs.
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

from common import cores, seeds, write_results  # noqa: E402

SCENARIOS = ROOT / "lab" / "library" / "scenarios"
FAULTS = ROOT / "lab" / "library" / "faults"


def one_run(scenario: str, seed: int, policy: str, model: str, interval: float, playbooks: str = "",
            loop: dict | None = None) -> dict:
    """One policy on one seed, in a process of its own (``loop``: LoopOptions beside the interval, e.g. the repair
    loop's)."""
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from lab.closedloop import ACCOUNTING_VERSION, LoopOptions, run
    from lab.sim.simulator import Simulator
    from lab.sim.scenario import Scenario
    from detectors.bundle import ModelBundle

    bundle = ModelBundle.load(model) if model and policy == "full" else None
    sc = Scenario.load(SCENARIOS / f"{scenario}.yaml")
    sc.seed = seed
    result = run(Simulator(sc, FAULTS), policy, LoopOptions(interval_s=interval, **(loop or {})), model=bundle,
                 playbook_dirs=[playbooks] if playbooks else None)
    return result.as_dict() | {"loop": loop or {}, "model": model if policy == "full" else "",
                               "model_sha256": bundle.meta.get("estimators_sha256", "") if bundle else "",
                               "interval_s": interval,
                               "playbooks": playbooks, "accounting": ACCOUNTING_VERSION}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="dense-all-classes")
    ap.add_argument("--seeds", default="1001..1020", help="e.g. 1001..1020 or 1,2,3")
    ap.add_argument("--model", default="", help="learned detectors for the full policy (raswarden train)")
    ap.add_argument("--interval", type=float, default=30.0, help="the world's step (seconds)")
    ap.add_argument("--tick", type=float, default=None, metavar="SECONDS",
                    help="raswarden's detection tick, a multiple of --interval (default: the interval): its pipeline "
                         "runs this often and reads every sample since its last tick; its playbooks still step with "
                         "the world")
    ap.add_argument("--playbooks", default="", help="an operator playbook directory beside the built-ins")
    ap.add_argument("--policies", default="none,reactive,full")
    ap.add_argument("--builtin-for", default="", metavar="POLICIES",
                    help="with --playbooks: take these policies' runs from the built-in playbooks' runs when there "
                         "are any, for a directory that cannot change them (none runs no playbook; reactive acts "
                         "on failed incidents only, so a directory that only changes what is done on sub-healthy "
                         "ones leaves it as it was)")
    ap.add_argument("--repair-orders", action="store_true",
                    help="the technician works from raswarden's repair orders; validation returns the nodes")
    ap.add_argument("--repair-hours", type=float, default=24.0, help="repair time of a node taken out (hours)")
    ap.add_argument("--bad-repairs", type=float, default=0.0, metavar="SHARE",
                    help="the share of repairs that leave the fault in place")
    ap.add_argument("--checkpoint-policy", default="fixed", choices=("fixed", "daly", "oracle", "advised"),
                    help="how jobs choose their periodic checkpoint interval: every hour (fixed), the best fixed "
                         "interval for their size at the fleet's long-run failure rate (daly) or at the seed's own "
                         "(oracle), or raswarden's advice (advised; docs/playbooks.md)")
    ap.add_argument("--jobs", type=int, default=cores(), help="processes at once (default: the cores this may use)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "closedloop.json")
    ap.add_argument("--report", action="store_true", help="only print the table of --out")
    ap.add_argument("--versus", type=Path, nargs="*", default=[], metavar="FILE",
                    help="with --repair-orders: also compare with these result files' runs of the same options but "
                         "the technician returning nodes directly (without raswarden's validation)")
    ap.add_argument("--faults", type=int, metavar="SEED", help="also print what happened to each fault of SEED")
    ap.add_argument("--with", dest="extra", type=Path, nargs="*", default=[],
                    help="more result files (other writers' runs, e.g. other seeds) joined to --out's in the table")
    args = ap.parse_args()
    from lab.closedloop import ACCOUNTING_VERSION, LoopOptions, LoopResult
    from lab.closedloop.report import comparison_table, fault_table, per_seed_table, table

    if args.versus and not args.repair_orders:
        ap.error("--versus compares runs with --repair-orders against the same runs without: give --repair-orders")
    missing = [str(p) for p in args.extra + args.versus if not p.is_file()]
    if missing:
        ap.error(f"--with: no such result file: {', '.join(missing)}")
    if args.playbooks and not Path(args.playbooks).is_dir():
        ap.error(f"--playbooks: no such directory: {args.playbooks}")
    policies = args.policies.split(",")
    runs: list[dict] = json.loads(args.out.read_text()).get("runs", []) if args.out.exists() else []
    builtin_for = set(filter(None, args.builtin_for.split(","))) if args.playbooks else set()
    if builtin_for - set(policies):
        ap.error(f"--builtin-for: not among --policies: {', '.join(sorted(builtin_for - set(policies)))}")

    tick = None if args.tick in (None, args.interval) else args.tick
    loop = {k: v for k, v in (("repair_orders", args.repair_orders), ("repair_s", args.repair_hours * 3600.0),
                              ("bad_repair_share", args.bad_repairs), ("tick_s", tick),
                              ("checkpoint_policy", args.checkpoint_policy))
            if v != getattr(LoopOptions(), k)}
    try:
        LoopOptions(interval_s=args.interval, tick_s=tick).ticks_every()
    except ValueError as exc:
        ap.error(f"--tick: {exc}")

    def same(r: dict, seed: int, policy: str, exact: bool = False) -> bool:
        # A model is known by its directory's name: runs written from another checkout hold another path.
        pb = r.get("playbooks", "")
        return (r["scenario"], r["seed"], r["policy"]) == (args.scenario, seed, policy) and \
            r.get("loop", {}) == loop and (
            policy != "full" or Path(r.get("model", args.model)).name == Path(args.model).name) and (
            pb == args.playbooks or (not exact and policy in builtin_for and pb == "")) and (
            r.get("accounting", 1) == ACCOUNTING_VERSION)

    if not args.report:
        todo = [(s, p) for s in seeds(args.seeds) for p in policies if not any(same(r, s, p) for r in runs)]
        print(f"{len(todo)} run(s) to do", flush=True)
        started = time.perf_counter()
        opts = LoopOptions(interval_s=args.interval, **loop)
        with ProcessPoolExecutor(args.jobs) as pool:
            futures = {pool.submit(one_run, args.scenario, s, p, args.model, args.interval, args.playbooks,
                                   loop): (s, p) for s, p in todo}
            for fut in as_completed(futures):
                row = fut.result()
                key = (args.scenario, row["seed"], row["policy"])
                runs = [r for r in runs if not (same(r, *key[1:], exact=True) or (
                    (r["scenario"], r["seed"], r["policy"]) == key and r.get("accounting", 1) != ACCOUNTING_VERSION))]
                runs.append(row)
                print(f"seed {row['seed']} {row['policy']}: net loss {row['gpu_hours']['net_loss']:.0f} GPU-h, "
                      f"drains {row['drains_true']} true / {row['drains_false']} false ({row['wall_s']:.0f} s; "
                      f"{time.perf_counter() - started:.0f} s in all)", flush=True)
                write_results(args.out, {"options": {k: v for k, v in opts.__dict__.items() if k != "guards"}
                                         | {"guards": opts.guards.__dict__}, "runs": runs})
    def key(r: dict) -> tuple:  # one run per (scenario, seed, policy) and what it ran with
        return (r["scenario"], r["seed"], r["policy"], Path(r.get("model", "")).name, r.get("playbooks", ""),
                r.get("accounting", 1))

    for extra in args.extra:
        runs = list({key(r): r for r in runs + json.loads(extra.read_text()).get("runs", [])}.values())
    wanted = set(seeds(args.seeds))
    chosen: dict[tuple, dict] = {}  # one run per (seed, policy), a run with the directory itself before a built-in one
    for r in runs:
        if r["seed"] in wanted and same(r, r["seed"], r["policy"]) and (
                (r["seed"], r["policy"]) not in chosen or same(r, r["seed"], r["policy"], exact=True)):
            chosen[r["seed"], r["policy"]] = r
    # A seed counts once all of its policies have run.
    complete = {s for s in wanted if all((s, p) in chosen for p in policies)}
    results = [LoopResult.from_dict(r) for (s, _), r in chosen.items() if s in complete]
    print(f"{args.scenario}: {len(complete)} complete seed(s)")
    print(table(results))
    print()
    print(per_seed_table(results))
    if args.versus:
        direct_loop = {k: v for k, v in loop.items() if k != "repair_orders"}
        others = [LoopResult.from_dict(r) for f in args.versus for r in json.loads(f.read_text()).get("runs", [])
                  if r["seed"] in wanted and r["scenario"] == args.scenario and r["policy"] in policies
                  and r.get("loop", {}) == direct_loop and r.get("accounting", 1) == ACCOUNTING_VERSION]
        print("\nwith raswarden's validation (this file) and without (--versus):")
        print(comparison_table(results, others, ("validated", "returned directly")))
    of_seed = [r for r in results if r.seed == args.faults]
    if of_seed and all(r.fault_outcomes for r in of_seed):
        print(f"\nseed {args.faults}, fault by fault:")
        print(fault_table(of_seed))
    elif args.faults is not None:
        print(f"\nseed {args.faults}: no per-fault outcomes (not complete, or run before they were recorded)")
    for r in of_seed:
        if r.drains_false:
            print(f"\nseed {r.seed} {r.policy}: {r.drains_false} false drain(s)"
                  + ("" if r.false_drains else " (run before they were recorded)"))
            for d in r.false_drains:
                print("  " + json.dumps(d))


if __name__ == "__main__":
    main()
