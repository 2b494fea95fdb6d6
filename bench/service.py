#!/usr/bin/env python3
"""Service benchmark (issue 7; not a test): ``raswarden run`` in steady state against a live simulator.

For each size, ``raswarden simulate --serve`` serves a scalex640-preset supernode in real time (dcgm-exporter
and node_exporter endpoints per blade on loopback, and its kernel log), and ``raswarden run`` scrapes it
every ``--interval`` seconds with the exposition and journald collectors and runs the whole pipeline. After a
warm-up, over ``--measure`` seconds: raswarden's CPU (user + system, as a share of one core), its resident
memory (peak and last), the cycle duration and the exposition collector's duration, from which the scrape
capacity in endpoints per second follows (endpoints scraped in one collection / its duration). A second,
in-process measurement scrapes the same endpoints back to back with the collector alone for the ceiling.

Prints a table and writes JSON (default bench/results/service.json). Both processes share this machine's two
cores: the simulator's own CPU is reported beside raswarden's.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import cpu_seconds, free_port, metrics, rss_mb, write_results  # noqa: E402

def cycle_totals(m: dict[str, float]) -> tuple[float, float]:
    """Cycles run and their seconds in all (the cycle-duration histogram's count and sum)."""
    return m.get("raswarden_cycle_duration_seconds_count", 0.0), m.get("raswarden_cycle_duration_seconds_sum", 0.0)


def one_size(accelerators: int, interval: float, warmup: float, measure: float, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    (work / "scenario.yaml").write_text(
        f"name: bench\nseed: 1\ntopology: {{preset: scalex640, accelerators: {accelerators}}}\n"
        f"duration: 6h\nresolution: {int(interval)}s\nprofile: full\n"
        "jobs: {nodes_per_job: [8, 32], duration: [2h, 8h], gap: [5m, 20m], partial_share: 0.03}\n"
        "faults:\n  - {entity: random, fault: hbm_degradation, template: a, onset: 5m, failure: 5h}\n"
        "  - {entity: random, fault: benign_application_xid, template: a, onset: 10m}\n")
    sim = subprocess.Popen([sys.executable, "-m", "daemon", "simulate", str(work / "scenario.yaml"), "--serve",
                            "--out", str(work / "sim"), "--speed", "1"], stdout=open(work / "sim.log", "wb"),
                           stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while not (work / "sim" / "prometheus-targets.json").exists():
        if sim.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the simulator did not start")
        time.sleep(0.2)
    port = free_port()
    (work / "raswarden.toml").write_text(f"""[store]
url = "sqlite:///{work / 'state.db'}"
[service]
interval_s = {interval}
topology = "{work / 'sim' / 'topology.yaml'}"
[http]
listen = "127.0.0.1:{port}"
[[collectors]]
type = "exposition"
name = "exporters"
file_sd = ["{work / 'sim' / 'prometheus-targets.json'}"]
timeout_s = {min(10.0, interval / 2)}
concurrency = 64
[[collectors]]
type = "journald"
name = "kernel"
file = "{work / 'sim' / 'kernel.journal.json'}"
""")
    run = subprocess.Popen([sys.executable, "-m", "daemon", "run", "--config", str(work / "raswarden.toml")],
                           stdout=open(work / "run.log", "wb"), stderr=subprocess.STDOUT)
    time.sleep(5)
    if sim.poll() is not None:
        run.kill()
        raise SystemExit(f"the simulator exited ({sim.returncode}) before serving")
    try:
        time.sleep(warmup)
        cpu0, sim_cpu0, t0 = cpu_seconds(run.pid), cpu_seconds(sim.pid), time.monotonic()
        ticks0 = metrics(port).get("raswarden_ticks_total", 0.0)
        peak, durations, collect = 0.0, [], []
        cycles = cycle_totals(metrics(port))
        while time.monotonic() - t0 < measure:
            time.sleep(1.0)
            peak = max(peak, rss_mb(run.pid))
            m = metrics(port)
            # the cycles finished since the last poll (one at most: polls are a second apart, cycles 15 s)
            seen = cycle_totals(m)
            if seen[0] > cycles[0]:
                durations.append((seen[1] - cycles[1]) / (seen[0] - cycles[0]))
            cycles = seen
            collect.append(m.get('raswarden_collector_duration_seconds{collector="exporters"}', 0.0))
        wall = time.monotonic() - t0
        cpu, sim_cpu = cpu_seconds(run.pid) - cpu0, cpu_seconds(sim.pid) - sim_cpu0
        m = metrics(port)
        targets = sum(1 for k in m if k.startswith('raswarden_scrape_up{collector="exporters"'))
        up = sum(v for k, v in m.items() if k.startswith('raswarden_scrape_up{collector="exporters"'))
        samples = m.get('raswarden_samples_ingested_total{source="exposition"}', 0.0)
        last_rss = rss_mb(run.pid)
        ticks = m.get("raswarden_ticks_total", 0.0) - ticks0
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=60)
        ceiling, fetch_only = scrape_ceiling(work / "sim")  # with the daemon stopped: the two do not compete
    finally:
        if run.poll() is None:
            run.kill()
        sim.terminate()
        sim.wait(timeout=30)
    if not up:
        raise SystemExit(f"no endpoint answered at {accelerators} accelerators: nothing to report")
    collect_s = max(collect) if collect else 0.0
    return {
        "accelerators": accelerators, "endpoints": targets, "endpoints_up": int(up), "interval_s": interval,
        "measured_s": round(wall, 1), "ticks": int(ticks), "cpu_share_of_one_core": round(cpu / wall, 3),
        "simulator_cpu_share": round(sim_cpu / wall, 3), "rss_peak_mb": round(peak), "rss_last_mb": round(last_rss),
        "cycle_s_max": round(max(durations), 3) if durations else None,
        "collect_s_max": round(collect_s, 3),
        "endpoints_per_s_in_service": round(targets / collect_s) if collect_s else None,
        "endpoints_per_s_ceiling": ceiling, "fetch_only_s": fetch_only, "samples_ingested": int(samples),
    }


def scrape_ceiling(sim_dir: Path, rounds: int = 3) -> tuple[int, float]:
    """Endpoints per second with the exposition collector alone, back to back (64 concurrent), and the time
    to only fetch every endpoint's body (8 threads, no parsing): the simulator's share of a collection."""
    from concurrent.futures import ThreadPoolExecutor

    from daemon.ingest.collectors.exposition import ExpositionCollector
    from daemon.ingest.formats.reader import ReadContext
    from daemon.ingest.naming import SeriesMapper
    from daemon.topology import Topology

    mapper = SeriesMapper(topology=Topology.load(sim_dir / "topology.yaml"))
    c = ExpositionCollector("bench", ReadContext(mapper=mapper), file_sd=[str(sim_dir / "prometheus-targets.json")],
                            concurrency=64, timeout_s=10)
    try:
        c.collect(time.time())
        started = time.perf_counter()
        n = 0
        for _ in range(rounds):
            _, outcome = c.collect(time.time())
            n += outcome.targets_up
        rate = round(n / (time.perf_counter() - started))
        urls = [f"http://{t}/metrics" for t, _ in c.all_targets()]
        started = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(c.fetch, urls))
        return rate, round(time.perf_counter() - started, 2)
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="640,10000")
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=60.0)
    ap.add_argument("--measure", type=float, default=120.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "service.json")
    args = ap.parse_args()
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="raswarden-bench-") as tmp:
            row = one_size(size, args.interval, args.warmup, args.measure, Path(tmp))
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| accelerators | endpoints | CPU (one core) | simulator CPU | RSS peak / last | cycle max | "
          "collect max | endpoints/s in service | endpoints/s alone | fetch only |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['accelerators']:,} | {r['endpoints']:,} ({r['endpoints_up']:,} up) | "
              f"{r['cpu_share_of_one_core']:.1%} | {r['simulator_cpu_share']:.1%} | {r['rss_peak_mb']} / "
              f"{r['rss_last_mb']} MB | {r['cycle_s_max']} s | {r['collect_s_max']} s | "
              f"{r['endpoints_per_s_in_service']} | {r['endpoints_per_s_ceiling']} | {r['fetch_only_s']} s |")
    write_results(args.out, {"interval_s": args.interval, "runs": rows})


if __name__ == "__main__":
    main()
