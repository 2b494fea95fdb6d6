"""What the command modules share: times and durations as printed, the console, the config and the state
database of a command."""

from __future__ import annotations

import argparse
import contextlib

from daemon.timetext import fmt_ts  # noqa: F401  (re-exported: the command modules print times)


def fmt_duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 7200:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"


class CommandError(Exception):
    """A command that cannot do what was asked (``raswarden: MESSAGE`` on stderr, exit status 2)."""


def console_out():
    """stdout console: the terminal's width on a terminal; into a file or pipe unwrapped, without colour, and tables
    as plain text (:func:`print_table`)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=200, soft_wrap=True, no_color=True, highlight=False)


def print_table(console, table) -> None:
    """A rich table: boxed on a terminal; into a file or pipe, tab-separated lines under its title as a ``#`` line
    and a header line (for grep, cut and awk)."""
    if console.is_terminal:
        console.print(table)
        return
    from rich.text import Text

    def plain(cell) -> str:
        text = cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain
        return " ".join(text.split())  # no tab or newline inside a field

    lines = [f"# {plain(table.title)}"] if table.title else []
    lines.append("\t".join(plain(c.header) for c in table.columns))
    lines += ["\t".join(plain(c) for c in row) for row in zip(*(list(c.cells) for c in table.columns))]
    console.file.write("\n".join(lines) + "\n")


def progress_bar(console):
    """A rich progress bar on a terminal; nothing otherwise."""
    if console is None or not console.is_terminal:
        return contextlib.nullcontext(None)
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>5.1f}%"),
                    TimeRemainingColumn(), console=console, transient=True)


def hours(seconds) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f} h"


def load_config(args: argparse.Namespace):
    import os

    from daemon.config import DEFAULT_PATH, load

    return load(args.config or os.environ.get("RASWARDEN_CONFIG") or DEFAULT_PATH)


def open_store(args: argparse.Namespace, cfg, read_only: bool = False):
    """The state database of a command: ``--db``, else the config's store.url. A command that only reads
    (``read_only``) never creates one: a SQLite file that is not there is an error naming where it was looked for."""
    from pathlib import Path

    from daemon.store import Store

    url = getattr(args, "db", None) or cfg.store_url
    if read_only and url.startswith("sqlite:///") and url not in ("sqlite:///:memory:",):
        path = Path(url.split(":///", 1)[1])
        if not path.exists():
            given = "--db" if getattr(args, "db", None) else f"store.url of {cfg.path}"
            raise CommandError(f"no state database at {path} ({given}): has the daemon run with this store?")
    return Store(url, read_only=read_only)


@contextlib.contextmanager
def config_and_store(args: argparse.Namespace, read_only: bool = False):
    """The config and the state database of a command (``read_only``: see :func:`open_store`)."""
    cfg = load_config(args)
    store = open_store(args, cfg, read_only)
    try:
        yield cfg, store
    finally:
        store.close()


@contextlib.contextmanager
def store_of(args: argparse.Namespace, read_only: bool = False):
    """The state database of a command that needs nothing else: ``--db`` alone (no config file read), else the
    config's store.url."""
    cfg = None if getattr(args, "db", None) else load_config(args)
    store = open_store(args, cfg, read_only)
    try:
        yield store
    finally:
        store.close()


def config_args(p: argparse.ArgumentParser, db: bool = True) -> None:
    """``--config`` (and ``--db``): the options of every command that reads the config (and the state database)."""
    p.add_argument("--config", metavar="FILE", help="config file (default $RASWARDEN_CONFIG or "
                                                    "/etc/raswarden/raswarden.toml)")
    if db:
        p.add_argument("--db", metavar="URL", help="state database (default: the config's store.url)")


def follow_args(p: argparse.ArgumentParser, what: str) -> None:
    """The options of a command that can keep going as one of the daemon's jobs: ``--follow``, ``--interval``,
    ``--shard`` and ``--lease-ttl`` (``what``: what it does, for the help)."""
    p.add_argument("--follow", action="store_true",
                   help=f"keep going every --interval seconds until SIGTERM, under the shard's lease: {what}")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between passes (default 5)")
    p.add_argument("--shard", help="the shard this instance acts for, one instance at a time with the daemon "
                                   "(default: the config's service.shard)")
    p.add_argument("--lease-ttl", type=float, help="seconds before a silent holder's shard is taken over "
                                                   "(default: 3 intervals, at least 10)")


def shard_of(args: argparse.Namespace) -> str:
    """The shard a command acts for: ``--shard``, else the config's ``service.shard`` (the daemon's)."""
    return args.shard or load_config(args).service.shard


def follow(store, shard: str, name: str, step, interval_s: float, lease_ttl_s: float | None = None,
           verbose: bool = False, once: bool = False) -> int:
    """Run ``step`` every ``interval_s`` seconds as the daemon runs its jobs (daemon/service/jobs.py), only while this
    process holds the shard's lease, until SIGTERM or SIGINT (``once``: one pass, or none while another instance
    holds the shard); then let go of the lease."""
    import sys

    from daemon.service.jobs import Job, JobRunner, leased
    from daemon.store.leases import Lease, shard_lease

    lease = Lease(store, shard_lease(shard), ttl_s=lease_ttl_s or max(10.0, 3 * interval_s))
    said: list[str] = []

    def standby(holder: str) -> None:
        if verbose or once or said[-1:] != [holder]:  # once per holder (every pass with -v)
            print(f"standby: {holder} holds shard {shard}", file=sys.stderr, flush=True)
        said[:] = [holder]

    def run() -> None:
        said.clear()
        counts = step()
        if verbose:
            print(counts, file=sys.stderr, flush=True)

    job = leased(lease, run, standby)
    try:
        if once:
            job()
        else:
            runner = JobRunner(workers=1)
            runner.schedule([Job(name, job, interval_s)])
            runner.run_until_stopped()
    finally:
        lease.release()
    return 0


def timezone_arg(p: argparse.ArgumentParser) -> None:
    """``--timezone ZONE``: the zone of log stamps that name none, checked as the command line is read."""
    from daemon.timetext import parse_zone

    def zone(text: str) -> str:
        try:
            parse_zone(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    p.add_argument("--timezone", metavar="ZONE", type=zone,
                   help="the zone of times a log line names none of (syslog, dmesg -T, nvidia-smi CSV) when the hosts "
                        "keep local time: Asia/Shanghai, +08:00 (default: topology.yaml's timezone, else UTC)")
