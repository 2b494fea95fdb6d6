#!/usr/bin/env python3
"""Scale benchmark (issue 27; not a test): a cluster watched by several shards through a real Prometheus and a real
PostgreSQL, all on this machine.

``raswarden simulate --serve`` serves ``--accelerators`` (scalex640 supernodes of 640) in real time: a
dcgm-exporter and a node_exporter per blade on loopback, each target group labelled with its rack and supernode in
the file_sd file, as operators label theirs. A Prometheus (Debian's) scrapes them every ``--interval``; PostgreSQL
(scripts/pg-lab.sh, on a port of its own) is the store. ``--shards`` ``raswarden run`` processes each serve a
shard of whole supernodes (``[shards.sN] supernodes``, ``matchers = 'supernode=~"..."'``), read their series with
the PromQL collector (instant queries, their shard's matchers) and the kernel log with the journald collector, and
run the whole pipeline. After ``--warmup``, over ``--measure`` seconds, per shard: every cycle's duration (the cycle
histogram's count and sum polled each second, so one cycle at a time), the PromQL collection's and the tick's share,
samples per cycle, CPU (share of one core) and resident memory; beside them the simulator's, Prometheus' and
PostgreSQL's CPU and memory, and PostgreSQL's transactions per second.

Prints a table and writes JSON (default bench/results/scale.json). Everything shares this machine's cores: the
figures are those of raswarden beside its own load generator, Prometheus and PostgreSQL, not on a management node
of its own.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import cpu_seconds, free_port, metrics, rss_mb, write_results  # noqa: E402

SUPERNODE = 640  # accelerators per scaleX640 supernode


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0-1) of ``values``, nearest rank (with 40 cycles p99 is the largest: say so, not less)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def prom_query(url: str, query: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": query}), timeout=30) as r:
        return json.load(r)["data"]["result"]


def postgres(work: Path) -> tuple[str, str]:
    """A throwaway PostgreSQL of the bench's own (scripts/pg-lab.sh up); its URL and its data directory."""
    env = dict(os.environ, PG_LAB_DIR=str(work / "pg"), PG_LAB_PORT=str(free_port()))
    subprocess.run([str(ROOT / "scripts" / "pg-lab.sh"), "install"], check=True, env=env)
    url = subprocess.run([str(ROOT / "scripts" / "pg-lab.sh"), "up"], check=True, env=env, capture_output=True,
                         text=True).stdout.strip().splitlines()[-1]
    return url, env["PG_LAB_DIR"]


def pg_down(pg_dir: str) -> None:
    subprocess.run([str(ROOT / "scripts" / "pg-lab.sh"), "down"], env=dict(os.environ, PG_LAB_DIR=pg_dir),
                   check=False)


def pids_of_user(user: str) -> list[int]:
    """Processes running as ``user`` (PostgreSQL's server and its backends)."""
    import pwd

    uid = pwd.getpwnam(user).pw_uid
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if d.stat().st_uid == uid:
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def over_pids(pids: list[int], read) -> float:
    """The sum of ``read(pid)`` over a group of processes; one that ended meanwhile (a backend) counts nothing."""
    total = 0.0
    for pid in pids:
        try:
            total += read(pid)
        except OSError:
            pass
    return total


def pss_mb(pid: int) -> float:
    """Proportional set size of a process in MB (shared memory, PostgreSQL's buffers, counted once over a group)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pg_commits(store_url: str) -> float:
    """Transactions committed in the store's database so far (pg_stat_database)."""
    import sqlalchemy as sa

    engine = sa.create_engine(store_url)
    try:
        with engine.connect() as conn:
            return float(conn.execute(sa.text(
                "select xact_commit from pg_stat_database where datname = current_database()")).scalar() or 0)
    finally:
        engine.dispose()


def shard_plan(supernodes: int, shards: int) -> list[list[str]]:
    """Whole supernodes per shard, as even as they go: 16 supernodes on 4 shards are sn01-sn04, sn05-sn08, ..."""
    names = [f"sn{i + 1:02d}" for i in range(supernodes)]
    per, extra = divmod(len(names), shards)
    out, at = [], 0
    for s in range(shards):
        n = per + (1 if s < extra else 0)
        out.append(names[at:at + n])
        at += n
    return [group for group in out if group]


