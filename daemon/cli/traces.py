"""Trace commands: ``replay`` (recorded telemetry through the whole pipeline) and ``convert``."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from daemon.cli.common import console_out, fmt_duration, fmt_ts, print_table, progress_bar, timezone_arg
from detectors.contract import TICK_S

def cmd_replay(args: argparse.Namespace) -> int:
    from rich.console import Console

    from daemon.judgement.pipeline import PipelineConfig
    from daemon.replay import FUTURE_MARGIN_S, replay

    err = Console(stderr=True)
    out = console_out()
    config = PipelineConfig(interval_s=args.interval)
    findings_fh = open(args.findings, "w") if args.findings else None
    try:
        with progress_bar(err) as bar:
            tasks: dict[str, int] = {}

            def progress(phase: str, done: float, total: float) -> None:
                if bar is None:
                    return
                if phase not in tasks:
                    tasks[phase] = bar.add_task("reading trace" if phase == "read" else "replaying ticks", total=total)
                bar.update(tasks[phase], completed=done)

            result = replay(args.trace, findings_out=findings_fh, db_url=args.db, config=config, progress=progress,
                            timezone=args.timezone, future_s=None if args.future else FUTURE_MARGIN_S)
    except FileNotFoundError as exc:
        print(f"raswarden: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if findings_fh:
            findings_fh.close()
    print_summary(out, result)
    return 0


def grouped_notes(notes: list[str]) -> list[str]:
    """Notes that say the same of several files ("its times name no zone: read as UTC" of 640 dmesg files) as one
    line with the count and the first few files, so a note said of one file only is not lost below them."""
    by_text: dict[str, list[str]] = {}
    for note in notes:
        where, sep, text = note.partition(": ")
        by_text.setdefault(text if sep else note, []).append(where if sep else "")
    out = []
    for text, places in by_text.items():
        if len(places) == 1:
            out.append(f"{places[0]}: {text}" if places[0] else text)
        else:
            shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
            out.append(f"{len(places)} files ({shown}): {text}")
    return out


def print_summary(console, result) -> None:
    """The end-of-replay summary: what was read, what was rejected, incidents by rack/node/category."""
    from rich.table import Table

    s = result.stats
    p = result.pipeline
    console.print(
        f"[bold]raswarden replay[/bold]: {s.files} files, {s.samples:,} samples, {s.events:,} RAS events, "
        f"{s.ticks:,} ticks of {p.config.interval_s:g} s ({fmt_ts(s.first_ts)} .. {fmt_ts(s.last_ts)}), "
        f"{s.wall_s:.1f} s wall"
    )
    if s.events_by_kind:
        console.print("events by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(s.events_by_kind.items())))
    rejected = result.rejects.total
    console.print(f"lines rejected: {rejected:,}; duplicate samples dropped: {s.duplicates:,}; "
                  f"Xids merged across sources: {p.resolver.merged}")
    for path, why in s.skipped:
        console.print(f"  skipped {path}: {why}", markup=False, highlight=False)
    for note in grouped_notes(result.rejects.notes)[:10]:
        console.print(f"  note: {note}", markup=False, highlight=False)
    if s.jumps:
        longest = max(s.jumps, key=lambda j: j[1] - j[0])
        console.print(f"stretches without data jumped over: {len(s.jumps)}, the longest "
                      f"{fmt_duration(longest[1] - longest[0])} ({fmt_ts(longest[0])} .. {fmt_ts(longest[1])})")
    if rejected:
        t = Table(title="rejected input", show_lines=False)
        t.add_column("format")
        t.add_column("reason")
        t.add_column("count", justify="right")
        for (fmt, reason), n in sorted(result.rejects.counts.items()):
            t.add_row(fmt, reason, str(n))
        print_table(console, t)
        for m in result.rejects.messages[:10]:
            console.print(f"  {m}", markup=False, highlight=False)
    from detectors.rules import RULE_INPUTS, SAME_SIGNAL

    present = set(p.mapper.metrics)
    missing = [f"{m} ({what})" for m, what in RULE_INPUTS.items()
               if m not in present and SAME_SIGNAL.get(m) not in present]
    if missing:
        console.print("not in this trace, so these rules are blind: " + "; ".join(missing))
    passed = result.pipeline.mapper.not_fabric_netdevs
    if passed:
        console.print("netdevs' series passed over, no fabric port in the topology (a management or storage NIC): "
                      + ", ".join(f"{node} {netdev}" for node, netdev in sorted(passed)))
    not_read = result.pipeline.mapper.values_not_read
    if not_read:
        console.print("values dropped as no reading: "
                      + ", ".join(f"{why} {n:,}" for why, n in sorted(not_read.items())))
    unmapped = result.pipeline.mapper.unmapped_hosts
    if unmapped:
        console.print("addresses without a topology alias: " + ", ".join(sorted(unmapped)))
    incidents = list(p.incidents.open.values()) + p.incidents.closed
    if not incidents:
        console.print("incidents: none")
        return
    t = Table(title=f"incidents ({len(incidents)})")
    for col in ("rack", "entity", "category", "severity", "opened", "status", "evidence"):
        t.add_column(col, overflow="fold")
    for inc in sorted(incidents, key=lambda i: (i.rack or "", i.entity, i.opened_at)):
        t.add_row(inc.rack or "-", inc.entity, inc.category, inc.severity.label, fmt_ts(inc.opened_at),
                  "open" if inc.open else f"closed ({inc.close_reason})", "; ".join(inc.evidence)[:160])
    print_table(console, t)
    by = Counter((i.rack or "-", i.category) for i in incidents)
    console.print("by rack and category: " + ", ".join(f"{r}/{c} {n}" for (r, c), n in sorted(by.items())))


def cmd_convert(args: argparse.Namespace) -> int:
    import shutil

    from daemon.ingest.formats import ColumnarWriter, ReadContext
    from daemon.ingest.naming import SeriesMapper
    from daemon.timetext import parse_zone
    from daemon.ingest.trace import Trace

    trace = Trace.discover(args.trace)
    topology = trace.topology()
    mapper = SeriesMapper(topology=topology)
    ctx = ReadContext(mapper=mapper, zone=parse_zone(args.timezone or topology.timezone or "UTC"))
    out = Path(args.out)
    writer = ColumnarWriter(out, args.format)
    for path, reader in trace.files:
        for batch in reader.read(path, ctx):
            writer.write(batch)
    writer.close()
    for extra in (trace.topology_path, trace.labels_path):
        if extra is not None:
            shutil.copyfile(extra, out / extra.name)
    print(f"wrote {writer.rows['samples']:,} samples and {writer.rows['events']:,} events to {out} "
          f"({args.format}); {mapper.rejects.total:,} lines rejected")
    for m in mapper.rejects.messages[:10]:
        print(f"  {m}", file=sys.stderr)
    return 0


def register(sub) -> None:
    """Add this module's commands to the ``raswarden`` parser's subcommands."""
    p = sub.add_parser("replay", help="run recorded telemetry through the whole pipeline",
                       description="Replay trace directories or files (OpenMetrics, query_range JSON, journald "
                                   "JSON, syslog/dmesg, rasdaemon SQLite, nvidia-smi CSV logs and -q reports, "
                                   "Parquet/CSV; docs/replay.md lists them all) through readers, rules, health and "
                                   "incidents, with the trace's own clock.")
    p.add_argument("trace", nargs="+", help="trace directories or files")
    p.add_argument("--findings", metavar="FILE.jsonl", help="write every state transition as JSON lines")
    p.add_argument("--db", metavar="URL", help="also record findings and incidents in this database "
                                               "(e.g. sqlite:///replay.db or postgresql+psycopg://...)")
    p.add_argument("--interval", type=float, default=TICK_S,
                   help=f"tick interval in seconds (default {TICK_S:g})")
    p.add_argument("--future", action="store_true",
                   help="take rows stamped more than a day after now (a trace made for a date ahead); by default "
                        "they are rejected as corrupt stamps")
    timezone_arg(p)
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("convert", help="write a trace in the long columnar form (Parquet or CSV)",
                       description="Read trace files and write samples and events as ts, entity, metric, value "
                                   "(samples.parquet, events.parquet), copying topology.yaml and labels.jsonl.")
    p.add_argument("trace", nargs="+", help="trace directories or files")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--format", choices=("parquet", "csv"), default="parquet")
    timezone_arg(p)
    p.set_defaults(func=cmd_convert)
