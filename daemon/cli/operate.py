"""Running and watching the daemon: ``check-config``, ``run``, ``status``, ``incidents``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter

from daemon.cli.common import config_and_store, config_args, fmt_ts, load_config, store_of

def cmd_check_config(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    from daemon.alerting.runner import Alerting  # builds every receiver: catches what parsing cannot
    from daemon.store import Store

    from daemon.ingest.collectors import build
    from daemon.ingest.formats.reader import ReadContext
    from daemon.ingest.naming import SeriesMapper
    from daemon.topology import Topology

    store = Store("sqlite://")
    warnings: list[str] = []
    quiet = logging.getLogger("raswarden")  # what it would log (a receiver off) is said once below, as a warning
    level, quiet.level = quiet.level, logging.CRITICAL
    try:
        alerting = Alerting.from_config(cfg, store)
        warnings += [f"receiver {name} is off: {why}" for name, why in alerting.unavailable.items()]
        if cfg.http.token_error:
            warnings.append(f"the API's write calls are off: {cfg.http.token_error}")
        topology = Topology.configured(cfg.service.topology)
        from daemon.shards import plan_warnings

        warnings += [f"shards: {w}" for w in plan_warnings(cfg.shards, topology)]
        for c in build(cfg.collectors, ReadContext(mapper=SeriesMapper(topology=topology))):
            warnings += [f"collector {c.name}: {w}" for w in c.check()]
            c.close()
        if cfg.service.model:
            from detectors.bundle import ModelBundle

            ModelBundle.load(cfg.service.model)
    except (ValueError, OSError) as exc:
        print(f"raswarden: {cfg.path}: {exc}", file=sys.stderr)
        return 2
    finally:
        quiet.setLevel(level)
        store.close()
    for w in warnings:
        print(f"raswarden: {cfg.path}: WARNING: {w}", file=sys.stderr)
    summary = (f"({len(cfg.collectors)} collectors, {len(cfg.receivers)} receivers, {len(cfg.alerting.routes)} "
               "routes)" + (f", {len(warnings)} warning(s)" if warnings else ""))
    if warnings and args.strict:
        print(f"{cfg.path}: valid, but not all of it can work {summary}")
        return 1
    print(f"{cfg.path}: OK {summary}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """raswarden run: the daemon (systemd runs it as raswarden.service)."""
    import os

    from daemon.service.service import Service

    cfg = load_config(args)
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


def cmd_reload(args: argparse.Namespace) -> int:
    """raswarden reload: SIGHUP and wait for the daemon's answer (the unit's ExecReload=)."""
    from daemon.service.reloadanswer import reload_and_wait

    code, message = reload_and_wait(args.pid, args.timeout)
    print(f"raswarden: {message}", file=sys.stderr if code else sys.stdout)
    return code


def cmd_status(args: argparse.Namespace) -> int:
    """raswarden status: who is active, the last tick, health by state, open incidents, the daemon's /healthz."""
    import time
    import urllib.error
    import urllib.request

    from daemon.store.leases import Lease, claim_lease, shard_lease
    from daemon.shards import cycle_phase

    with config_and_store(args, read_only=True) as (cfg, store):
        now = time.time()
        for name in sorted(cfg.shards) or [cfg.service.shard]:  # a sharded cluster: every shard's holder
            lease = Lease(store, shard_lease(name)).current()
            if lease is None:
                print(f"shard {name}: no daemon has run on this store")
            else:
                alive = lease.expires_at > now
                phase = cycle_phase(cfg.shards, name, cfg.service.interval_s)
                turn = f"; cycles at +{phase:g} s of every {cfg.service.interval_s:g} s" if phase is not None else ""
                print(f"shard {name}: {'held by' if alive else 'last held by'} {lease.holder}"
                      f"{'' if alive else f' (lease ran out {now - lease.expires_at:.0f} s ago)'}{turn}")
                claim = Lease(store, claim_lease(name)).current()
                if claim is not None and claim.expires_at > now and claim.holder != lease.holder:
                    print(f"shard {name}: its own instance {claim.holder} stands by (a pool member holding the shard "
                          "hands it over at its next cycle)")
            warm = store.warm_state(name)
            print(f"shard {name}: " + (f"warm state saved {fmt_ts(warm.saved_at)} ({(now - warm.saved_at) / 60:.0f} "
                                       f"min ago, {warm.size // 1024} kB)" if warm else
                                       "no warm state saved (the detectors warm up afresh at a start)"))
        for row in store.collector_states():
            if not row.name.startswith("_"):
                print(f"collector {row.name}: last saved {fmt_ts(row.updated_at)}")
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
    with store_of(args, read_only=True) as store:
        rows = store.incidents(None if args.all else "open")
        if args.json:
            print(json.dumps([r.model_dump() for r in rows], indent=1, default=str))
            return 0
        if not rows:
            print("no open incidents" if not args.all else "no incidents")
        for r in rows:
            closed = f" closed {fmt_ts(r.closed_at)} ({r.close_reason})" if r.closed_at else ""
            under = f" under {r.parent}" if r.parent else ""
            print(f"{r.id}  {r.severity:<10} {r.category:<12} {r.entity:<24} opened {fmt_ts(r.opened_at)}{closed}"
                  f"{under}")
            for line in r.evidence[:3]:
                print(f"      {line}")
        return 0


