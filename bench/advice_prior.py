#!/usr/bin/env python3
"""How fast checkpoint advice learns a fleet (issue 29; not a test): on fleets whose rate of unwarned failures is
far from the prior's, how much a job loses in its first days and months to advice built on too few failures.

The advice's node rate is a Gamma posterior from a prior worth one failure at the published 1.4 a node-year
(daemon/operations/foresight.py), read at its 90 % upper bound. A fleet whose raswarden forewarns most failures, or
whose
hardware fails more often than Llama 3's, starts from the wrong rate and learns its own as its failures come. For
each fleet size, true unwarned rate and time since raswarden was installed, this draws the failures seen so far
(Poisson, ``--draws`` times), asks the real advisor (``Advisor.job_advice``) for a job's interval, and prints the
median interval with its 10-90 % range, Daly's optimum at the true rate, and what the advised interval costs the job
over that optimum (the expected overhead of ``daemon.operations.advice.overhead`` at the true rate: checkpoints, work
lost,
restarts), as a share of its time and in GPU-hours a month of the job (8 accelerators a node) if it kept that
advice. A model of the advice, not a run of the loop: the failures are the only thing drawn.

Writes JSON (default bench/results/advice_prior.json).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize_scalar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import write_results  # noqa: E402
from daemon.operations.foresight import YEAR_H  # noqa: E402


def one(nodes: int, rate: float, days: float, job_nodes: int, cost_s: float, restart_s: float, draws: int,
        rng: np.random.Generator) -> dict:
    """The advice a ``job_nodes``-node job gets ``days`` after install on a fleet of ``nodes`` nodes whose true
    unwarned rate is ``rate`` a node-year, over ``draws`` draws of the failures seen."""
    from daemon.operations.advice import Advisor, daly_interval, overhead
    from daemon.operations.foresight import UNWARNED, Failure, Foresight
    from playbooks.scheduler import JobInfo

    advisor = Advisor()
    job = JobInfo("1", tuple(f"n{i}" for i in range(job_nodes)), "running", True,
                  comment=f"raswarden:checkpoint cost={cost_s:g}s restart={restart_s:g}s")
    hours = nodes * days * 24.0
    true_mtbf = 3600.0 / (job_nodes * rate / YEAR_H)
    best = daly_interval(cost_s, true_mtbf)
    # the least expected overhead (Daly's higher-order optimum is a hair off the first-order overhead's minimum)
    fit = minimize_scalar(lambda t: overhead(t, cost_s, restart_s, true_mtbf), bounds=(cost_s, 10 * best),
                          method="bounded")
    best_overhead = min(overhead(best, cost_s, restart_s, true_mtbf), float(fit.fun))
    intervals, excess = [], []
    by_count: dict[int, float] = {}
    for k in rng.poisson(rate * hours / YEAR_H, draws):
        if k not in by_count:
            failures = [Failure(f"i{j}", "n0", "node", "gpu_bus", None, "n0", 0.0, UNWARNED) for j in range(k)]
            by_count[k] = advisor.job_advice(job, Foresight(0.0, days * 86400.0, hours, failures), 0.0).interval_s
        t = by_count[k]
        intervals.append(t / 3600.0)
        excess.append(overhead(t, cost_s, restart_s, true_mtbf) - best_overhead)
    lo, mid, hi = np.percentile(intervals, [10, 50, 90])
    share = statistics.fmean(excess)
    return {"nodes": nodes, "rate_per_node_year": rate, "days": days, "interval_h": [round(lo, 2), round(mid, 2),
            round(hi, 2)], "optimum_h": round(best / 3600.0, 2), "excess_share": share,
            "excess_gpu_h_month": share * job_nodes * 8 * 730.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", default="80,1250,12500", help="fleet sizes in nodes of 8 accelerators")
    ap.add_argument("--rates", default="0.14,0.7,1.4,5.6", help="true unwarned failures a node-year")
    ap.add_argument("--days", default="1,7,30,90,180", help="time since install")
    ap.add_argument("--job-nodes", type=int, default=64)
    ap.add_argument("--cost", type=float, default=180.0, help="the job's checkpoint cost (s)")
    ap.add_argument("--restart", type=float, default=600.0, help="the job's restart cost (s)")
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "advice_prior.json")
    args = ap.parse_args()
    rng = np.random.default_rng(29)
    rows = []
    print(f"a {args.job_nodes}-node job, checkpoint {args.cost:g} s, restart {args.restart:g} s; advised interval "
          "median (10-90 %), Daly's optimum at the true rate, and the advice's cost over it")
    print("| fleet nodes | true unwarned / node-year | days | advised (h) | optimum (h) | excess (% of time) "
          "| GPU-h a month of the job at that advice |")
    print("|---|---|---|---|---|---|---|")
    for nodes in map(int, args.nodes.split(",")):
        for rate in map(float, args.rates.split(",")):
            for days in map(float, args.days.split(",")):
                r = one(nodes, rate, days, args.job_nodes, args.cost, args.restart, args.draws, rng)
                rows.append(r)
                lo, mid, hi = r["interval_h"]
                print(f"| {nodes:,} | {rate:g} | {days:g} | {mid:.2f} ({lo:.2f}-{hi:.2f}) | {r['optimum_h']:.2f} | "
                      f"{100 * r['excess_share']:.2f} | {r['excess_gpu_h_month']:,.0f} |", flush=True)
    write_results(args.out, {"rows": rows, "job_nodes": args.job_nodes, "cost_s": args.cost,
                             "restart_s": args.restart, "draws": args.draws})


if __name__ == "__main__":
    main()
