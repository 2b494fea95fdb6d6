"""Scoring commands: ``evaluate`` (labelled traces or the simulated matrix) and ``train``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from daemon.cli.common import console_out, hours, print_table, timezone_arg
from detectors.contract import TICK_S

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
                      f"{hours(ra['all']['lead_time_median_s'])} / {hours(rb['all']['lead_time_median_s'])}",
                      f"{ra['all']['hard_faults_failed']}/{ra['all']['hard_faults']}",
                      f"{ra['false_flags']} / {rb['false_flags']}",
                      f"{ra['false_flags_per_1000_node_days']} / {rb['false_flags_per_1000_node_days']}",
                      f"{ra['confounder_flags']} / {rb['confounder_flags']}")
    return table


def cmd_evaluate(args: argparse.Namespace) -> int:
    from rich.table import Table

    from lab.evaluate import compare

    from detectors.bundle import IncompatibleModel, ModelBundle

    console = console_out()
    if args.matrix:
        return _evaluate_matrix(args, console)
    if not args.trace:
        print("raswarden: error: evaluate needs trace directories (or --matrix)", file=sys.stderr)
        return 2
    try:
        model = ModelBundle.load(args.model) if args.model else None
        result = compare([Path(p) for p in args.trace], interval_s=args.interval, model=model,
                         timezone=args.timezone)
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
                      hours(r["lead_time_median_s"]), hours(r["lead_time_p10_s"]), hours(b["lead_time_median_s"]),
                      f"{r['hard_faults_failed']}/{r['hard_faults']}",
                      "-" if r["hard_latency_median_s"] is None else f"{r['hard_latency_median_s']:.0f} s")
    print_table(console, table)
    for label, d in (("raswarden", ours), ("baseline", base)):
        console.print(f"{label}: {d['flags']} flags, {d['false_flags']} false "
                      f"({d['false_flags_per_1000_node_days']} per 1,000 node-days), "
                      f"{d['confounder_flags']} on confounders, precision {d['precision']}")
    if result.by_vendor:
        print_table(console, _vendor_table(result.by_vendor))
    if args.json:
        Path(args.json).write_text(json.dumps(result.as_dict(), indent=2))
        console.print(f"wrote {args.json}")
    return 0


def _evaluate_matrix(args: argparse.Namespace, console) -> int:
    """``evaluate --matrix``: the cells' runs (resumed from ``--json``), then the table per cell."""
    import tempfile

    from lab.matrix import check_cells, fleet_label, parse_seeds, report, run_matrix

    out = Path(args.json) if args.json else Path(tempfile.mkdtemp(prefix="raswarden-matrix-")) / "matrix.json"

    def progress(r: dict) -> None:
        a = r["raswarden"]
        hit = sum(c["flagged"] for c in a["classes"].values())
        n = sum(c["faults"] for c in a["classes"].values())
        console.print(f"{r['kind']} {fleet_label(r)}{r['sampling']}/{r['noise']} seed {r['seed']}: {hit}/{n} faults "
                      f"flagged before failure, {a['false_flags']} false flags ({r['wall_s']:.0f} s)")

    try:  # the arguments only: an error inside a run is a traceback, not a usage message
        from lab.sim.faults import parse_duration  # its TemplateError is a ValueError

        warmup_s = parse_duration(args.warmup, "--warmup")
        seeds, quiet_seeds = parse_seeds(args.seeds), parse_seeds(args.quiet_seeds)
        check_cells(args.sampling.split(","), args.noise.split(","), args.fleet)
    except ValueError as exc:
        print(f"raswarden: error: {exc}", file=sys.stderr)
        return 2
    results = run_matrix(args.sampling.split(","), args.noise.split(","), seeds, quiet_seeds, out, args.jobs,
                         args.model, progress, warmup_s, fleet=args.fleet)
    print(report(results))
    console.print(f"results in {out}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from lab.evaluate import compare
    from lab.train import train

    console = console_out()
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
                      f"median lead {hours(r['lead_time_median_s'])} (baseline {hours(b['lead_time_median_s'])})")
    console.print(f"wrote {out}")
    return 0


def register(sub) -> None:
    """Add this module's commands to the ``raswarden`` parser's subcommands."""
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
    p.add_argument("--interval", type=float, default=TICK_S,
                   help=f"tick interval in seconds (default {TICK_S:g})")
    p.add_argument("--model", metavar="DIR", help="add the learned detectors of a model from 'raswarden train'")
    timezone_arg(p)
    m = p.add_argument_group("matrix")
    m.add_argument("--matrix", action="store_true", help="evaluate over the matrix of simulated fleets")
    m.add_argument("--sampling", default="15s,60s,300s,mixed", help="matrix cells' sampling: 10s, 15s, 60s, 300s, "
                                                                     "mixed, 300s-live, 15s-60s, 60s-5m (default: "
                                                                     "issue 24's four)")
    m.add_argument("--noise", default="quiet,realistic,noisy", help="matrix cells' noise (default: all)")
    m.add_argument("--seeds", default="1..3", help="dense-trace seeds per cell (default 1..3)")
    m.add_argument("--fleet", default="scalex640",
                   help="the hardware: scalex640 (an H100 rack, default) or gb200 (nine GB200 NVL72 racks)")
    m.add_argument("--quiet-seeds", default="", help="quiet-week seeds per cell, e.g. 1..4 (default none)")
    m.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    m.add_argument("--warmup", default="0s", help="dense runs: this long a healthy fleet watched before the faults "
                                                  "begin, e.g. 24h (default none)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("train", help="fit the learned detectors on labelled traces and save a model",
                       description="Replay labelled traces, collect the streaming feature rows, fit the multivariate "
                                   "detector (IsolationForest on healthy periods) and the failure predictor "
                                   "(gradient boosting on labelled faults), and save them with their metadata. "
                                   "The daemon runs without a model on rules and statistical detectors.")
    p.add_argument("trace", nargs="+", help="trace directories, each with labels.jsonl")
    p.add_argument("--out", required=True, metavar="DIR", help="model directory to write")
    p.add_argument("--interval", type=float, default=TICK_S,
                   help=f"tick interval in seconds (default {TICK_S:g})")
    p.add_argument("--stride", type=int, default=10,
                   help="keep unlabelled entities' rows every N ticks (default 10); labelled ones every tick")
    p.add_argument("--horizon", type=float, default=12.0, help="failure horizon of the predictor in hours")
    p.add_argument("--jobs", type=int, default=1,
                   help="processes collecting at once: traces side by side, a long trace cut into parts of time, "
                        "each warmed up on the day before it (default 1)")
    p.add_argument("--holdout", nargs="+", metavar="TRACE",
                   help="evaluate the new model on these traces and record the figures in its metadata")
    p.set_defaults(func=cmd_train)