def shard_config(work: Path, name: str, plan: list[list[str]], store: str, prom: str, interval: float,
                 port: int) -> Path:
    tables = "".join(f'[shards.s{i + 1}]\nsupernodes = {json.dumps(group)}\n'
                     f"matchers = 'supernode=~\"{'|'.join(group)}\"'\n" for i, group in enumerate(plan))
    path = work / f"{name}.toml"
    path.write_text(f"""[store]
url = "{store}"
[service]
interval_s = {interval}
shard = "{name}"
topology = "{work / 'sim' / 'topology.yaml'}"
[http]
listen = "127.0.0.1:{port}"
{tables}
[[collectors]]
type = "prometheus"
name = "prometheus"
url = "{prom}"
timeout_s = {interval}
[[collectors]]
type = "journald"
name = "kernel"
file = "{work / 'sim' / 'kernel.journal.json'}"
""")
    return path


def start_prometheus(work: Path, interval: float) -> tuple[subprocess.Popen, str]:
    binary = "/usr/bin/prometheus"
    if not Path(binary).exists():
        raise SystemExit("prometheus is not installed (apt-get install prometheus; scripts/test.sh installs it)")
    port = free_port()
    (work / "prometheus.yml").write_text(
        f"global: {{scrape_interval: {interval:g}s, scrape_timeout: {interval * 0.8:g}s}}\n"
        "scrape_configs:\n"
        "  - job_name: sim\n"
        f"    file_sd_configs: [{{files: ['{work / 'sim' / 'prometheus-targets.json'}'], refresh_interval: 5s}}]\n")
    proc = subprocess.Popen([binary, f"--config.file={work / 'prometheus.yml'}",
                             f"--storage.tsdb.path={work / 'prom'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--storage.tsdb.retention.time=1d"],
                            stdout=open(work / "prometheus.log", "wb"), stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def start_simulator(work: Path, accelerators: int, interval: float) -> subprocess.Popen:
    (work / "scenario.yaml").write_text(
        f"name: scale\nseed: 1\ntopology: {{preset: scalex640, accelerators: {accelerators}}}\n"
        f"duration: 6h\nresolution: {int(interval)}s\nprofile: full\nnoise: realistic\n"
        "jobs: {nodes_per_job: [8, 32], duration: [2h, 8h], gap: [5m, 20m], partial_share: 0.03}\n"
        "faults:\n  - {entity: random, fault: hbm_degradation, template: a, onset: 5m, failure: 5h}\n"
        "  - {entity: random, fault: link_degradation, template: a, onset: 5m, failure: 5h}\n"
        "  - {entity: random, fault: benign_application_xid, template: a, onset: 10m}\n")
    sim = subprocess.Popen([sys.executable, "-m", "daemon", "simulate", str(work / "scenario.yaml"), "--serve",
                            "--out", str(work / "sim"), "--speed", "1"], stdout=open(work / "sim.log", "wb"),
                           stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 600
    while not (work / "sim" / "prometheus-targets.json").exists():
        if sim.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the simulator did not start: see {work / 'sim.log'}")
        time.sleep(0.5)
    return sim


def promql_alone(work: Path, prom: str, supernodes: list[str], rounds: int = 3) -> dict:
    """One shard's PromQL collection with no other shard asking (the simulator and Prometheus' scraping go on): the
    median seconds of ``rounds`` collections, and of that, reading the answers already fetched (the parse alone)."""
    import io
    import statistics

    from daemon.ingest.collectors.prometheus import PrometheusCollector
    from daemon.ingest.formats.reader import ReadContext
    from daemon.ingest.naming import SeriesMapper
    from daemon.topology import Topology

    mapper = SeriesMapper(topology=Topology.load(work / "sim" / "topology.yaml"))
    c = PrometheusCollector("alone", ReadContext(mapper=mapper, shard_matchers=f'supernode=~"{"|".join(supernodes)}"'),
                            url=prom, timeout_s=60)
    c.collect(time.time())  # the series ids, once
    took, bodies = [], {}
    for _ in range(rounds):
        c._last_ts.clear()  # every sample counts as new, as in a cycle after a scrape
        started = time.perf_counter()
        _, outcome = c.collect(time.time())
        took.append(time.perf_counter() - started)
    for q in c.queries:
        with c._get(q) as r:
            bodies[q] = r.read()
    fetch = c._get

    class Body(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    c._get = lambda q: Body(bodies[q])
    parse = []
    for _ in range(rounds):
        c._last_ts.clear()
        started = time.perf_counter()
        c.collect(time.time())
        parse.append(time.perf_counter() - started)
    c._get = fetch
    return {"collect_s": round(statistics.median(took), 3), "parse_s": round(statistics.median(parse), 3),
            "samples": outcome.samples, "answer_mb": round(sum(map(len, bodies.values())) / 1e6, 1)}


def wait_scraped(prom: str, targets: int, deadline_s: float = 600) -> float:
    """Wait until Prometheus has scraped every target once; the seconds it took."""
    started = time.monotonic()
    while True:
        try:
            got = prom_query(prom, "count(up == 1)")
            if got and int(float(got[0]["value"][1])) >= targets:
                return time.monotonic() - started
        except OSError:
            pass
        if time.monotonic() - started > deadline_s:
            raise SystemExit(f"Prometheus did not scrape all {targets} targets in {deadline_s:.0f} s")
        time.sleep(2)


def one_run(accelerators: int, shards: int, interval: float, warmup: float, measure: float, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    supernodes = -(-accelerators // SUPERNODE)
    plan = shard_plan(supernodes, shards)
    store, pg_dir = postgres(work)
    procs: list[subprocess.Popen] = []
    try:
        sim = start_simulator(work, accelerators, interval)
        procs.append(sim)
        groups = json.loads((work / "sim" / "prometheus-targets.json").read_text())
        targets = sum(len(g["targets"]) for g in groups)
        prometheus, prom = start_prometheus(work, interval)
        procs.append(prometheus)
        first_scrape_s = wait_scraped(prom, targets)
        runs = {}
        for i in range(len(plan)):
            name, port = f"s{i + 1}", free_port()
            cfg = shard_config(work, name, plan, store, prom, interval, port)
            proc = subprocess.Popen([sys.executable, "-m", "daemon", "run", "--config", str(cfg)],
                                    stdout=open(work / f"{name}.log", "wb"), stderr=subprocess.STDOUT, cwd=ROOT)
            procs.append(proc)
            runs[name] = (proc, port)
        deadline = time.monotonic() + warmup
        while time.monotonic() < deadline:
            for name, (proc, _) in runs.items():
                if proc.poll() is not None:
                    raise SystemExit(f"shard {name} exited ({proc.returncode}): see {work / f'{name}.log'}")
            time.sleep(1)
        # every series with a sample now (the TSDB status's head count, read right after the first scrape, undercounts)
        series = int(float(prom_query(prom, 'count({__name__=~".+"})')[0]["value"][1]))
        pg_pids = pids_of_user("postgres")
        t0 = time.monotonic()
        cpu0 = {name: cpu_seconds(proc.pid) for name, (proc, _) in runs.items()}
        other0 = {"simulator": cpu_seconds(sim.pid), "prometheus": cpu_seconds(prometheus.pid),
                  "postgresql": over_pids(pg_pids, cpu_seconds)}
        commits0 = pg_commits(store)
        last = {name: metrics(port) for name, (_, port) in runs.items()}
        ticks0 = {name: m.get("raswarden_ticks_total", 0.0) for name, m in last.items()}
        cycles: dict[str, list[float]] = {name: [] for name in runs}
        collect: dict[str, list[float]] = {name: [] for name in runs}
        peak = {name: 0.0 for name in runs}
        prom_peak = pg_peak = 0.0
        while time.monotonic() - t0 < measure:
            time.sleep(1.0)
            for name, (proc, port) in runs.items():
                if proc.poll() is not None:
                    raise SystemExit(f"shard {name} exited ({proc.returncode}): see {work / f'{name}.log'}")
                peak[name] = max(peak[name], rss_mb(proc.pid))
                m = metrics(port)
                before = last[name]
                n = m.get("raswarden_cycle_duration_seconds_count", 0.0) - before.get(
                    "raswarden_cycle_duration_seconds_count", 0.0)
                if n > 0:  # one cycle since the last poll (polls 1 s apart, cycles an interval apart)
                    cycles[name].append((m.get("raswarden_cycle_duration_seconds_sum", 0.0)
                                         - before.get("raswarden_cycle_duration_seconds_sum", 0.0)) / n)
                    collect[name].append(m.get('raswarden_collector_duration_seconds{collector="prometheus"}', 0.0))
                last[name] = m
            prom_peak = max(prom_peak, rss_mb(prometheus.pid))
            pg_peak = max(pg_peak, over_pids(pids_of_user("postgres"), pss_mb))
        wall = time.monotonic() - t0
        commits = pg_commits(store) - commits0
        other = {"simulator": cpu_seconds(sim.pid) - other0["simulator"],
                 "prometheus": cpu_seconds(prometheus.pid) - other0["prometheus"],
                 "postgresql": over_pids(pids_of_user("postgres"), cpu_seconds) - other0["postgresql"]}
        rows = []
        for i, (name, (proc, _)) in enumerate(runs.items()):
            m = last[name]
            tick_n = m.get("raswarden_tick_duration_seconds_count", 0.0)
            rows.append({
                "shard": name, "supernodes": plan[i], "accelerators": len(plan[i]) * SUPERNODE,
                "cycles": len(cycles[name]), "ticks": int(m.get("raswarden_ticks_total", 0.0) - ticks0[name]),
                "cycle_s_p50": percentile(cycles[name], 0.5), "cycle_s_p99": percentile(cycles[name], 0.99),
                "cycle_s_max": max(cycles[name]) if cycles[name] else None,
                "promql_s_p50": percentile(collect[name], 0.5), "promql_s_max": max(collect[name], default=None),
                "tick_s_mean": (m.get("raswarden_tick_duration_seconds_sum", 0.0) / tick_n) if tick_n else None,
                "samples_per_cycle": round(m.get('raswarden_samples_ingested_total{source="promql"}', 0.0)
                                           / max(1.0, m.get("raswarden_ticks_total", 1.0))),
                "cpu_share_of_one_core": round((cpu_seconds(proc.pid) - cpu0[name]) / wall, 3),
                "rss_peak_mb": round(peak[name]), "rss_last_mb": round(rss_mb(proc.pid)),
                "active": m.get("raswarden_active", 0.0) == 1.0,
            })
        for proc, _ in runs.values():
            proc.send_signal(signal.SIGTERM)
        for proc, _ in runs.values():
            proc.wait(timeout=120)
        alone = promql_alone(work, prom, plan[0])  # with the shards stopped: one shard's queries, nobody else asking
        return {
            "accelerators": accelerators, "supernodes": supernodes, "shards": len(plan), "interval_s": interval,
            "measured_s": round(wall, 1), "targets": targets, "prometheus_series": series,
            "first_scrape_s": round(first_scrape_s, 1), "per_shard": rows,
            "cycle_s_p99_worst": max((r["cycle_s_p99"] or 0.0) for r in rows),
            "cpu_share": {k: round(v / wall, 3) for k, v in other.items()}
            | {"raswarden_all_shards": round(sum(r["cpu_share_of_one_core"] for r in rows), 3)},
            "rss_peak_mb": {"prometheus": round(prom_peak)}, "pss_peak_mb": {"postgresql": round(pg_peak)},
            "postgresql_commits_per_s": round(commits / wall, 1),
            "promql_alone": alone,
        }
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        pg_down(pg_dir)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--accelerators", type=int, default=10_240)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=120.0)
    ap.add_argument("--measure", type=float, default=600.0)
    ap.add_argument("--work", type=Path, default=None, help="keep the run's files here (default: a temporary dir)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scale.json")
    args = ap.parse_args()
    if args.work:
        row = one_run(args.accelerators, args.shards, args.interval, args.warmup, args.measure, args.work)
    else:
        with tempfile.TemporaryDirectory(prefix="raswarden-scale-") as tmp:
            os.chmod(tmp, 0o755)  # PostgreSQL's data directory lives inside, owned by the postgres user
            row = one_run(args.accelerators, args.shards, args.interval, args.warmup, args.measure, Path(tmp))
    print(json.dumps(row), flush=True)
    print(f"\n{row['accelerators']:,} accelerators ({row['supernodes']} supernodes), {row['targets']:,} targets, "
          f"{row['prometheus_series']:,} series in Prometheus, {row['shards']} shards, "
          f"interval {row['interval_s']:g} s, measured {row['measured_s']:.0f} s")
    print("\n| shard | supernodes | cycles | cycle p50 / p99 / max | PromQL p50 / max | tick mean | samples/cycle | "
          "CPU (one core) | RSS peak |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in row["per_shard"]:
        def s(v):
            return "-" if v is None else f"{v:.2f} s"
        print(f"| {r['shard']} | {r['supernodes'][0]}-{r['supernodes'][-1]} | {r['cycles']} | {s(r['cycle_s_p50'])} / "
              f"{s(r['cycle_s_p99'])} / {s(r['cycle_s_max'])} | {s(r['promql_s_p50'])} / {s(r['promql_s_max'])} | "
              f"{s(r['tick_s_mean'])} | {r['samples_per_cycle']:,} | {r['cpu_share_of_one_core']:.0%} | "
              f"{r['rss_peak_mb']} MB |")
    cpu = row["cpu_share"]
    print(f"\nCPU (share of one core): raswarden {cpu['raswarden_all_shards']:.0%} in all, simulator "
          f"{cpu['simulator']:.0%}, Prometheus {cpu['prometheus']:.0%}, PostgreSQL {cpu['postgresql']:.0%}; RSS peak "
          f"Prometheus {row['rss_peak_mb']['prometheus']} MB, PostgreSQL {row['pss_peak_mb']['postgresql']} MB (PSS); "
          f"PostgreSQL {row['postgresql_commits_per_s']} commits/s")
    a = row["promql_alone"]
    print(f"One shard's PromQL collection alone: {a['collect_s']} s for {a['samples']:,} samples ({a['answer_mb']} MB "
          f"of answers), of which reading them {a['parse_s']} s")
    write_results(args.out, row)


if __name__ == "__main__":
    main()
