"""``raswarden advise [JOB]``: the checkpoint interval advised to each running opted-in job, and the foresight it
stands on (daemon/operations/advice.py, daemon/operations/foresight.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from daemon.cli.common import config_and_store, config_args, fmt_duration, fmt_ts, print_table


def cmd_advise(args: argparse.Namespace) -> int:
    """raswarden advise: made here from the store and the scheduler, as the daemon makes it (without the daemon's
    view of its collectors: its API, /api/v1/advice, has that too)."""
    from rich.console import Console
    from rich.table import Table

    from daemon.store.journal import StoreJournal
    from daemon.operations.advice import Advisor, degraded_reason
    from daemon.operations.remediation import scheduler_from_config
    from daemon.topology import Topology
    from playbooks.scheduler import ClusterState, SchedulerError

    with config_and_store(args, read_only=True) as (cfg, store):
        advisor = Advisor(cfg.advice)
        # as of the store's last data: a replayed trace's end, not today (which would add months of nodes watched
        # without a failure); a live daemon's store is minutes old
        now = min(time.time(), store.data_until() or time.time())
        if time.time() - now > 3600:
            print(f"as of {fmt_ts(now)}, the store's last data", file=sys.stderr)
        scheduler = scheduler_from_config(cfg)
        try:
            state = scheduler.snapshot() if scheduler is not None else ClusterState(now, {}, {})
        except SchedulerError as exc:
            print(f"raswarden: the scheduler did not answer: {exc}", file=sys.stderr)
            return 1
        names = dict(Topology.configured(cfg.service.topology).scheduler_name)
        advice = advisor.run(store, state, now, degraded_reason(StoreJournal(store).breaker(), []), names)
        foresight = advisor.foresight.summary(cfg.advice.quantile)
    if args.job is not None:
        if args.job not in advice:
            print(f"raswarden: no advice for job {args.job}: not running, or not opted in to checkpoint signals",
                  file=sys.stderr)
            return 1
        advice = {args.job: advice[args.job]}
    if args.json:
        out = {"jobs": {j: a.as_dict() for j, a in sorted(advice.items())}}
        print(json.dumps(out | ({"foresight": foresight} if args.foresight or args.job is None else {}), indent=1))
        return 0
    console = Console()
    if args.foresight or args.job is None:
        _print_foresight(console, foresight, cfg.advice.quantile)
    if not advice:
        print("no running job has opted in to checkpoint signals" if args.job is None else "")
        return 0
    table = Table(title="checkpoint advice")
    for column in ("job", "nodes", "every", "safe", "checkpoint", "restart", "overhead", "why"):
        table.add_column(column)
    for job, a in sorted(advice.items()):
        table.add_row(job, str(a.nodes), fmt_duration(a.interval_s), fmt_duration(a.safe_interval_s),
                      f"{a.checkpoint_cost_s:.0f} s ({a.cost_from})", f"{a.restart_cost_s:.0f} s",
                      f"{a.expected_overhead:.2%}", ("SAFE: " if a.safe else "") + a.why)
    print_table(console, table)
    return 0


def _print_foresight(console, fs: dict, quantile: float) -> None:
    rate, q = fs["per_node_year"], f"q{int(quantile * 100)}"
    share = "-" if fs["coverage"] is None else (f"{fs['coverage']:.0%} (80 %: {fs['coverage_interval'][0]:.0%}-"
                                               f"{fs['coverage_interval'][1]:.0%})")
    print(f"{fs['hard_failures']} hard failures in {fs['node_hours']:,.0f} node-hours: {fs['foreseen']} acted on "
          f"ahead, {fs['warned']} warned of only, {fs['unwarned']} unwarned; acted on ahead {share}; unwarned "
          f"{rate['unwarned']:.2f} a node-year (up to {rate[f'unwarned_{q}']:.2f} at {quantile:.0%}), all "
          f"{rate['all']:.2f}")
    from rich.table import Table

    for key, title in (("by_class", "class"), ("by_rack", "rack")):
        if not fs[key]:
            continue
        table = Table(title=f"hard failures by {title}")
        for column in (title, "acted on ahead", "warned only", "unwarned"):
            table.add_column(column)
        for name, c in fs[key].items():
            table.add_row(name, str(c["foreseen"]), str(c["warned"]), str(c["unwarned"]))
        print_table(console, table)
    if fs["open_incident_hazard"]:
        table = Table(title="open sub-healthy incidents nobody acted on: failures a day")
        for column in ("category", "hours open", "mean", f"up to ({quantile:.0%})"):
            table.add_column(column)
        for name, h in fs["open_incident_hazard"].items():
            table.add_row(name, f"{h['open_hours']:,.0f}", f"{h['per_day']:.2f}", f"{h[f'per_day_{q}']:.2f}")
        print_table(console, table)


def register(sub) -> None:
    """Add this module's command to the ``raswarden`` parser's subcommands."""
    p = sub.add_parser("advise", help="the checkpoint interval advised to running jobs, from measured foresight",
                       description="Each running job that opted in to checkpoint signals: the periodic checkpoint "
                                   "interval raswarden advises (Daly's optimum at an upper bound of the rate of "
                                   "failures its nodes see: those no incident warned of, and the hazard of the open "
                                   "incidents under it nobody acted on), its checkpoint and restart costs, and why "
                                   "(docs/playbooks.md, 'Checkpoint advice').")
    p.add_argument("job", nargs="?", help="one job's advice (default: every job's, and the foresight)")
    p.add_argument("--foresight", action="store_true",
                   help="also the hard failures by class and rack, and the hazard of open incidents (with JOB)")
    p.add_argument("--json", action="store_true", help="as JSON")
    config_args(p)
    p.set_defaults(func=cmd_advise)
