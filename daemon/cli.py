"""The ``raswarden`` command line."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import sys
from collections import Counter
from pathlib import Path

from daemon import __version__


def _fmt_ts(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _fmt_duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 7200:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"


def _console():
    """stdout console: the terminal's width on a terminal, wide and unwrapped into a file or pipe."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=200, soft_wrap=True)


def _progress(console):
    """A rich progress bar on a terminal; nothing otherwise."""
    if console is None or not console.is_terminal:
        return contextlib.nullcontext(None)
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>5.1f}%"),
                    TimeRemainingColumn(), console=console, transient=True)


def cmd_replay(args: argparse.Namespace) -> int:
    from rich.console import Console

    from daemon.pipeline import PipelineConfig
    from daemon.replay import replay

    err = Console(stderr=True)
    out = _console()
    config = PipelineConfig(interval_s=args.interval)
    findings_fh = open(args.findings, "w") if args.findings else None
    try:
        with _progress(err) as bar:
            tasks: dict[str, int] = {}

            def progress(phase: str, done: float, total: float) -> None:
                if bar is None:
                    return
                if phase not in tasks:
                    tasks[phase] = bar.add_task("reading trace" if phase == "read" else "replaying ticks", total=total)
                bar.update(tasks[phase], completed=done)

            result = replay(args.trace, findings_out=findings_fh, db_url=args.db, config=config,
                            progress=progress)
    except FileNotFoundError as exc:
        print(f"raswarden: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if findings_fh:
            findings_fh.close()
    print_summary(out, result)
    return 0


def print_summary(console, result) -> None:
    """The end-of-replay summary: what was read, what was rejected, incidents by rack/node/category."""
    from rich.table import Table

    s = result.stats
    p = result.pipeline
    console.print(
        f"[bold]raswarden replay[/bold]: {s.files} files, {s.samples:,} samples, {s.events:,} RAS events, "
        f"{s.ticks:,} ticks of {p.config.interval_s:g} s ({_fmt_ts(s.first_ts)} .. {_fmt_ts(s.last_ts)}), "
        f"{s.wall_s:.1f} s wall"
    )
    if s.events_by_kind:
        console.print("events by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(s.events_by_kind.items())))
    rejected = result.rejects.total
    console.print(f"lines rejected: {rejected:,}; duplicate samples dropped: {s.duplicates:,}; "
                  f"Xids merged across sources: {p.resolver.merged}")
    for path, why in s.skipped:
        console.print(f"  skipped {path}: {why}", markup=False, highlight=False)
    for note in result.rejects.notes[:10]:
        console.print(f"  note: {note}", markup=False, highlight=False)
    if s.jumps:
        longest = max(s.jumps, key=lambda j: j[1] - j[0])
        console.print(f"stretches without data jumped over: {len(s.jumps)}, the longest "
                      f"{_fmt_duration(longest[1] - longest[0])} ({_fmt_ts(longest[0])} .. {_fmt_ts(longest[1])})")
    if rejected:
        t = Table(title="rejected input", show_lines=False)
        t.add_column("format")
        t.add_column("reason")
        t.add_column("count", justify="right")
        for (fmt, reason), n in sorted(result.rejects.counts.items()):
            t.add_row(fmt, reason, str(n))
        console.print(t)
        for m in result.rejects.messages[:10]:
            console.print(f"  {m}", markup=False, highlight=False)
    from detectors.rules import RULE_INPUTS

    present = set(p.mapper.metrics)
    missing = [f"{m} ({what})" for m, what in RULE_INPUTS.items() if m not in present]
    if missing:
        console.print("not in this trace, so these rules are blind: " + "; ".join(missing))
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
        t.add_row(inc.rack or "-", inc.entity, inc.category, inc.severity.label, _fmt_ts(inc.opened_at),
                  "open" if inc.open else f"closed ({inc.close_reason})", "; ".join(inc.evidence)[:160])
    console.print(t)
    by = Counter((i.rack or "-", i.category) for i in incidents)
    console.print("by rack and category: " + ", ".join(f"{r}/{c} {n}" for (r, c), n in sorted(by.items())))


def cmd_convert(args: argparse.Namespace) -> int:
    import shutil

    from daemon.formats import ColumnarWriter, ReadContext
    from daemon.naming import SeriesMapper
    from daemon.trace import Trace

    trace = Trace.discover(args.trace)
    mapper = SeriesMapper(topology=trace.topology())
    ctx = ReadContext(mapper=mapper)
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


def _hours(seconds) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f} h"


def _vendor_table(by_vendor: dict):
    """Each vendor's figures side by side (raswarden / baseline)."""
    from rich.table import Table

    table = Table(title="per vendor (raswarden / baseline)")
    for col in ("vendor", "node-days", "faults", "recall", "median lead", "hard faults failed", "false flags",
                "per 1,000 node-days", "confounder flags"):
        table.add_column(col)
    for vendor, (a, b) in by_vendor.items():
        ra, rb = a.as_dict(), b.as_dict()
        table.add_row(vendor, f"{ra['node_days']:g}", str(ra["all"]["faults"]),
                      f"{ra['all']['recall_before_failure']} / {rb['all']['recall_before_failure']}",
                      f"{_hours(ra['all']['lead_time_median_s'])} / {_hours(rb['all']['lead_time_median_s'])}",
                      f"{ra['all']['hard_faults_failed']}/{ra['all']['hard_faults']}",
                      f"{ra['false_flags']} / {rb['false_flags']}",
                      f"{ra['false_flags_per_1000_node_days']} / {rb['false_flags_per_1000_node_days']}",
                      f"{ra['confounder_flags']} / {rb['confounder_flags']}")
    return table


def cmd_evaluate(args: argparse.Namespace) -> int:
    from rich.table import Table

    from daemon.evaluate import compare

    from detectors.bundle import IncompatibleModel, ModelBundle

    console = _console()
    if args.matrix:
        return _evaluate_matrix(args, console)
    if not args.trace:
        print("raswarden: error: evaluate needs trace directories (or --matrix)", file=sys.stderr)
        return 2
    try:
        model = ModelBundle.load(args.model) if args.model else None
        result = compare([Path(p) for p in args.trace], interval_s=args.interval, model=model)
    except (FileNotFoundError, IncompatibleModel) as exc:
        print(f"raswarden: error: {exc}", file=sys.stderr)
        return 2
    ours, base = result.raswarden.as_dict(), result.baseline.as_dict()
    table = Table(title=f"evaluation over {len(args.trace)} trace(s), {ours['node_days']:g} node-days")
    for col in ("fault class", "faults", "recall (raswarden / baseline)", "median lead", "p10 lead",
                "baseline median lead", "hard faults failed", "median latency"):
        table.add_column(col)
    rows = list(ours["by_class"].items()) + [("all", ours["all"])]
    for name, r in rows:
        b = base["by_class"].get(name, base["all"]) if name != "all" else base["all"]
        table.add_row(name, str(r["faults"]), f"{r['recall_before_failure']} / {b['recall_before_failure']}",
                      _hours(r["lead_time_median_s"]), _hours(r["lead_time_p10_s"]), _hours(b["lead_time_median_s"]),
                      f"{r['hard_faults_failed']}/{r['hard_faults']}",
                      "-" if r["hard_latency_median_s"] is None else f"{r['hard_latency_median_s']:.0f} s")
    console.print(table)
    for label, d in (("raswarden", ours), ("baseline", base)):
        console.print(f"{label}: {d['flags']} flags, {d['false_flags']} false "
                      f"({d['false_flags_per_1000_node_days']} per 1,000 node-days), "
                      f"{d['confounder_flags']} on confounders, precision {d['precision']}")
    if result.by_vendor:
        console.print(_vendor_table(result.by_vendor))
    if args.json:
        Path(args.json).write_text(json.dumps(result.as_dict(), indent=2))
        console.print(f"wrote {args.json}")
    return 0


def _evaluate_matrix(args: argparse.Namespace, console) -> int:
    """``evaluate --matrix``: the cells' runs (resumed from ``--json``), then the table per cell."""
    import tempfile

    from daemon.matrix import parse_seeds, report, run_matrix

    out = Path(args.json) if args.json else Path(tempfile.mkdtemp(prefix="raswarden-matrix-")) / "matrix.json"

    def progress(r: dict) -> None:
        a = r["raswarden"]
        hit = sum(c["flagged"] for c in a["classes"].values())
        n = sum(c["faults"] for c in a["classes"].values())
        console.print(f"{r['kind']} {r['sampling']}/{r['noise']} seed {r['seed']}: {hit}/{n} faults flagged before "
                      f"failure, {a['false_flags']} false flags ({r['wall_s']:.0f} s)")

    try:
        results = run_matrix(args.sampling.split(","), args.noise.split(","), parse_seeds(args.seeds),
                             parse_seeds(args.quiet_seeds), out, args.jobs, args.model, progress)
    except ValueError as exc:
        print(f"raswarden: error: {exc}", file=sys.stderr)
        return 2
    print(report(results))
    console.print(f"results in {out}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from daemon.evaluate import compare
    from daemon.train import train

    console = _console()
    out = Path(args.out)

    def progress(path, stats) -> None:
        console.print(f"collected {path}: {stats.ticks} ticks, {stats.samples:,} samples")

    try:
        bundle = train([Path(p) for p in args.trace], out, args.interval, args.stride, args.horizon * 3600.0,
                       progress, jobs=args.jobs)
    except (FileNotFoundError, ValueError) as exc:
        print(f"raswarden: error: {exc}", file=sys.stderr)
        return 2
    for kind, row in bundle.meta["training"].items():
        console.print(f"{kind}: {row['rows']:,} rows ({row['positive_rows']:,} positive, {row['healthy_rows']:,} "
                      f"healthy); multivariate threshold {row['multivariate_threshold']}, predictor threshold "
                      f"{row.get('predictor_threshold', '-')}; {row['fit_s']} s")
        rejected = (row.get("predictor_out_of_fold") or {}).get("rejected")
        if rejected:
            console.print(f"[yellow]{kind} predictor {rejected} (more labelled traces will help)[/]")
    if args.holdout:
        result = compare([Path(p) for p in args.holdout], interval_s=args.interval, model=bundle)
        bundle.meta["evaluation"] = {"traces": list(args.holdout), "raswarden": result.raswarden.as_dict(),
                                     "baseline": result.baseline.as_dict()}
        bundle.save(out)
        r, b = result.raswarden.as_dict()["all"], result.baseline.as_dict()["all"]
        console.print(f"holdout: recall {r['recall_before_failure']} (baseline {b['recall_before_failure']}), "
                      f"median lead {_hours(r['lead_time_median_s'])} (baseline {_hours(b['lead_time_median_s'])})")
    console.print(f"wrote {out}")
    return 0


DEFAULT_LIBRARY = Path(__file__).resolve().parent.parent / "fixtures" / "faults"


def cmd_simulate(args: argparse.Namespace) -> int:
    import time

    from daemon.sim.simulator import Simulator
    from daemon.sim.faults import TemplateError
    from daemon.sim.noise import parse_noise
    from daemon.sim.observe import sampling_from_text
    from daemon.sim.scenario import Scenario
    from daemon.sim.writer import simulate_to

    library = Path(args.library)
    try:
        scenario = Scenario.load(args.scenario)
        if args.seed is not None:
            scenario.seed = args.seed
        if args.profile is not None:
            scenario.profile = args.profile
        if args.noise is not None:
            scenario.noise_name, scenario.noise = parse_noise(args.noise, "--noise")
        if args.sampling is not None:
            scenario.sampling = sampling_from_text(args.sampling, scenario.resolution)
        sim = Simulator(scenario, library)
    except (TemplateError, OSError) as exc:
        print(f"raswarden: error: {exc}", file=sys.stderr)
        return 2
    if args.closed_loop:
        return _closed_loop(args, scenario, library)
    if not args.out:
        print("raswarden: error: simulate needs --out DIR (or --closed-loop)", file=sys.stderr)
        return 2
    if args.serve:
        from daemon.sim.serve import loopback, serve

        exporters = ("dcgm-exporter on port 9400, node_exporter on port 9100" if sim.topo.vendors == ("nvidia",)
                     else "each vendor's exporter (dcgm-exporter 9400, AMD 5000, npu-exporter 8082) and node_exporter "
                          "9100")
        print(f"serving {sim.topo.n_nodes} nodes at {args.speed:g}x on {loopback(0)} .. "
              f"{loopback(sim.topo.n_nodes - 1)}: {exporters}; kernel log, topology.yaml and "
              f"prometheus-targets.json in {args.out}", flush=True)
        try:
            serve(sim, Path(args.out), args.speed)
        except ValueError as exc:
            print(f"raswarden: error: {exc}", file=sys.stderr)
            return 2
        return 0
    started = time.perf_counter()
    try:
        writer = simulate_to(sim, Path(args.out), args.format)
    except TemplateError as exc:
        print(f"raswarden: error: {exc}", file=sys.stderr)
        return 2
    wall = time.perf_counter() - started
    labels = sim.labels()
    faults = sum(1 for x in labels if not x["fault"].startswith("benign_"))
    print(f"simulated {scenario.name} (seed {scenario.seed}): {sim.topo.n_gpus} accelerators, {sim.topo.n_ports} "
          f"ports, {scenario.duration / 3600:g} h at {scenario.resolution:g} s{_sampled(scenario)}; "
          f"{writer.samples:,} samples, "
          f"{writer.lines} kernel lines, {faults} faults and {len(labels) - faults} confounders labelled; "
          f"{wall:.1f} s ({writer.samples / max(wall, 1e-9):,.0f} samples/s) -> {args.out}")
    return 0


def _sampled(scenario) -> str:
    """How a scenario is sampled and how noisy it is, for the summary line."""
    words = [f"{src} every {s.interval:g} s{' (downsampled)' if s.aligned else ''}"
             for src, s in scenario.sampling.items()]
    if scenario.noise_name != "quiet":
        words.append(f"{scenario.noise_name} noise")
    return f" ({', '.join(words)})" if words else ""


def _closed_loop(args: argparse.Namespace, scenario, library: Path) -> int:
    import copy
    import json

    from daemon.closedloop import POLICIES, LoopOptions, run
    from daemon.closedloop_report import table
    from daemon.sim.simulator import Simulator
    from detectors.bundle import IncompatibleModel, ModelBundle

    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        print(f"raswarden: error: --policy takes {', '.join(POLICIES)} (comma-separated), not {args.policy!r}",
              file=sys.stderr)
        return 2
    try:
        model = ModelBundle.load(args.model) if args.model else None
    except (IncompatibleModel, OSError) as exc:
        print(f"raswarden: error: {exc}", file=sys.stderr)
        return 2
    opts = LoopOptions(interval_s=args.interval)
    results = []
    for policy in policies:
        result = run(Simulator(copy.deepcopy(scenario), library), policy, opts, model=model,
                     playbook_dirs=args.playbooks)
        results.append(result)
        print(f"{policy}: net loss {result.gpu_hours['net_loss']:,.1f} GPU-h, effective training time ratio "
              f"{result.gpu_hours['effective_training_ratio']:.3f}, drains {result.drains_true} true / "
              f"{result.drains_false} false ({result.ticks} ticks, {result.wall_s:.0f} s)", flush=True)
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps({"options": opts.__dict__ | {"guards": opts.guards.__dict__},
                                               "results": [r.as_dict() for r in results]}, indent=1) + "\n")
    return 0


def _load_config(args: argparse.Namespace):
    import os

    from daemon.config import DEFAULT_PATH, load

    return load(args.config or os.environ.get("RASWARDEN_CONFIG") or DEFAULT_PATH)


def _open_store(args: argparse.Namespace, cfg):
    """The state database of a command: ``--db``, else the config's store.url."""
    from daemon.store import Store

    return Store(args.db or cfg.store_url)


@contextlib.contextmanager
def _config_and_store(args: argparse.Namespace):
    """The config and the state database of a command."""
    cfg = _load_config(args)
    store = _open_store(args, cfg)
    try:
        yield cfg, store
    finally:
        store.close()


def _alerting(args: argparse.Namespace):
    from daemon.alerting.service import Alerting

    cfg = _load_config(args)
    store = _open_store(args, cfg)
    return Alerting.from_config(cfg, store), store


def cmd_alerts(args: argparse.Namespace) -> int:
    import time

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
                      f"next {_fmt_ts(r.next_attempt_at) if r.status == 'pending' else '-':<20} {r.last_error}")
            return 0
        # flush: read incidents, queue, deliver until the outbox is empty (or follow for ever)
        deadline = time.time() + args.timeout
        while True:
            counts = alerting.step()
            if args.verbose:
                print(counts, file=sys.stderr)
            pending = len(alerting.outbox.pending())
            if not args.follow and (pending == 0 or time.time() >= deadline):
                break
            time.sleep(args.interval if args.follow or pending == 0 else min(args.interval, 0.5))
        failed = len([r for r in alerting.outbox.pending()])
        print(f"outbox: {failed} notification(s) still pending" if failed else "outbox delivered")
        return 0 if failed == 0 else 3
    finally:
        store.close()


