"""Repair commands: ``playbook`` (validate, plan, run, list, reset), an operator's ``drain`` and ``resume``,
``approve``, and the technicians' ``repairs`` (list, show, start, done, give-back)."""

from __future__ import annotations

import argparse
import sys

from daemon.cli.common import (config_and_store, config_args, fmt_duration, fmt_ts, follow, follow_args,
                               load_config, open_store, print_table, shard_of, store_of)

def _remediation(args: argparse.Namespace):
    from daemon.operations.remediation import Remediation, scheduler_from_config

    cfg = load_config(args)
    store = open_store(args, cfg)
    return Remediation.from_config(cfg, store, scheduler_from_config(cfg)), store


def cmd_playbook(args: argparse.Namespace) -> int:

    from playbooks.model import PlaybookError, load

    if args.playbook_command == "validate":
        try:
            dirs = args.dir or (load_config(args).playbook_dirs if args.config else [])
            books = load(dirs)
        except PlaybookError as exc:
            print(f"raswarden: {exc}", file=sys.stderr)
            return 2
        for p in books:
            print(f"{p.priority:>4} {p.name:<28} {p.guards.mode:<8} {' -> '.join(s.type for s in p.steps)}"
                  f"   ({p.source})")
        return 0
    rem, store = _remediation(args)
    try:
        if args.playbook_command == "plan":
            from daemon.operations.remediation import incident_ref

            row = store.incident(args.incident)
            if row is None:
                print(f"no incident {args.incident}", file=sys.stderr)
                return 1
            state = rem.engine.scheduler.snapshot()
            action = rem.engine.plan(incident_ref(row, scheduler_names=rem.scheduler_names), state)
            if action is None:
                print(f"{row.id} ({row.entity}, {row.severity}, {row.category}): no playbook matches")
                return 0
            print(f"{row.id} ({row.entity}, {row.severity}, {row.category}) -> playbook {action.playbook}, mode "
                  f"{action.mode}{', needs approval' if action.approval else ''}")
            for i, st in enumerate(action.steps, 1):
                print(f"  {i}. {rem.engine.describe(action, st, state)}")
            return 0
        if args.playbook_command == "reset":
            rem.journal.set_breaker(None)
            print("circuit breaker reset")
            return 0
        if args.playbook_command == "list":
            for a in rem.journal.actions():
                steps = " ".join(f"{s.type}={s.status}" for s in a.steps)
                print(f"{a.key:<52} {a.status:<18} {a.mode:<8} {steps} {a.note}")
            return 0
        # run: only the holder of the shard's lease acts; another instance waits as a standby
        return follow(store, shard_of(args), "playbooks", rem.step, args.interval, args.lease_ttl, args.verbose > 0,
                      once=not args.follow)
    finally:
        store.close()


def cmd_node(args: argparse.Namespace) -> int:
    """raswarden drain|resume NODE: an operator's own action through raswarden, journaled."""
    import getpass

    from daemon.operations.operator import OperatorError, node_action
    from daemon.operations.remediation import scheduler_from_config

    with config_and_store(args) as (cfg, store):
        try:
            print(node_action(scheduler_from_config(cfg), store, args.command, args.node, args.reason,
                              args.by or getpass.getuser(), args.force if args.command == "resume" else False,
                              repaired=getattr(args, "repaired", False)))
            return 0
        except OperatorError as exc:
            print(f"raswarden: {exc}", file=sys.stderr)
            return 2 if exc.status == 400 else 1


def cmd_approve(args: argparse.Namespace) -> int:
    import getpass

    from daemon.operations.operator import OperatorError, approve

    rem, store = _remediation(args)
    try:
        for key in approve(rem, args.action, args.by or getpass.getuser()):
            print(f"approved {key}")
        return 0
    except OperatorError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    finally:
        store.close()


def cmd_repairs(args: argparse.Namespace) -> int:
    """raswarden repairs: the repair queue (daemon/operations/repairs.py) and a technician's changes to its orders."""
    import getpass
    import json
    import time

    from daemon.operations.repairs import ACTIVE, RepairBook, RepairError

    with store_of(args, read_only=args.repairs_command in ("list", "show")) as store:
        book = RepairBook(store)
        try:
            if args.repairs_command == "list":
                rows = book.orders(None if args.all else ACTIVE)
                if args.json:
                    print(json.dumps([r.model_dump() for r in rows], indent=1, default=str))
                    return 0
                if not rows:
                    print("no repair orders" if args.all else "no open repair orders")
                    return 0
                from rich.console import Console
                from rich.table import Table

                table = Table(title="repair orders" if args.all else "the repair queue")
                for column in ("id", "state", "age", "severity", "part", "expected", "rack", "incident"):
                    table.add_column(column)
                now = time.time()
                for r in rows:
                    table.add_row(str(r.id), r.state, fmt_duration(now - r.opened_at), r.severity, r.part,
                                  r.expected, r.rack or "-", r.incident_id)
                print_table(Console(), table)
                return 0
            if args.repairs_command == "show":
                r = book.order(args.order)
                if args.json:
                    print(json.dumps(r.model_dump(), indent=1, default=str))
                    return 0
                print(f"repair order {r.id}: {r.state}, {r.expected} {r.part} ({r.severity} {r.category})")
                print(f"  why: {r.expected_why}")
                print("  where: " + " · ".join(f"{what} {value}" for what, value in r.where))
                print(f"  incident {r.incident_id}, opened {fmt_ts(r.opened_at)}"
                      + (f", closed {fmt_ts(r.closed_at)}" if r.closed_at else "")
                      + (f", new part serial {r.new_serial}" if r.new_serial else ""))
                for line in r.evidence:
                    print(f"  evidence: {line}")
                for h in r.history:
                    note = f": {h['note']}" if h.get("note") else ""
                    print(f"  {fmt_ts(h['ts'])}  {h['from'] or '-'} -> {h['to']} by {h['by']}{note}")
                return 0
            who = args.by or getpass.getuser()
            if args.repairs_command == "start":
                r = book.start(args.order, who, args.note or "")
            elif args.repairs_command == "give-back":
                r = book.give_back(args.order, who, args.note or "")
            else:
                r = book.done(args.order, who, args.part_serial or "", args.note or "")
        except RepairError as exc:
            print(f"raswarden: {exc}", file=sys.stderr)
            return 2
        print(f"repair order {r.id}: {r.state} ({r.part})")
        return 0


