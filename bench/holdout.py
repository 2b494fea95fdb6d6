#!/usr/bin/env python3
"""Held-out evaluation (issue 4's targets; not a test): template hold-out, both exporter profiles, many seeds.

Fold ``a`` trains on ``dense-template-a`` (every fault class from template a) at the training seeds and is
evaluated on ``dense-template-b`` at the evaluation seeds, fold ``b`` the other way round, each with both
exporter profiles (stock and full): the learned detectors are scored only on fault shapes and seeds they
never saw. The quiet scenario (no faults, everyday confounders) at each of ``--quiet-seeds`` measures the
false-flag rate, scored with fold a's and fold b's model in turn. Every trace is also run with the
static-threshold baseline.

Traces are simulated into ``--work`` when missing (``raswarden simulate --format parquet``). With
``--randomize`` (domain randomization, issue 24) each trace, training and evaluation alike, is sampled and as
noisy as a fleet drawn at random from its name: every 30 s, 60 s, 5 minutes on the storage's grid, or
accelerators every 30 s and ports every 5 minutes, with jitter and lost scrapes; quiet, realistic or noisy
healthy parts. Prints the pooled table with each figure's spread across seeds and writes JSON (default
bench/results/holdout.json).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import cores, seeds, write_results  # noqa: E402

SCENARIOS = ROOT / "lab" / "library" / "scenarios"


# The fleets --randomize draws from (the scenarios' resolution is 30 s): `raswarden simulate --sampling`.
RANDOM_SAMPLING = ("all=30s:jitter=1s:missed=0.01", "all=60s:jitter=1s:missed=0.01", "all=5m:aligned",
                   "dcgm=30s:jitter=1s:missed=0.01,node=5m:jitter=1s:missed=0.01")
RANDOM_NOISE = ("quiet", "realistic", "noisy")


def fleet_of(name: str) -> tuple[str, str]:
    """The sampling and noise --randomize gives the trace of this name (the same on every run)."""
    import hashlib

    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return RANDOM_SAMPLING[h % len(RANDOM_SAMPLING)], RANDOM_NOISE[(h // len(RANDOM_SAMPLING)) % len(RANDOM_NOISE)]


def simulate(scenario: str, seed: int | None, profile: str, out: Path, randomize: bool = False) -> Path:
    if (out / "labels.jsonl").exists():
        return out
    tmp = out.with_name(out.name + ".tmp")
    cmd = [sys.executable, "-m", "daemon", "simulate", str(SCENARIOS / f"{scenario}.yaml"), "--profile", profile,
           "--format", "parquet", "--out", str(tmp)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if randomize:
        sampling, noise = fleet_of(out.name)
        cmd += ["--sampling", sampling, "--noise", noise]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    tmp.rename(out)
    return out


def train_fold(fold: str, paths: list[str], out: str) -> dict:
    from lab.train import train

    started = time.perf_counter()
    if not (Path(out) / "model.json").exists():
        train([Path(p) for p in paths], Path(out))
    meta = json.loads((Path(out) / "model.json").read_text())
    return {"fold": fold, "model": out, "training": meta["training"], "collect_s": meta["collect_s"],
            "fit_s": meta["fit_s"], "wall_s": round(time.perf_counter() - started, 1)}


def evaluate_one(path: str, model: str, group: str) -> dict:
    from lab.evaluate import evaluate_trace
    from detectors.bundle import ModelBundle

    bundle = ModelBundle.load(model)
    started = time.perf_counter()
    ours = evaluate_trace(Path(path), baseline=False, model=bundle)
    base = evaluate_trace(Path(path), baseline=True)
    return {"trace": path, "group": group, "model": model, "raswarden": ours.as_dict(), "baseline": base.as_dict(),
            "_ours": ours, "_base": base, "wall_s": round(time.perf_counter() - started, 1)}


def spread(values: list[float]) -> dict:
    import numpy as np

    v = np.array([x for x in values if x is not None and x == x], dtype=float)
    if not len(v):
        return {"median": None, "min": None, "max": None}
    return {"median": round(float(np.median(v)), 4), "min": round(float(v.min()), 4), "max": round(float(v.max()), 4)}


def _h(seconds) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f} h"


def report(out: dict) -> str:
    """The results as markdown tables (per fault class pooled; per group of traces with the spread)."""
    s, b = out["summary"]["dense"]["raswarden"], out["summary"]["dense"]["baseline"]
    lines = ["| fault class | faults | recall raswarden / baseline | median lead (p10) raswarden | baseline |"
             " hard faults failed in time |", "|---|---|---|---|---|---|"]
    for name, r in list(s["by_class"].items()) + [("all", s["all"])]:
        rb = b["all"] if name == "all" else b["by_class"].get(name, {})
        lines.append(f"| {name} | {r['faults']} | {r['recall_before_failure']} / {rb.get('recall_before_failure')} "
                     f"| {_h(r['lead_time_median_s'])} ({_h(r['lead_time_p10_s'])}) "
                     f"| {_h(rb.get('lead_time_median_s'))} | {r['hard_faults_failed']}/{r['hard_faults']} |")
    lines += ["", "| traces | node-days | false flags raswarden / baseline | per 1,000 node-days | confounder flags |",
              "|---|---|---|---|---|"]
    groups: dict[str, list[dict]] = {}
    for t in out["traces"]:
        groups.setdefault(t["group"], []).append(t)
    for group, rows in list(groups.items()) + [("all", out["traces"])]:
        nd = sum(r["raswarden"]["node_days"] for r in rows)
        fr = sum(r["raswarden"]["false_flags"] for r in rows)
        fb = sum(r["baseline"]["false_flags"] for r in rows)
        cr = sum(r["raswarden"]["confounder_flags"] for r in rows)
        cb = sum(r["baseline"]["confounder_flags"] for r in rows)
        lines.append(f"| {group} ({len(rows)}) | {nd:.0f} | {fr} / {fb} "
                     f"| {1000 * fr / nd:.1f} / {1000 * fb / nd:.1f} | {cr} / {cb} |")
    spread_rows = out["per_trace_spread"]
    lines += ["", "Per dense trace (median, min-max across seeds): " + "; ".join(
        f"{k}: recall {v['recall']['median']} ({v['recall']['min']}-{v['recall']['max']}), median lead "
        f"{_h(v['lead_median_s']['median'])} ({_h(v['lead_median_s']['min'])}-{_h(v['lead_median_s']['max'])}), "
        f"false flags per 1,000 node-days {v['false_per_1000_node_days']['median']} "
        f"({v['false_per_1000_node_days']['min']}-{v['false_per_1000_node_days']['max']})"
        + ("" if v.get("quiet_false_per_1000_node_days", {}).get("median") is None else
           f"; per quiet trace {v['quiet_false_per_1000_node_days']['median']} "
           f"({v['quiet_false_per_1000_node_days']['min']}-{v['quiet_false_per_1000_node_days']['max']})")
        for k, v in spread_rows.items())]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--report", type=Path, metavar="JSON", help="only print the tables of an earlier run's JSON")
    ap.add_argument("--work", type=Path, default=Path("/tmp/raswarden-holdout"))
    ap.add_argument("--train-seeds", default="101,102,103")
    ap.add_argument("--eval-seeds", default="1,2,3,4,5,6,7,8,9,10")
    ap.add_argument("--profiles", default="full,stock")
    ap.add_argument("--quiet", default="quiet-7d", help="quiet scenario for the false-flag rate ('' for none)")
    ap.add_argument("--quiet-seeds", default="", help="seeds of the quiet scenario, e.g. 88,89 (default: its own);"
                    " scored with fold a's and fold b's model in turn")
    ap.add_argument("--jobs", type=int, default=cores(), help="processes at once (default: the cores this may use)")
    ap.add_argument("--randomize", action="store_true",
                    help="draw each trace's sampling and noise at random (domain randomization; traces named -r)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "holdout.json")
    args = ap.parse_args()
    if args.report:
        print(report(json.loads(args.report.read_text())))
        return
    work = args.work / "randomized" if args.randomize else args.work
    work.mkdir(parents=True, exist_ok=True)
    train_seeds = seeds(args.train_seeds)
    eval_seeds = seeds(args.eval_seeds)
    profiles = args.profiles.split(",")
    other = {"a": "b", "b": "a"}
    started = time.perf_counter()

    jobs = []
    for t in "ab":
        for prof in profiles:
            for seed in train_seeds + eval_seeds:
                jobs.append((f"dense-template-{t}", seed, prof, work / f"{t}-{prof}-{seed}"))
    quiet = []  # (seed or None, profile, trace directory, fold whose model scores it)
    if args.quiet:
        quiet_seeds = seeds(args.quiet_seeds) or [None]
        quiet = [(seed, prof, work / (f"{args.quiet}-{prof}" + ("" if seed is None else f"-{seed}")), "ab"[i % 2])
                 for i, seed in enumerate(quiet_seeds) for prof in profiles]
        jobs += [(args.quiet, seed, prof, path) for seed, prof, path, _ in quiet]
    with ProcessPoolExecutor(args.jobs) as pool:
        list(pool.map(simulate, *zip(*jobs), [args.randomize] * len(jobs)))
    print(f"traces ready in {time.perf_counter() - started:.0f} s", flush=True)

    with ProcessPoolExecutor(args.jobs) as pool:
        folds = list(pool.map(train_fold, ["a", "b"],
                              [[str(work / f"{t}-{p}-{s}") for p in profiles for s in train_seeds] for t in "ab"],
                              [str(work / f"model-{t}") for t in "ab"]))
    for f in folds:
        print(f"fold {f['fold']}: trained in {f['wall_s']} s (collect {f['collect_s']} s, fit {f['fit_s']} s)",
              flush=True)

    tasks = [(str(work / f"{other[t]}-{p}-{s}"), str(work / f"model-{t}"), f"{p}") for t in "ab" for p in profiles
             for s in eval_seeds]
    tasks += [(str(path), str(work / f"model-{fold}"), f"quiet-{prof}") for _, prof, path, fold in quiet]
    results = []
    with ProcessPoolExecutor(args.jobs) as pool:
        for r in pool.map(evaluate_one, *zip(*tasks)):
            if args.randomize:
                r["fleet"] = "{} / {}".format(*fleet_of(Path(r["trace"]).name))
            a = r["raswarden"]
            print(f"{Path(r['trace']).name:>22}: recall {a['all']['recall_before_failure']} lead "
                  f"{a['all']['lead_time_median_s']} false {a['false_flags']} confounder {a['confounder_flags']} "
                  f"({r['wall_s']} s{', ' + r['fleet'] if 'fleet' in r else ''})", flush=True)
            results.append(r)

    from lab.evaluate import merge

    summary = {}
    for label, pick in (("dense", lambda r: not r["group"].startswith("quiet")),
                        ("quiet", lambda r: r["group"].startswith("quiet")), ("all", lambda r: True)):
        chosen = [r for r in results if pick(r)]
        if not chosen:
            continue
        summary[label] = {k: merge([r[f"_{k[:4] if k == 'baseline' else 'ours'}"] for r in chosen]).as_dict()
                          for k in ("raswarden", "baseline")}
    per_seed = {}
    for k in ("raswarden", "baseline"):
        dense = [r[k] for r in results if not r["group"].startswith("quiet")]
        per_seed[k] = {"recall": spread([d["all"]["recall_before_failure"] for d in dense]),
                       "lead_median_s": spread([d["all"]["lead_time_median_s"] for d in dense]),
                       "false_per_1000_node_days": spread([d["false_flags_per_1000_node_days"] for d in dense]),
                       "quiet_false_per_1000_node_days": spread([r[k]["false_flags_per_1000_node_days"] for r in results
                                                                 if r["group"].startswith("quiet")])}
    for r in results:
        r.pop("_ours")
        r.pop("_base")
    out = {"folds": folds, "summary": summary, "per_trace_spread": per_seed, "traces": results,
           "wall_s": round(time.perf_counter() - started, 1)}
    write_results(args.out, out)
    print(report(out))
    s, b = summary["all"]["raswarden"], summary["all"]["baseline"]
    print(f"raswarden: recall {s['all']['recall_before_failure']} lead {s['all']['lead_time_median_s']} s, "
          f"false {s['false_flags']} ({s['false_flags_per_1000_node_days']}/1000 node-days over "
          f"{s['node_days']} node-days), confounder {s['confounder_flags']}")
    print(f"baseline: recall {b['all']['recall_before_failure']} lead {b['all']['lead_time_median_s']} s, "
          f"false {b['false_flags']}, confounder {b['confounder_flags']}")


if __name__ == "__main__":
    main()
