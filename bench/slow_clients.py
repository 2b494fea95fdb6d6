#!/usr/bin/env python3
"""HTTP under slow clients (issue 54, probe 3; not a test): /healthz and /metrics latency of a running service while
N connections trickle a header byte each every ``--every`` seconds.

Starts ``raswarden run`` in a process of its own (SQLite in a temporary directory, no collectors), opens the trickling
clients from this process, and times ``--requests`` GETs of each probe path, first with no trickling client (the
baseline), then with them. Target: /healthz answered under 1 s with 200 trickling clients. Prints a table and writes
JSON (default bench/results/slow_clients.json).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import free_port, write_results  # noqa: E402

from lab.slowclients import Tricklers  # noqa: E402


def timed_get(url: str) -> tuple[float, int]:
    """(seconds, status) of one GET; a connection error is status 0."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        status = 0
    return time.perf_counter() - started, status


def measure(base: str, requests: int) -> dict:
    out = {}
    for path in ("/healthz", "/metrics"):
        runs = [timed_get(base + path) for _ in range(requests)]
        seconds = sorted(s for s, _ in runs)
        out[path] = {"median_s": round(statistics.median(seconds), 4), "max_s": round(seconds[-1], 4),
                     "statuses": sorted({status for _, status in runs})}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=200, help="trickling connections")
    ap.add_argument("--every", type=float, default=1.0, help="seconds between a client's bytes")
    ap.add_argument("--requests", type=int, default=30, help="GETs of each probe path per phase")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "slow_clients.json")
    args = ap.parse_args()

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "raswarden.toml"
        config.write_text(f'[store]\nurl = "sqlite:///{tmp}/state.db"\n[http]\nlisten = "127.0.0.1:{port}"\n')
        daemon = subprocess.Popen([sys.executable, "-m", "daemon", "run", "--config", str(config)], cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                if timed_get(base + "/healthz")[1]:
                    break
                time.sleep(0.1)
            quiet = measure(base, args.requests)
            with Tricklers(("127.0.0.1", port), args.clients, args.every):
                loaded = measure(base, args.requests)
        finally:
            daemon.terminate()
            daemon.wait(30)
    results = {"clients": args.clients, "every_s": args.every, "requests": args.requests,
               "quiet": quiet, "trickling": loaded,
               "target": "/healthz answered under 1 s with 200 trickling clients",
               "met": loaded["/healthz"]["max_s"] < 1.0 and loaded["/healthz"]["statuses"] == [200]}
    print(f"{'phase':10} {'path':9} {'median s':>9} {'max s':>7}  statuses")
    for phase in ("quiet", "trickling"):
        for path, row in results[phase].items():
            print(f"{phase:10} {path:9} {row['median_s']:9.4f} {row['max_s']:7.4f}  {row['statuses']}")
    write_results(args.out, results)


if __name__ == "__main__":
    main()
