#!/usr/bin/env python3
"""Advisor benchmark (issue 29; not a test): what one round of checkpoint advice costs on a large fleet's journal.

Every ``[advice] every_s`` (5 minutes) the service reads the foresight window of the journal (incidents of the last
180 days, the drain and checkpoint steps), the jobs' measured checkpoint costs and the open incidents, and advises
every running opted-in job (daemon/operations/advice.py). This builds a store with ``--days`` of a fleet's journal at
``--cards`` accelerators (8 a node) and times ``Advisor.run`` and each of its reads (the median of ``--repeats``
after one untimed), each size in a process of its own for its peak memory.

The journal is made, not recorded: per node-year, ``HARD`` hard failures (Llama 3's 1.4, docs/fleet-stats.md),
``SUBHEALTHY`` sub-healthy hardware incidents that close without failing, ``TELEMETRY`` node telemetry incidents
(scrape gaps); a third of the hardware incidents drained with a checkpoint first (six journal steps each, the
built-in GPU playbook's), the others notified (two); 0.3 % of nodes with an open sub-healthy incident, 0.2 %
without telemetry; running jobs on 90 % of the nodes, 1 to 1,024 nodes each (log-uniform), all opted in. The
shape follows the closed loop's journals (lab/closedloop); the rates are set by flags.

Prints a table and writes JSON (default bench/results/advice.json). ``--url`` runs against another store (e.g.
PostgreSQL: its database is emptied first).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import peak_rss_mb, run_phase, write_results  # noqa: E402

DAY = 86400.0
HARD, SUBHEALTHY, TELEMETRY = 1.4, 4.0, 12.0  # a node-year
HW_CATEGORIES = {"accelerator": ("gpu_memory", "gpu_bus", "gpu_thermal"), "port": ("fabric_link",),
                 "node": ("node_memory",)}
GPU_STEPS = ("notify", "checkpoint", "wait_checkpoint", "drain", "notify_done", "close")


def build(url: str, cards: int, days: float, now: float, rng: random.Random) -> tuple[object, dict]:
    """A store at ``url`` holding ``days`` of journal for ``cards`` accelerators, and the cluster's running jobs."""
    from sqlalchemy import insert

    from daemon.store import ActionRow, EntityRow, IncidentRow, Store
    from playbooks.scheduler import ClusterState, JobInfo

    np_rng = np.random.default_rng(rng.randrange(2**32))
    store = Store(url)
    with store.engine.begin() as conn:
        for table in (ActionRow, IncidentRow, EntityRow):
            conn.execute(table.__table__.delete())
    nodes = [f"n{i:05d}" for i in range(max(1, cards // 8))]
    start = now - days * DAY
    rack = lambda n: f"r{int(n[1:]) // 80:03d}"  # noqa: E731  (640 cards a rack)
    entities = [{"id": n, "kind": "node", "node": n, "rack": rack(n), "first_seen": start, "attrs": {}}
                for n in nodes]
    incidents, actions = [], []
    years = days / 365.25

    def incident(node: str, kind: str, category: str, severity: str, opened: float, failed: float | None,
                 closed: float | None) -> str:
        entity = {"accelerator": f"{node}/gpu{rng.randrange(8)}", "port": f"{node}/mlx5_{rng.randrange(8)}:1"}.get(
            kind, node)
        iid = f"inc-{len(incidents):07d}"
        incidents.append({"id": iid, "fingerprint": f"{entity}|{category}", "entity": entity, "kind": kind,
                          "category": category, "severity": severity, "status": "open" if closed is None else
                          "closed", "opened_at": opened, "updated_at": closed or failed or opened,
                          "closed_at": closed, "rack": rack(node), "close_reason": "", "parent": None,
                          "evidence": ["bench"], "failed_at": failed})
        return iid

    def journal(iid: str, at: float, drained: bool, job: str) -> None:
        for k, step in enumerate(GPU_STEPS if drained else ("notify", "notify_done")):
            ts = at + 60.0 * k
            detail: dict = {"mode": "act", "finished_at": ts}
            if step == "checkpoint":
                detail |= {"signalled": [job], "signalled_at": ts}
            elif step == "wait_checkpoint":
                detail |= {"confirmed_at": {job: ts + rng.uniform(60, 300)}}
            actions.append({"idempotency_key": f"{iid}:pb#{step}", "incident_id": iid, "playbook": "pb",
                            "step": step, "status": "done", "ts": ts, "detail": detail})

    for node in nodes:
        for rate, what in ((HARD, "hard"), (SUBHEALTHY, "sub"), (TELEMETRY, "telemetry")):
            for _ in range(int(np_rng.poisson(rate * years))):
                at = rng.uniform(start, now - 3600)
                if what == "telemetry":
                    incident(node, "node", "telemetry", "subhealthy", at, None, at + rng.uniform(300, 3600))
                    continue
                kind = rng.choice(("accelerator", "accelerator", "port", "node"))
                category = rng.choice(HW_CATEGORIES[kind])
                lead = rng.uniform(0, 6 * 3600)
                failed = at + lead if what == "hard" else None
                iid = incident(node, kind, category, "failed" if failed else "subhealthy", at, failed,
                               (failed or at) + rng.uniform(3600, 3 * DAY))
                journal(iid, at, rng.random() < 1 / 3, f"{rng.randrange(10**6)}")
    for node in rng.sample(nodes, max(1, len(nodes) * 3 // 1000)):
        kind = rng.choice(("accelerator", "port"))
        incident(node, kind, rng.choice(HW_CATEGORIES[kind]), "subhealthy", now - rng.uniform(600, DAY), None, None)
    for node in rng.sample(nodes, max(1, len(nodes) // 500)):
        incident(node, "node", "telemetry", "subhealthy", now - rng.uniform(300, 3600), None, None)
    with store.engine.begin() as conn:
        for table, rows in ((EntityRow, entities), (IncidentRow, incidents), (ActionRow, actions)):
            for i in range(0, len(rows), 5000):
                conn.execute(insert(table.__table__), rows[i:i + 5000])
    jobs: dict[str, JobInfo] = {}
    free = rng.sample(nodes, int(len(nodes) * 0.9))
    while free:
        size = min(len(free), int(math.exp(rng.uniform(0, math.log(1024)))))
        jid = str(10**6 + len(jobs))
        jobs[jid] = JobInfo(jid, tuple(free[:size]), "running", True, comment="raswarden:checkpoint cost=3m")
        free = free[size:]
    return store, {"state": ClusterState(now, {}, jobs), "nodes": len(nodes), "incidents": len(incidents),
                   "actions": len(actions), "jobs": len(jobs)}


def one_size(url: str, cards: int, days: float, repeats: int) -> dict:
    """Build the journal for ``cards`` and time the advisor on it."""
    from daemon.operations.advice import Advisor, measured_costs, open_by_node
    from daemon.operations.foresight import measure

    now = 1_790_000_000.0
    t0 = time.perf_counter()
    store, made = build(url, cards, days, now, random.Random(cards))
    built_s = time.perf_counter() - t0
    advisor = Advisor()
    window = advisor.settings.window_days * DAY
    parts = {"measure": lambda: measure(store, now, window), "measured_costs": lambda: measured_costs(store,
             now - window), "open_by_node": lambda: open_by_node(store, {}),
             "run": lambda: advisor.run(store, made["state"], now)}
    out: dict = {"cards": cards, "days": days, "build_s": round(built_s, 1),
                 **{k: v for k, v in made.items() if k != "state"}}
    for name, fn in parts.items():
        fn()  # once before timing: imports, the database's cache
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - t)
        out[f"{name}_s"] = round(statistics.median(times), 3)
    out["advised"] = len(result)
    out["failures_in_window"] = len(advisor.foresight.failures)
    out["peak_rss_mb"] = peak_rss_mb()
    store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cards", default="10000,100000", help="fleet sizes (accelerators), comma-separated")
    ap.add_argument("--days", type=float, default=365.0, help="journal kept (incidents and actions are never trimmed)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--url", default="", help="store URL (default: a fresh SQLite file per size)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "advice.json")
    ap.add_argument("--phase", nargs=2, metavar=("CARDS", "URL"), help=argparse.SUPPRESS)  # one size, in a process
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(one_size(args.phase[1], int(args.phase[0]), args.days, args.repeats)))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cards in (int(c) for c in args.cards.split(",")):
            url = args.url or f"sqlite:///{tmp}/advice-{cards}.db"
            # each size in a fresh interpreter, so its peak memory is its own
            rows.append(run_phase(__file__, str(cards), url, "--days", str(args.days), "--repeats", str(args.repeats)))
            r = rows[-1]
            print(f"{cards:>7,} cards ({r['nodes']:,} nodes, {r['jobs']:,} jobs; {r['incidents']:,} incidents, "
                  f"{r['actions']:,} journal steps in {args.days:g} days): advice {r['run_s']:.2f} s "
                  f"(foresight {r['measure_s']:.2f}, costs {r['measured_costs_s']:.2f}, open incidents "
                  f"{r['open_by_node_s']:.2f}); {r['failures_in_window']:,} failures in the window; "
                  f"peak RSS {r['peak_rss_mb']} MB", flush=True)
    write_results(args.out, {"sizes": rows, "days": args.days, "url": args.url or "sqlite (file)"})


if __name__ == "__main__":
    main()