def cmd_init(args: argparse.Namespace) -> int:
    """raswarden init: scrape the exporters once, write topology.yaml and a minimal config for what is there."""
    import datetime as dt
    from pathlib import Path

    import yaml

    from daemon.ingest.collectors.exposition import read_file_sd
    from daemon.ingest.inventory import discover
    from daemon.starter_config import minimal_config

    targets = list(args.targets)
    for path in args.file_sd:
        try:
            targets += [t for t, _labels in read_file_sd(path)]
        except (OSError, ValueError) as exc:
            print(f"raswarden: {path}: {exc}", file=sys.stderr)
            return 2
    if not targets:
        print("raswarden: init needs targets (host:port ...) or --file-sd FILE", file=sys.stderr)
        return 2
    out = Path(args.out)
    config, topology = out / "raswarden.toml", out / "topology.yaml"
    # the minimal config the package installs, as installed (nobody edited it yet), is init's to replace
    existing = [p for p in (config, topology) if p.exists() and not (p == config and p.read_text() == minimal_config())]
    if existing and not args.force:
        print(f"raswarden: {', '.join(map(str, existing))} already there (--force to overwrite)", file=sys.stderr)
        return 2
    inv = discover(targets, args.timeout)
    for target, why in sorted(inv.unreadable.items()):
        print(f"raswarden: {target}: {why}", file=sys.stderr)
    if not inv.nodes:
        print("raswarden: no target answered: nothing written", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    topology.write_text(
        f"# Written by 'raswarden init' on {stamp} from {len(targets)} targets.\n"
        "# The racks are a guess (nodes grouped by their name before the last '-'): put each node in its rack,\n"
        "# and add supernode, cooling, scheduler_name, serials and switch ports where you know them (docs/replay.md).\n"
        + yaml.safe_dump(inv.topology(), sort_keys=False, width=200))
    config.write_text(minimal_config(file_sd=[str(Path(p).resolve()) for p in args.file_sd] or None,
                                     targets=None if args.file_sd else targets, topology=str(topology.resolve())))
    gpus = sum(len(n.accelerators) for n in inv.nodes.values())
    ports = sum(len(n.ports) for n in inv.nodes.values())
    print(f"wrote {config} and {topology}: {len(inv.nodes)} nodes, {gpus} accelerators, {ports} fabric ports "
          f"({len(targets) - len(inv.unreadable)} of {len(targets)} targets answered)")
    print(f"next: edit the racks in {topology}, then: sudo raswarden check-config --config {config}")
    return 0 if not inv.unreadable else 3


def register(sub) -> None:
    """Add this module's commands to the ``raswarden`` parser's subcommands."""
    p = sub.add_parser("check-config", help="validate the config file (names the bad key)",
                       description="Exit 2 when the config is invalid (the key and why), 0 when it is valid; a part "
                                   "that is valid but cannot work here (a receiver whose secret is not there, a "
                                   "collector's missing file) is a WARNING line, and with --strict exit 1.")
    p.add_argument("--strict", action="store_true", help="exit 1 when there is any warning")
    config_args(p, db=False)
    p.set_defaults(func=cmd_check_config)

    p = sub.add_parser("init", help="scrape the exporters once and write topology.yaml and a minimal config",
                       description="Scrape every target once (dcgm-exporter, node_exporter) and write a topology "
                                   "(nodes with their addresses, GPUs with UUID, PCI bus id and model, fabric ports) "
                                   "and the minimal, safe config (dry-run, every alert to chat) that reads them. "
                                   "Exit 3 when some targets did not answer (the rest is written).")
    p.add_argument("targets", nargs="*", metavar="HOST:PORT", help="exporter endpoints")
    p.add_argument("--file-sd", action="append", default=[], metavar="FILE",
                   help="Prometheus file_sd file(s) listing the targets (the config will read them)")
    p.add_argument("--out", default="/etc/raswarden", metavar="DIR", help="where to write (default /etc/raswarden)")
    p.add_argument("--force", action="store_true", help="overwrite raswarden.toml and topology.yaml")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per scrape (default 5)")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("run", help="the daemon: collect, detect, act and alert (systemd: raswarden.service)",
                       description="Run the service from the config file: live collectors on an interval, the "
                                   "pipeline, playbooks, alerts, /metrics, /healthz, the status page and the API. "
                                   "SIGTERM finishes the step in flight; SIGHUP reloads the config.")
    config_args(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("reload", help="reload a running daemon's config and wait for it (systemd's ExecReload=)",
                       description="Send SIGHUP to the daemon and wait until it runs the new config (exit 0) or "
                                   "refused it (exit 1, with the reason; the old config runs on). The answer is "
                                   "read from $RUNTIME_DIRECTORY (the unit's RuntimeDirectory=); without it the "
                                   "signal is sent and not waited for.")
    p.add_argument("--pid", type=int, required=True, help="the daemon's process id (systemd: $MAINPID)")
    p.add_argument("--timeout", type=float, default=100.0, help="seconds to wait for the answer (default 100)")
    p.set_defaults(func=cmd_reload)

    p = sub.add_parser("status", help="the shard's active daemon, collectors, health and open incidents")
    config_args(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("incidents", help="open incidents with their evidence (--all: closed ones too)")
    p.add_argument("--all", action="store_true")
    p.add_argument("--json", action="store_true", help="as JSON")
    config_args(p)
    p.set_defaults(func=cmd_incidents)