def cmd_report(args: argparse.Namespace) -> int:
    """raswarden report: fleet reliability over a period, as an HTML report with charts (and a summary here)."""
    import time
    from pathlib import Path

    from daemon.operations.reliability import figures, report_html
    from playbooks.duration import parse_duration

    try:
        since = time.time() - parse_duration(args.since, "--since")
    except ValueError as exc:
        print(f"raswarden: {exc}", file=sys.stderr)
        return 2
    with store_of(args, read_only=True) as store:
        rel = figures(store, since)
    Path(args.out).write_text(report_html(rel))
    t = rel.total
    print(f"{t.orders} repair orders ({t.before_failure} before failure, {t.after_failure} after: {t.before_text} "
          f"before); median time to repair {t.mttr_text}; {t.validation_failures} caught by validation; "
          f"{len(rel.repeat_offenders)} repeat offenders; {len(rel.queue)} in the queue now. Wrote {args.out}")
    return 0


def register(sub) -> None:
    """Add this module's commands to the ``raswarden`` parser's subcommands."""
    p = sub.add_parser("playbook", help="playbooks: validate, plan an incident, run pending actions",
                       description="Playbooks drive checkpoint, drain, requeue and resume through the scheduler "
                                   "under guards (docs/playbooks.md).")
    psub = p.add_subparsers(dest="playbook_command", required=True, metavar="ACTION")
    q = psub.add_parser("validate", help="load the built-in and operator playbooks; name the first error")
    q.add_argument("--dir", action="append", help="an operator playbook directory (default: the config's)")
    config_args(q)
    q = psub.add_parser("plan", help="what would happen for an incident, without doing it")
    q.add_argument("incident", help="incident id (raswarden incidents / the status page)")
    config_args(q)
    q = psub.add_parser("run", help="plan actions for new incidents and execute pending steps")
    follow_args(q, "as the daemon's playbooks job")
    config_args(q)
    q = psub.add_parser("list", help="actions and their steps")
    config_args(q)
    q = psub.add_parser("reset", help="reset a tripped circuit breaker")
    config_args(q)
    p.set_defaults(func=cmd_playbook)

    for name, words in (("drain", "drain a node by hand (recorded; raswarden will resume only its own drains)"),
                        ("resume", "resume a node raswarden drained (--force for anyone's), recorded")):
        p = sub.add_parser(name, help=words)
        p.add_argument("node")
        p.add_argument("--reason", required=True, help="why (kept in the scheduler's reason and the journal)")
        p.add_argument("--by", help="who (default: the current user)")
        if name == "resume":
            p.add_argument("--force", action="store_true", help="also resume a node someone else drained")
            p.add_argument("--repaired", action="store_true",
                           help="its parts were replaced: the running daemon's detectors forget their history")
        config_args(p)
        p.set_defaults(func=cmd_node)

    p = sub.add_parser("repairs", help="the repair queue: parts to replace or inspect on drained nodes",
                       description="Repair orders (docs/playbooks.md): one per part to replace or inspect when "
                                   "raswarden drains a node for hardware; a technician takes one (start), reports it "
                                   "done with the new part's serial (done), or gives it back.")
    rsub = p.add_subparsers(dest="repairs_command", required=True, metavar="ACTION")
    q = rsub.add_parser("list", help="the queue: open, in progress, repaired, validating (--all: closed too)")
    q.add_argument("--all", action="store_true")
    q.add_argument("--json", action="store_true", help="as JSON")
    config_args(q)
    q = rsub.add_parser("show", help="one order: where the part is, the evidence, its history")
    q.add_argument("order", type=int)
    q.add_argument("--json", action="store_true", help="as JSON")
    config_args(q)
    for name, words in (("start", "take an order"), ("done", "the part was reseated or replaced"),
                        ("give-back", "give a taken order back to the queue")):
        q = rsub.add_parser(name, help=words)
        q.add_argument("order", type=int)
        q.add_argument("--by", help="who (default: the current user)")
        q.add_argument("--note", help="what was done or found")
        if name == "done":
            q.add_argument("--part-serial", metavar="NEW", help="the serial number of the part put in")
        config_args(q)
    p.set_defaults(func=cmd_repairs)

    p = sub.add_parser("report", help="fleet reliability over a period: an HTML report with charts",
                       description="Repair orders over a period (daemon/operations/reliability.py): how many parts "
                                   "were replaced before they failed, time to repair, what validation caught, MTBF per "
                                   "part class, worst slots and racks, repeat offenders, the queue; written as one "
                                   "HTML file.")
    p.add_argument("--since", default="30d", help="the period, back from now (default 30d)")
    p.add_argument("--out", default="raswarden-report.html", help="the HTML file (default raswarden-report.html)")
    config_args(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("approve", help="approve an action that waits for an operator")
    p.add_argument("action", help="action key or incident id")
    p.add_argument("--by", help="who (default: the current user)")
    config_args(p)
    p.set_defaults(func=cmd_approve)
