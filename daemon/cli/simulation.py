"""``simulate``: a supernode from a scenario, written, served live or run in a closed loop."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from detectors.contract import TICK_S


def cmd_simulate(args: argparse.Namespace) -> int:
    import time

    from lab.sim.simulator import Simulator
    from lab.sim.faults import TemplateError
    from lab.sim.noise import parse_noise
    from lab.sim.observe import sampling_from_text
    from lab.sim.scenario import Scenario
    from lab.sim.writer import simulate_to
    from lab.bundled import FAULTS, scenario_path

    library = Path(args.library) if args.library else FAULTS
    try:
        scenario = Scenario.load(scenario_path(args.scenario))
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
        from lab.sim.serve import loopback, serve

        from lab.sim.exporter_names import EXPORTER_FILES, EXPORTER_PORTS

        port = {path.split("-exporter")[0]: p + args.port_offset for path, p in EXPORTER_PORTS.items()}
        served = {EXPORTER_FILES[(v, gpu)][0] for v in sim.topo.vendors for gpu in (True, False)}
        exporters = (f"dcgm-exporter on port {port['dcgm']}, node_exporter on port {port['node']}"
                     if served == {"dcgm-exporter.om", "node-exporter.om"} else
                     f"each vendor's exporter (dcgm-exporter {port['dcgm']}, AMD {port['amd-device-metrics']}, "
                     f"npu-exporter {port['npu']}) and node_exporter {port['node']}")
        print(f"serving {sim.topo.n_nodes} nodes at {args.speed:g}x on {loopback(0)} .. "
              f"{loopback(sim.topo.n_nodes - 1)}: {exporters}; kernel log, topology.yaml and "
              f"prometheus-targets.json in {args.out}", flush=True)
        try:
            server = serve(sim, Path(args.out), args.speed, args.port_offset)
        except ValueError as exc:
            print(f"raswarden: error: {exc}", file=sys.stderr)
            return 2
        how = "played to its end" if server.ended else "stopped"
        print(f"{sim.scenario.name}: {how}; the simulated clock fell behind the wall clock by up to "
              f"{max(server.max_lag_s, 0.0):.1f} s", flush=True)
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
    from dataclasses import replace

    from lab.closedloop import POLICIES, LoopOptions, run
    from lab.closedloop.options import CHECKPOINT_POLICIES
    from lab.closedloop.report import checkpoint_table, table
    from lab.sim.simulator import Simulator
    from detectors.bundle import IncompatibleModel, ModelBundle

    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        print(f"raswarden: error: --policy takes {', '.join(POLICIES)} (comma-separated), not {args.policy!r}",
              file=sys.stderr)
        return 2
    intervals = [p.strip() for p in args.checkpoint_policy.split(",") if p.strip()]
    if not intervals or set(intervals) - set(CHECKPOINT_POLICIES):
        print(f"raswarden: error: --checkpoint-policy takes {', '.join(CHECKPOINT_POLICIES)} (comma-separated), "
              f"not {args.checkpoint_policy!r}", file=sys.stderr)
        return 2
    if "advised" in intervals and "none" in policies:
        print("raswarden: error: --checkpoint-policy advised needs raswarden: not with --policy none",
              file=sys.stderr)
        return 2
    try:
        model = ModelBundle.load(args.model) if args.model else None
    except (IncompatibleModel, OSError) as exc:
        print(f"raswarden: error: {exc}", file=sys.stderr)
        return 2
    if not 0.0 <= args.bad_repairs <= 1.0 or args.repair_hours <= 0:
        print("raswarden: error: --bad-repairs is a share (0 to 1), --repair-hours positive", file=sys.stderr)
        return 2
    opts = LoopOptions(interval_s=args.interval, tick_s=args.tick, repair_s=args.repair_hours * 3600.0,
                       repair_orders=args.repair_orders, bad_repair_share=args.bad_repairs)
    try:
        opts.ticks_every()
    except ValueError as exc:
        print(f"raswarden: error: --tick: {exc}", file=sys.stderr)
        return 2
    results, by_interval, pairs = [], {}, [(p, cp) for p in policies for cp in intervals]
    for policy, cp in pairs:
        result = run(Simulator(copy.deepcopy(scenario), library), policy, replace(opts, checkpoint_policy=cp),
                     model=model, playbook_dirs=args.playbooks)
        results.append(result)
        by_interval.setdefault(policy, {})[cp] = [result]
        label = policy if len(intervals) == 1 else f"{policy}, {cp} checkpoints"
        print(f"{label}: net loss {result.gpu_hours['net_loss']:,.1f} GPU-h, effective training time ratio "
              f"{result.gpu_hours['effective_training_ratio']:.3f}, drains {result.drains_true} true / "
              f"{result.drains_false} false ({result.ticks} ticks, {result.wall_s:.0f} s)", flush=True)
        if result.repairs:
            rp = result.repairs
            print(f"{label}: repairs: {rp['orders']} orders, {rp['closed']} closed (median time to repair "
                  f"{rp['mttr_h'] if rp['mttr_h'] is not None else '-'} h), {rp['validation_catches']} botched "
                  f"repairs caught by validation, {rp['returned_broken']} returned to service broken", flush=True)
    if len(intervals) == 1:
        print(table(results))
    if intervals != ["fixed"]:  # the checkpoint policies side by side (their intervals), per detection policy
        for policy, runs in by_interval.items():
            print(f"\n{policy}:\n{checkpoint_table(runs)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"options": opts.__dict__ | {"guards": opts.guards.__dict__,
                                                                            "checkpoint_policy": intervals},
                                               "results": [r.as_dict() | {"checkpoint_policy": cp}
                                                           for r, (_, cp) in zip(results, pairs)]},
                                              indent=1) + "\n")
    return 0


def register(sub) -> None:
    """Add this module's commands to the ``raswarden`` parser's subcommands."""
    p = sub.add_parser("simulate", help="simulate a supernode from a scenario and write it as a trace",
                       description="Generate a simulated supernode (workload, physics, fault templates and "
                                   "confounders) from a scenario file and write a trace directory that "
                                   "'raswarden replay' reads: OpenMetrics, journald kernel log, topology.yaml, "
                                   "labels.jsonl. The same scenario and seed give byte-identical output.")
    p.add_argument("scenario", help="scenario YAML, or the name of a bundled one (mini, dense-all-classes, quiet-7d, "
                                    "scalex640-30d, ...: lab/library/scenarios)")
    p.add_argument("--out", metavar="DIR", help="output trace directory")
    p.add_argument("--format", choices=("openmetrics", "parquet"), default="openmetrics",
                   help="telemetry as OpenMetrics text (default) or the long columnar Parquet form")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--profile", choices=("stock", "full"),
                   help="override the scenario's exporter profile (stock: dcgm-exporter's default counters)")
    p.add_argument("--sampling", metavar="SPEC",
                   help="override the scenario's sampling, e.g. 'dcgm=15s,node=5m', 'all=5m:aligned' (downsampled "
                        "storage), 'all=60s:jitter=2s:missed=0.01'; intervals are multiples of the resolution")
    p.add_argument("--noise", choices=("quiet", "realistic", "noisy", "bursty"),
                   help="override the healthy parts' background errors (default: the scenario's, else quiet)")
    p.add_argument("--serve", action="store_true",
                   help="instead of writing files, serve live exporters on loopback (one 127.x address per node)")
    p.add_argument("--speed", type=float, default=60.0,
                   help="with --serve: simulated seconds per wall-clock second (default 60)")
    p.add_argument("--port-offset", type=int, default=0, metavar="N",
                   help="with --serve: add N to every exporter's port (9400, 9100, ...), for a second simulator or "
                        "beside real exporters")
    p.add_argument("--closed-loop", action="store_true",
                   help="instead of writing a trace, run detectors and playbooks against a simulated Slurm and "
                        "account the GPU-hours per policy")
    p.add_argument("--policy", default="none,reactive,full",
                   help="with --closed-loop: none, reactive (act after failures only), full; comma-separated "
                        "(default: all three)")
    p.add_argument("--model", metavar="DIR", help="with --closed-loop: learned detectors for the full policy")
    p.add_argument("--playbooks", action="append", default=[], metavar="DIR",
                   help="with --closed-loop: operators' playbook directory (repeatable)")
    p.add_argument("--interval", type=float, default=TICK_S,
                   help="with --closed-loop: the world's step, and raswarden's tick unless --tick (default 30 s)")
    p.add_argument("--tick", type=float, metavar="SECONDS",
                   help="with --closed-loop: raswarden's detection tick, a multiple of --interval (its playbooks "
                        "still step with the world; docs/playbooks.md)")
    p.add_argument("--json", metavar="FILE", help="with --closed-loop: also write the figures as JSON")
    p.add_argument("--checkpoint-policy", default="fixed", metavar="POLICIES",
                   help="with --closed-loop: how the jobs choose their periodic checkpoint interval: fixed (every "
                        "hour), daly (the best fixed interval for their size at the fleet's long-run failure rate), "
                        "oracle (at the scenario's own failures, unknowable beforehand), advised (raswarden's "
                        "advice, polled); comma-separated to compare them (docs/playbooks.md, Checkpoint advice)")
    p.add_argument("--repair-orders", action="store_true",
                   help="with --closed-loop: the technician works from raswarden's repair orders and validation "
                        "returns the nodes (default: the technician returns repaired nodes directly)")
    p.add_argument("--repair-hours", type=float, default=24.0,
                   help="with --closed-loop: a node out for repair is repaired this many hours later (default 24)")
    p.add_argument("--bad-repairs", type=float, default=0.0, metavar="SHARE",
                   help="with --closed-loop: the share of repairs that leave the fault in place (default 0)")
    p.add_argument("--library", metavar="DIR",
                   help="fault template directory (default: the bundled one, lab/library/faults)")
    p.set_defaults(func=cmd_simulate)
