"""Alert commands: ``alerts`` (test a receiver, show or deliver the outbox) and ``silence``."""

from __future__ import annotations

import argparse
import sys

from daemon.alerting.silences import DEFAULT_SILENCE
from daemon.cli.common import config_args, fmt_ts, follow, follow_args, load_config, open_store, shard_of, store_of

def _alerting(args: argparse.Namespace):
    from daemon.alerting.runner import Alerting

    cfg = load_config(args)
    store = open_store(args, cfg)
    from daemon.operations.remediation import scheduler_from_config

    return Alerting.from_config(cfg, store, scheduler_from_config(cfg)), store


def cmd_alerts(args: argparse.Namespace) -> int:
    import time

    from daemon.alerting.runner import ALERT_PASS_WAIT_S

    alerting, store = _alerting(args)
    try:
        if args.alerts_command == "test":
            outcome = alerting.test(args.receiver)
            if outcome.ok:
                print(f"test message delivered to {args.receiver}")
                return 0
            print(f"test message to {args.receiver} not delivered: {outcome.error}"
                  + (" (temporary: retry later)" if outcome.retry else ""), file=sys.stderr)
            return 1
        if args.alerts_command == "outbox":
            rows = alerting.outbox.listing(delivered=args.all)
            if not rows:
                print("outbox empty" if not args.all else "no notifications")
            for r in rows:
                print(f"{r.id:>6} {r.status:<9} {r.receiver:<16} {r.idempotency_key:<44} attempts {r.attempts:<3} "
                      f"next {fmt_ts(r.next_attempt_at) if r.status == 'pending' else '-':<20} {r.last_error}")
            return 0
        # flush --follow: as the daemon's alerts job, under the shard's lease, until SIGTERM
        if args.follow:
            return follow(store, shard_of(args), "alerts", lambda: alerting.step(wait_s=ALERT_PASS_WAIT_S),
                          args.interval, args.lease_ttl, args.verbose > 0)
        # flush: read incidents, queue, deliver until the outbox is empty (or the timeout)
        deadline = time.time() + args.timeout
        while True:
            counts = alerting.step()
            if args.verbose:
                print(counts, file=sys.stderr)
            if not alerting.outbox.pending() or time.time() >= deadline:
                break
            time.sleep(min(args.interval, 0.5))
        failed = len([r for r in alerting.outbox.pending()])
        print(f"outbox: {failed} notification(s) still pending" if failed else "outbox delivered")
        return 0 if failed == 0 else 3
    finally:
        store.close()


def cmd_silence(args: argparse.Namespace) -> int:
    import getpass
    import time

    from daemon.alerting.silences import SilenceBook
    from daemon.operations.operator import OperatorError, add_silence

    with store_of(args, read_only=args.silence_command == "list") as store:
        book = SilenceBook(store)
        now = time.time()
        if args.silence_command == "add":
            try:
                sil = add_silence(store, args.matcher, args.duration, args.by or getpass.getuser(), args.comment)
            except OperatorError as exc:
                print(f"raswarden: {exc}", file=sys.stderr)
                return 2
            print(f"{sil.id} silences {' '.join(str(m) for m in sil.matchers)} until {fmt_ts(sil.ends_at)}")
        elif args.silence_command == "expire":
            if not book.expire(args.id, now):
                print(f"no running silence {args.id}", file=sys.stderr)
                return 1
            print(f"{args.id} expired")
        else:
            silences = book.all() if args.all else book.active(now)
            if not silences:
                print("no silences" if args.all else "no active silences")
            for sil in silences:
                state = "active" if sil.active(now) else ("pending" if sil.starts_at > now else "expired")
                print(f"{sil.id}  {state:<8} until {fmt_ts(sil.ends_at)}  by {sil.created_by or '-':<10} "
                      f"{' '.join(str(m) for m in sil.matchers)}  {sil.comment}")
        return 0


def register(sub) -> None:
    """Add this module's commands to the ``raswarden`` parser's subcommands."""
    p = sub.add_parser("alerts", help="alert receivers and the outbox",
                       description="Send a test message, show the outbox, or deliver it (reading new incidents "
                                   "first) as its own process.")
    asub = p.add_subparsers(dest="alerts_command", required=True, metavar="ACTION")
    q = asub.add_parser("test", help="send a test message to one receiver, now")
    q.add_argument("receiver", help="receiver name from the config")
    config_args(q)
    q = asub.add_parser("outbox", help="show notifications not yet delivered (--all: every one)")
    q.add_argument("--all", action="store_true")
    config_args(q)
    q = asub.add_parser("flush", help="read incidents, queue due notifications and deliver the outbox")
    follow_args(q, "as the daemon's alerts job")
    q.add_argument("--timeout", type=float, default=60.0,
                   help="without --follow: stop after this many seconds even if some are pending (default 60)")
    config_args(q)
    p.set_defaults(func=cmd_alerts)

    p = sub.add_parser("silence", help="mute alerts matching labels for a while",
                       description="Silences match alert labels (entity, node, rack, category, severity, "
                                   "incident, ...) with label=value, label!=value, label=~regex, label!~regex.")
    ssub = p.add_subparsers(dest="silence_command", required=True, metavar="ACTION")
    q = ssub.add_parser("add", help="add a silence")
    q.add_argument("matcher", nargs="+", help="e.g. rack=r07 category=gpu_thermal, or incident=inc-...")
    q.add_argument("--duration", default=DEFAULT_SILENCE,
                   help=f"how long (default {DEFAULT_SILENCE}, an alert's repeat interval; e.g. 30m, 4h, 1d)")
    q.add_argument("--comment", default="", help="why")
    q.add_argument("--by", help="who (default: the current user)")
    config_args(q)
    q = ssub.add_parser("list", help="active silences (--all: also expired ones)")
    q.add_argument("--all", action="store_true")
    config_args(q)
    q = ssub.add_parser("expire", help="end a silence now")
    q.add_argument("id")
    config_args(q)
    p.set_defaults(func=cmd_silence)
