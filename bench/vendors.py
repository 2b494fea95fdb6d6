#!/usr/bin/env python3
"""Per-vendor evaluation (issue 8's targets; not a test): NVIDIA, AMD and Ascend blades in one scaleX640 rack.

``mixed-vendor-template-b`` (every fault class twice on every vendor's hardware, all of template b) is
simulated at ``--seeds`` in both exporter profiles, and ``quiet-7d-mixed`` (no faults, the everyday
confounders) at ``--quiet-seeds`` for the false-flag rate. Every trace is scored by ``raswarden evaluate``'s
per-vendor split, with the learned detectors of ``--model`` (default: a model trained on NVIDIA-only traces of
template a, so they see neither the fault shapes nor the other vendors) and beside the static baseline.
Prints, per vendor, the pooled figures with their spread across seeds, and writes JSON (default
bench/results/vendors.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import cores, seeds, write_results  # noqa: E402
from holdout import _h, simulate, spread  # noqa: E402

DEFAULT_MODEL = ROOT / "bench" / "results" / "models" / "holdout4-a"


def evaluate_vendors(path: str, model: str, group: str) -> dict:
    from lab.evaluate import evaluate_trace_by_vendor
    from detectors.bundle import ModelBundle

    started = time.perf_counter()
    bundle = ModelBundle.load(model) if model else None
    ours = evaluate_trace_by_vendor(Path(path), baseline=False, model=bundle)
    base = evaluate_trace_by_vendor(Path(path), baseline=True)
    return {"trace": path, "group": group,
            "by_vendor": {v: {"raswarden": ours[v].as_dict(), "baseline": base[v].as_dict()} for v in ours},
            "_ours": ours, "_base": base, "wall_s": round(time.perf_counter() - started, 1)}


def report(out: dict) -> str:
    lines = ["| vendor | faults | recall raswarden / baseline | median lead (p10) raswarden / baseline | hard faults "
             "failed | node-days | false flags raswarden / baseline | per 1,000 node-days | confounder flags |",
             "|---|---|---|---|---|---|---|---|---|"]
    for vendor, v in out["summary"].items():
        r, b = v["raswarden"], v["baseline"]
        lines.append(f"| {vendor} | {r['all']['faults']} | {r['all']['recall_before_failure']} / "
                     f"{b['all']['recall_before_failure']} | {_h(r['all']['lead_time_median_s'])} "
                     f"({_h(r['all']['lead_time_p10_s'])}) / {_h(b['all']['lead_time_median_s'])} | "
                     f"{r['all']['hard_faults_failed']}/{r['all']['hard_faults']} | {r['node_days']:.0f} | "
                     f"{r['false_flags']} / {b['false_flags']} | {r['false_flags_per_1000_node_days']} / "
                     f"{b['false_flags_per_1000_node_days']} | {r['confounder_flags']} / {b['confounder_flags']} |")
    lines += ["", "Per dense trace and vendor (median, min-max across seeds and profiles): " + "; ".join(
        f"{v}: recall {s['recall']['median']} ({s['recall']['min']}-{s['recall']['max']}), median lead "
        f"{_h(s['lead_median_s']['median'])} ({_h(s['lead_median_s']['min'])}-{_h(s['lead_median_s']['max'])})"
        for v, s in out["per_trace_spread"].items())]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--report", type=Path, metavar="JSON", help="only print the tables of an earlier run's JSON")
    ap.add_argument("--work", type=Path, default=Path("/tmp/raswarden-vendors"))
    ap.add_argument("--seeds", default="1..10", help="e.g. 1..10 or 1,2,3")
    ap.add_argument("--profiles", default="full,stock")
    ap.add_argument("--quiet-seeds", default="7..12", help="seeds of quiet-7d-mixed ('' for none)")
    ap.add_argument("--model", default=str(DEFAULT_MODEL), help="model directory ('' for the rules and statistics)")
    ap.add_argument("--jobs", type=int, default=cores(), help="processes at once (default: the cores this may use)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "vendors.json")
    args = ap.parse_args()
    if args.report:
        print(report(json.loads(args.report.read_text())))
        return
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    profiles = args.profiles.split(",")
    jobs = [("mixed-vendor-template-b", s, p, work / f"mixed-b-{p}-{s}") for s in seeds(args.seeds)
            for p in profiles]
    if args.quiet_seeds:
        jobs += [("quiet-7d-mixed", s, "full", work / f"quiet-mixed-{s}") for s in seeds(args.quiet_seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        list(pool.map(simulate, *zip(*jobs)))
    print(f"traces ready in {time.perf_counter() - started:.0f} s", flush=True)
    results = []
    with ProcessPoolExecutor(args.jobs) as pool:
        for r in pool.map(evaluate_vendors, [str(j[3]) for j in jobs], [args.model] * len(jobs),
                          ["quiet" if j[0].startswith("quiet") else "dense" for j in jobs]):
            print(f"{Path(r['trace']).name:>22}: " + "; ".join(
                f"{v} recall {d['raswarden']['all']['recall_before_failure']} false {d['raswarden']['false_flags']}"
                for v, d in r["by_vendor"].items() if v != "all") + f" ({r['wall_s']} s)", flush=True)
            results.append(r)

    from lab.evaluate import merge

    vendors = sorted({v for r in results for v in r["by_vendor"]} - {"all"})
    summary, per_seed = {}, {}
    for v in vendors + ["all"]:
        have = [r for r in results if v in r["_ours"]]
        summary[v] = {"raswarden": merge([r["_ours"][v] for r in have]).as_dict(),
                      "baseline": merge([r["_base"][v] for r in have]).as_dict()}
        dense = [r["by_vendor"][v]["raswarden"] for r in have if r["group"] == "dense"]
        per_seed[v] = {"recall": spread([d["all"]["recall_before_failure"] for d in dense]),
                       "lead_median_s": spread([d["all"]["lead_time_median_s"] for d in dense])}
    for r in results:
        r.pop("_ours")
        r.pop("_base")
    out = {"model": args.model, "summary": summary, "per_trace_spread": per_seed, "traces": results,
           "wall_s": round(time.perf_counter() - started, 1)}
    write_results(args.out, out)
    print(report(out))


if __name__ == "__main__":
    main()