def cmd_check_config(args: argparse.Namespace) -> int:
    cfg = _load_config(args)
    from daemon.alerting.service import Alerting  # builds every receiver: catches what parsing cannot
    from daemon.store import Store

    from daemon.collectors import build
    from daemon.formats.base import ReadContext
    from daemon.naming import SeriesMapper
    from daemon.topology import Topology

    store = Store("sqlite://")
    try:
        Alerting.from_config(cfg, store)
        topology = Topology.load(cfg.service.topology) if cfg.service.topology else Topology()
        for c in build(cfg.collectors, ReadContext(mapper=SeriesMapper(topology=topology))):
            c.close()
        if cfg.service.model:
            from detectors.bundle import ModelBundle

            ModelBundle.load(cfg.service.model)
    except (ValueError, OSError) as exc:
        print(f"raswarden: {cfg.path}: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
    print(f"{cfg.path}: OK ({len(cfg.collectors)} collectors, {len(cfg.receivers)} receivers, "
          f"{len(cfg.alerting.routes)} routes)")
    return 0


def _remediation(args: argparse.Namespace):
    from daemon.remediation import Remediation, scheduler_from_config

    cfg = _load_config(args)
    store = _open_store(args, cfg)
    return Remediation(cfg, store, scheduler_from_config(cfg)), store


def cmd_playbook(args: argparse.Namespace) -> int:
    import time

    from playbooks.model import PlaybookError, load

    if args.playbook_command == "validate":
        try:
            dirs = args.dir or (_load_config(args).playbook_dirs if args.config else [])
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
            from daemon.remediation import incident_ref

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
        from daemon.lease import Lease, shard_lease

        lease = Lease(store, shard_lease(args.shard), ttl_s=args.lease_ttl or max(10.0, 3 * args.interval))
        try:
            while True:
                if lease.acquire():
                    counts = rem.step()
                    if args.verbose:
                        print(counts, file=sys.stderr)
                elif args.verbose or not args.follow:
                    held = lease.current()
                    print(f"standby: {held.holder if held else '?'} holds shard {args.shard}", file=sys.stderr)
                if not args.follow:
                    break
                time.sleep(args.interval)
        finally:
            lease.release()
        return 0
    finally:
        store.close()


def cmd_node(args: argparse.Namespace) -> int:
    """raswarden drain|resume NODE: an operator's own action through raswarden, journaled."""
    import getpass

    from daemon.operator import OperatorError, node_action
    from daemon.remediation import scheduler_from_config

    with _config_and_store(args) as (cfg, store):
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

    from daemon.operator import OperatorError, approve

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


def cmd_silence(args: argparse.Namespace) -> int:
    import getpass
    import time

    from daemon.alerting.silences import SilenceBook
    from playbooks.duration import parse_duration

    cfg = _load_config(args)
    store = _open_store(args, cfg)
    book = SilenceBook(store)
    now = time.time()
    try:
        if args.silence_command == "add":
            try:
                ends = now + parse_duration(args.duration, "--duration")
                sil = book.add(args.matcher, now, ends, args.by or getpass.getuser(), args.comment)
            except ValueError as exc:
                print(f"raswarden: {exc}", file=sys.stderr)
                return 2
            print(f"{sil.id} silences {' '.join(str(m) for m in sil.matchers)} until {_fmt_ts(sil.ends_at)}")
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
                print(f"{sil.id}  {state:<8} until {_fmt_ts(sil.ends_at)}  by {sil.created_by or '-':<10} "
                      f"{' '.join(str(m) for m in sil.matchers)}  {sil.comment}")
        return 0
    finally:
        store.close()


def cmd_run(args: argparse.Namespace) -> int:
    """raswarden run: the daemon (systemd runs it as raswarden.service)."""
    import os

    from daemon.service import Service

    cfg = _load_config(args)
    if args.db:
        cfg.store_url = args.db
    if os.environ.get("JOURNAL_STREAM") or os.environ.get("INVOCATION_ID"):
        # under systemd: the journal stamps time and unit itself
        for h in logging.getLogger().handlers:
            h.setFormatter(logging.Formatter("<%(levelno)s>%(name)s: %(message)s"))
    if args.verbose == 0:
        logging.getLogger("raswarden").setLevel(logging.INFO)
    try:
        service = Service(cfg)
    except (ValueError, OSError) as exc:  # a collector option, the topology or the model is unusable
        print(f"raswarden: cannot start: {exc}", file=sys.stderr)
        return 2
    return service.run()


def cmd_status(args: argparse.Namespace) -> int:
    """raswarden status: who is active, the last tick, health by state, open incidents, the daemon's /healthz."""
    import time
    import urllib.error
    import urllib.request

    from daemon.lease import Lease, shard_lease

    with _config_and_store(args) as (cfg, store):
        now = time.time()
        lease = Lease(store, shard_lease(cfg.service.shard)).current()
        if lease is None:
            print(f"shard {cfg.service.shard}: no daemon has run on this store")
        else:
            alive = lease.expires_at > now
            print(f"shard {cfg.service.shard}: {'held by' if alive else 'last held by'} {lease.holder}"
                  f"{'' if alive else f' (lease ran out {now - lease.expires_at:.0f} s ago)'}")
        for row in store.collector_states():
            if not row.name.startswith("_"):
                print(f"collector {row.name}: last saved {_fmt_ts(row.updated_at)}")
        health = Counter(h.state for h in store.health())
        print("health: " + (", ".join(f"{n} {st}" for st, n in sorted(health.items()) if st != "healthy")
                            or "every entity healthy"))
        incidents = store.incidents("open")
        print(f"open incidents: {len(incidents)}"
              + (" (" + ", ".join(f"{n} {sev}" for sev, n in Counter(i.severity for i in incidents).items()) + ")"
                 if incidents else ""))
        url = f"http://{cfg.http.listen}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=3) as r:
                detail = json.loads(r.read())
            print(f"daemon at {cfg.http.listen}: ready; {detail.get('status', '')}")
        except urllib.error.HTTPError as exc:
            detail = json.loads(exc.read() or b"{}")
            print(f"daemon at {cfg.http.listen}: NOT ready: {'; '.join(detail.get('problems', [])) or exc}")
            return 1
        except OSError as exc:
            print(f"daemon at {cfg.http.listen}: not answering ({getattr(exc, 'reason', exc)})")
            return 1
        return 0


def cmd_incidents(args: argparse.Namespace) -> int:
    """raswarden incidents: open (or all) incidents with their evidence."""
    with _config_and_store(args) as (_cfg, store):
        rows = store.incidents(None if args.all else "open")
        if args.json:
            print(json.dumps([r.model_dump() for r in rows], indent=1, default=str))
            return 0
        if not rows:
            print("no open incidents" if not args.all else "no incidents")
        for r in rows:
            closed = f" closed {_fmt_ts(r.closed_at)} ({r.close_reason})" if r.closed_at else ""
            under = f" under {r.parent}" if r.parent else ""
            print(f"{r.id}  {r.severity:<10} {r.category:<12} {r.entity:<24} opened {_fmt_ts(r.opened_at)}{closed}"
                  f"{under}")
            for line in r.evidence[:3]:
                print(f"      {line}")
        return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raswarden",
        description="Fault-recovery daemon for AI supernode clusters: flags sub-healthy accelerators, "
                    "blades and links from RAS, link and thermal telemetry.",
    )
    parser.add_argument("--version", action="version", version=f"raswarden {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("replay", help="run recorded telemetry through the whole pipeline",
                       description="Replay trace directories or files (OpenMetrics, query_range JSON, journald "
                                   "JSON, syslog/dmesg, rasdaemon SQLite, Parquet/CSV) through readers, rules, "
                                   "health and incidents, with the trace's own clock.")
    p.add_argument("trace", nargs="+", help="trace directories or files")
    p.add_argument("--findings", metavar="FILE.jsonl", help="write every state transition as JSON lines")
    p.add_argument("--db", metavar="URL", help="also record findings and incidents in this database "
                                               "(e.g. sqlite:///replay.db or postgresql+psycopg://...)")
    p.add_argument("--interval", type=float, default=30.0, help="tick interval in seconds (default 30)")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("convert", help="write a trace in the long columnar form (Parquet or CSV)",
                       description="Read trace files and write samples and events as ts, entity, metric, value "
                                   "(samples.parquet, events.parquet), copying topology.yaml and labels.jsonl.")
    p.add_argument("trace", nargs="+", help="trace directories or files")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--format", choices=("parquet", "csv"), default="parquet")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("evaluate", help="score findings on labelled traces, beside the static baseline",
                       description="Replay labelled traces (labels.jsonl) with raswarden's detectors and with the "
                                   "static-threshold baseline, and report per fault class the recall before "
                                   "failure, lead time, hard-fault latency, false and confounder flags "
                                   "(docs/architecture.md §5). With --matrix, simulated fleets instead of traces: "
                                   "every "
                                   "cell of sampling interval x healthy-part noise, over the seeds given, figures "
                                   "per cell (docs/detectors.md).")
    p.add_argument("trace", nargs="*", help="trace directories, each with labels.jsonl")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON (with --matrix: the results file, "
                                                  "resumed when it exists)")
    p.add_argument("--interval", type=float, default=30.0, help="tick interval in seconds (default 30)")
    p.add_argument("--model", metavar="DIR", help="add the learned detectors of a model from 'raswarden train'")
    m = p.add_argument_group("matrix")
    m.add_argument("--matrix", action="store_true", help="evaluate over the matrix of simulated fleets")
    m.add_argument("--sampling", default="15s,60s,300s,mixed", help="matrix cells' sampling (default: all)")
    m.add_argument("--noise", default="quiet,realistic,noisy", help="matrix cells' noise (default: all)")
    m.add_argument("--seeds", default="1..3", help="dense-trace seeds per cell (default 1..3)")
    m.add_argument("--quiet-seeds", default="", help="quiet-week seeds per cell, e.g. 1..4 (default none)")
    m.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("train", help="fit the learned detectors on labelled traces and save a model",
                       description="Replay labelled traces, collect the streaming feature rows, fit the multivariate "
                                   "detector (IsolationForest on healthy periods) and the failure predictor "
                                   "(gradient boosting on labelled faults), and save them with their metadata. "
                                   "The daemon runs without a model on rules and statistical detectors.")
    p.add_argument("trace", nargs="+", help="trace directories, each with labels.jsonl")
    p.add_argument("--out", required=True, metavar="DIR", help="model directory to write")
    p.add_argument("--interval", type=float, default=30.0, help="tick interval in seconds (default 30)")
    p.add_argument("--stride", type=int, default=10,
                   help="keep unlabelled entities' rows every N ticks (default 10); labelled ones every tick")
    p.add_argument("--horizon", type=float, default=12.0, help="failure horizon of the predictor in hours")
    p.add_argument("--jobs", type=int, default=1,
                   help="processes collecting at once: traces side by side, a long trace cut into parts of time, "
                        "each warmed up on the day before it (default 1)")
    p.add_argument("--holdout", nargs="+", metavar="TRACE",
                   help="evaluate the new model on these traces and record the figures in its metadata")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("simulate", help="simulate a supernode from a scenario and write it as a trace",
                       description="Generate a simulated supernode (workload, physics, fault templates and "
                                   "confounders) from a scenario file and write a trace directory that "
                                   "'raswarden replay' reads: OpenMetrics, journald kernel log, topology.yaml, "
                                   "labels.jsonl. The same scenario and seed give byte-identical output.")
    p.add_argument("scenario", help="scenario YAML (see fixtures/scenarios/)")
    p.add_argument("--out", metavar="DIR", help="output trace directory")
    p.add_argument("--format", choices=("openmetrics", "parquet"), default="openmetrics",
                   help="telemetry as OpenMetrics text (default) or the long columnar Parquet form")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--profile", choices=("stock", "full"),
                   help="override the scenario's exporter profile (stock: dcgm-exporter's default counters)")
    p.add_argument("--sampling", metavar="SPEC",
                   help="override the scenario's sampling, e.g. 'dcgm=15s,node=5m', 'all=5m:aligned' (downsampled "
                        "storage), 'all=60s:jitter=2s:missed=0.01'; intervals are multiples of the resolution")
    p.add_argument("--noise", choices=("quiet", "realistic", "noisy"),
                   help="override the healthy parts' background errors (default: the scenario's, else quiet)")
    p.add_argument("--serve", action="store_true",
                   help="instead of writing files, serve live exporters on loopback (one 127.x address per node)")
    p.add_argument("--speed", type=float, default=60.0,
                   help="with --serve: simulated seconds per wall-clock second (default 60)")
    p.add_argument("--closed-loop", action="store_true",
                   help="instead of writing a trace, run detectors and playbooks against a simulated Slurm and "
                        "account the GPU-hours per policy")
    p.add_argument("--policy", default="none,reactive,full",
                   help="with --closed-loop: none, reactive (act after failures only), full; comma-separated "
                        "(default: all three)")
    p.add_argument("--model", metavar="DIR", help="with --closed-loop: learned detectors for the full policy")
    p.add_argument("--playbooks", action="append", default=[], metavar="DIR",
                   help="with --closed-loop: operators' playbook directory (repeatable)")
    p.add_argument("--interval", type=float, default=30.0, help="with --closed-loop: tick interval (default 30 s)")
    p.add_argument("--json", metavar="FILE", help="with --closed-loop: also write the figures as JSON")
    p.add_argument("--library", default=str(DEFAULT_LIBRARY), metavar="DIR",
                   help="fault template directory (default: the bundled fixtures/faults)")
    p.set_defaults(func=cmd_simulate)

    def config_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", metavar="FILE", help="config file (default $RASWARDEN_CONFIG or "
                                                        "/etc/raswarden/raswarden.toml)")
        p.add_argument("--db", metavar="URL", help="state database (default: the config's store.url)")

    p = sub.add_parser("check-config", help="validate the config file (names the bad key)")
    p.add_argument("--config", metavar="FILE", help="config file (default $RASWARDEN_CONFIG or "
                                                    "/etc/raswarden/raswarden.toml)")
    p.set_defaults(func=cmd_check_config)

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
    q.add_argument("--follow", action="store_true", help="keep going (every --interval seconds) until killed")
    q.add_argument("--interval", type=float, default=5.0, help="seconds between passes (default 5)")
    q.add_argument("--timeout", type=float, default=60.0,
                   help="without --follow: stop after this many seconds even if some are pending (default 60)")
    config_args(q)
    p.set_defaults(func=cmd_alerts)

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
    q.add_argument("--follow", action="store_true", help="keep going every --interval seconds until killed")
    q.add_argument("--interval", type=float, default=5.0)
    q.add_argument("--shard", default="default", help="the shard this instance acts for (one active per shard)")
    q.add_argument("--lease-ttl", type=float, help="seconds before a silent holder's shard is taken over "
                                                   "(default: 3 intervals, at least 10)")
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

    p = sub.add_parser("run", help="the daemon: collect, detect, act and alert (systemd: raswarden.service)",
                       description="Run the service from the config file: live collectors on an interval, the "
                                   "pipeline, playbooks, alerts, /metrics, /healthz, the status page and the API. "
                                   "SIGTERM finishes the step in flight; SIGHUP reloads the config.")
    config_args(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("status", help="the shard's active daemon, collectors, health and open incidents")
    config_args(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("incidents", help="open incidents with their evidence (--all: closed ones too)")
    p.add_argument("--all", action="store_true")
    p.add_argument("--json", action="store_true", help="as JSON")
    config_args(p)
    p.set_defaults(func=cmd_incidents)

    p = sub.add_parser("approve", help="approve an action that waits for an operator")
    p.add_argument("action", help="action key or incident id")
    p.add_argument("--by", help="who (default: the current user)")
    config_args(p)
    p.set_defaults(func=cmd_approve)

    p = sub.add_parser("silence", help="mute alerts matching labels for a while",
                       description="Silences match alert labels (entity, node, rack, category, severity, "
                                   "incident, ...) with label=value, label!=value, label=~regex, label!~regex.")
    ssub = p.add_subparsers(dest="silence_command", required=True, metavar="ACTION")
    q = ssub.add_parser("add", help="add a silence")
    q.add_argument("matcher", nargs="+", help="e.g. rack=r07 category=gpu_thermal, or incident=inc-...")
    q.add_argument("--duration", default="2h", help="how long (default 2h; e.g. 30m, 4h, 1d)")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING if args.verbose == 0 else (logging.INFO if args.verbose == 1 else logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if args.verbose == 0:
        logging.getLogger("raswarden.input").setLevel(logging.ERROR)
    from daemon.alerting.secrets import SecretError, install_log_redaction
    from daemon.config import ConfigError

    install_log_redaction()
    try:
        return int(args.func(args) or 0)
    except (ConfigError, SecretError) as exc:
        print(f"raswarden: {exc}", file=sys.stderr)
        return 2
