#!/usr/bin/env python3
"""Detection over a matrix of fleets (issue 24; not a test): sampling interval x healthy-part noise.

Cells: sampling ``15s``, ``60s``, ``300s`` (5-minute downsampled storage: on the clock's grid) and ``mixed``
(accelerators every 15 s, ports every 5 minutes), each with jitter and 1 % of scrapes lost where a live scrape
would have them; noise ``quiet`` (this project's simulator before issue 24), ``realistic`` and ``noisy``
(daemon/sim/noise.py). In each cell: dense traces (every fault class twice, ``dense-template-a`` and ``-b``
alternating by seed, the full and stock exporter profiles alternating by pairs of seeds) and quiet weeks
(``quiet-7d``: no faults, everyday confounders) for the false-flag rate. Every run is scored for raswarden
(the rules and statistical detectors, plus a model's learned ones with ``--model``) and for the static-threshold
baseline, straight from the simulator through the pipeline (``daemon.evaluate.evaluate_simulation``: the batches
a replay of the trace would make, without writing hundreds of gigabytes of traces).

Runs are appended to the results file as they finish and skipped when already there, so a long matrix can be
run in pieces (``--jobs`` processes at once). ``--report`` prints the table per cell from the file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import seeds, write_results  # noqa: E402

SCENARIOS = ROOT / "fixtures" / "scenarios"
LIVE = {"jitter": "1s", "missed": 0.01}
SAMPLING = {
    "15s": (15.0, {"dcgm": {"interval": "15s", **LIVE}, "node": {"interval": "15s", **LIVE}}),
    "60s": (30.0, {"dcgm": {"interval": "60s", **LIVE}, "node": {"interval": "60s", **LIVE}}),
    "300s": (60.0, {"dcgm": {"interval": "5m", "aligned": True}, "node": {"interval": "5m", "aligned": True}}),
    "mixed": (15.0, {"dcgm": {"interval": "15s", **LIVE}, "node": {"interval": "5m", **LIVE}}),
}
NOISE = ("quiet", "realistic", "noisy")


def scenario_for(kind: str, sampling: str, noise: str, seed: int) -> dict:
    """The scenario of one run: the base scenario with the cell's sampling and noise (and seed)."""
    import yaml

    base = f"dense-template-{'ab'[seed % 2]}" if kind == "dense" else "quiet-7d"
    d = yaml.safe_load((SCENARIOS / f"{base}.yaml").read_text())
    resolution, spec = SAMPLING[sampling]
    d.update(name=f"{base}-{sampling}-{noise}-{seed}", seed=seed, resolution=f"{resolution:g}s", sampling=spec,
             noise=noise)
    if kind == "dense":
        d["profile"] = "full" if (seed // 2) % 2 == 0 else "stock"
    return d


def run_one(kind: str, sampling: str, noise: str, seed: int, model: str | None) -> dict:
    from daemon.evaluate import evaluate_simulation
    from daemon.sim.engine import Simulator
    from daemon.sim.faults import load_library
    from daemon.sim.scenario import Scenario
    from detectors.model import ModelBundle

    d = scenario_for(kind, sampling, noise, seed)
    library = load_library(ROOT / "fixtures" / "faults")
    started = time.perf_counter()
    bundle = ModelBundle.load(Path(model)) if model else None
    ours = evaluate_simulation(Simulator(Scenario.from_dict(d, d["name"]), library), baseline=False, model=bundle)
    base = evaluate_simulation(Simulator(Scenario.from_dict(d, d["name"]), library), baseline=True)
    return {"kind": kind, "sampling": sampling, "noise": noise, "seed": seed, "profile": d.get("profile", "full"),
            "model": model, "raswarden": raw(ours), "baseline": raw(base),
            "wall_s": round(time.perf_counter() - started, 1)}


def raw(ev) -> dict:
    """What pooling runs needs of an evaluation: counts and the lists behind the medians, per class."""
    classes = {name: {"faults": c.faults, "flagged": c.flagged_before_failure, "leads_s": c.lead_times_s,
                      "hard": c.hard_faults, "in_time": c.failed_in_time, "latencies_s": c.hard_latencies_s}
               for name, c in ev.by_class.items()}
    return {"classes": classes, "windows_s": ev.onset_to_failure_s, "false_flags": ev.false_flags,
            "confounder_flags": ev.confounder_flags, "node_days": ev.node_days,
            "false_flag_list": [f.as_dict() for f in ev.false_flag_list]}


def key(r: dict) -> tuple:
    return (r["kind"], r["sampling"], r["noise"], r["seed"], r.get("model"))


def pooled(runs: list[dict], who: str) -> dict:
    """Pooled figures of runs (ARCHITECTURE §5) and their spread over seeds."""
    faults = flagged = hard = in_time = 0
    leads, windows, per_seed_recall = [], [], []
    false = conf = 0
    node_days = 0.0
    for r in runs:
        ev = r[who]
        classes = ev["classes"].values()
        n = sum(c["faults"] for c in classes)
        hit = sum(c["flagged"] for c in classes)
        faults += n
        flagged += hit
        hard += sum(c["hard"] for c in classes)
        in_time += sum(c["in_time"] for c in classes)
        leads += [x for c in classes for x in c["leads_s"]]
        windows += ev["windows_s"]
        false += ev["false_flags"]
        conf += ev["confounder_flags"]
        node_days += ev["node_days"]
        if n:
            per_seed_recall.append(hit / n)
    median_lead = statistics.median(leads) if leads else None
    median_window = statistics.median(windows) if windows else None
    return {
        "runs": len(runs), "faults": faults, "recall": flagged / faults if faults else None,
        "recall_per_seed_min": min(per_seed_recall) if per_seed_recall else None,
        "median_lead_h": median_lead / 3600 if median_lead else None,
        "lead_share_of_window": (median_lead / median_window) if median_lead and median_window else None,
        "hard_faults": hard, "hard_failed_in_time": in_time, "node_days": round(node_days, 1),
        "false_flags": false, "false_per_1000_node_days": 1000 * false / node_days if node_days else None,
        "confounder_flags": conf,
    }


def report(results: dict) -> None:
    runs = results["runs"]
    print(f"{'cell':16} {'':10} {'recall':>7} {'lead h':>7} {'lead/win':>8} {'hard ok':>9} "
          f"{'node-days':>9} {'false':>6} {'/1000':>6} {'conf':>5}")
    for sampling in SAMPLING:
        for noise in NOISE:
            cell = [r for r in runs if r["sampling"] == sampling and r["noise"] == noise]
            if not cell:
                continue
            for who in ("raswarden", "baseline"):
                dense = pooled([r for r in cell if r["kind"] == "dense"], who)
                quiet = pooled([r for r in cell if r["kind"] == "quiet"], who)
                allp = pooled(cell, who)

                def f(x, fmt):
                    return "-" if x is None else format(x, fmt)

                print(f"{sampling + '/' + noise:16} {who:10} {f(dense['recall'], '.3f'):>7} "
                      f"{f(dense['median_lead_h'], '.2f'):>7} {f(dense['lead_share_of_window'], '.2f'):>8} "
                      f"{dense['hard_failed_in_time']:>4}/{dense['hard_faults']:<4} {allp['node_days']:>9} "
                      f"{allp['false_flags']:>6} {f(allp['false_per_1000_node_days'], '.2f'):>6} "
                      f"{allp['confounder_flags']:>5}   ({dense['runs']} dense, {quiet['runs']} quiet)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sampling", default=",".join(SAMPLING), help="cells' sampling: " + ", ".join(SAMPLING))
    ap.add_argument("--noise", default=",".join(NOISE), help="cells' noise: " + ", ".join(NOISE))
    ap.add_argument("--seeds", default="1..20", help="dense seeds, e.g. 1..20")
    ap.add_argument("--quiet-seeds", default="1..4", help="quiet-week seeds")
    ap.add_argument("--model", help="a model directory (adds the learned detectors)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "matrix.json")
    ap.add_argument("--report", action="store_true", help="only print the table of the results file")
    args = ap.parse_args()
    results = json.loads(args.out.read_text()) if args.out.exists() else {"runs": []}
    if args.report:
        report(results)
        return 0
    done = {key(r) for r in results["runs"]}
    todo = [(kind, s, n, seed) for s in args.sampling.split(",") for n in args.noise.split(",")
            for kind, group in (("dense", seeds(args.seeds)), ("quiet", seeds(args.quiet_seeds))) for seed in group
            if (kind, s, n, seed, args.model) not in done]
    # Seed-major order: a matrix stopped part-way holds as many seeds in every cell.
    todo.sort(key=lambda t: (t[0] != "dense", t[3]))
    for s in args.sampling.split(","):
        if s not in SAMPLING:
            ap.error(f"--sampling: unknown cell {s!r}")
    print(f"{len(todo)} runs to do ({len(done)} in {args.out})", flush=True)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, *t, args.model): t for t in todo}
        for fut in as_completed(futures):
            r = fut.result()
            results["runs"].append(r)
            write_results(args.out, results)
            a = r["raswarden"]
            hit = sum(c["flagged"] for c in a["classes"].values())
            n = sum(c["faults"] for c in a["classes"].values())
            print(f"{r['kind']:5} {r['sampling']:5} {r['noise']:9} seed {r['seed']:3}: recall {hit}/{n}, false "
                  f"{a['false_flags']} ({r['wall_s']:.0f} s)", flush=True)
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
