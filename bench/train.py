#!/usr/bin/env python3
"""Training benchmark (issue 4; not a test): ``raswarden train`` on a 30-day scalex640 trace.

Simulates ``fixtures/scenarios/scalex640-30d.yaml`` as Parquet into ``--work`` when missing (about 840
million samples), then trains the learned detectors on it in a process of its own and reports the time
to collect feature rows (a replay of the trace with the feature state on), the time to fit, the rows
kept, the model's out-of-fold figures and the process's peak RSS. Prints and writes JSON (default
bench/results/train.json).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import peak_rss_mb, run_phase, write_results  # noqa: E402

SCENARIO = ROOT / "lab" / "library" / "scenarios" / "scalex640-30d.yaml"


def phase(trace: str, out: str, jobs: str = "1") -> None:
    """Train on one trace in this process; print one JSON line."""
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from lab.train import train

    started = time.perf_counter()
    train([Path(trace)], Path(out), jobs=int(jobs))
    meta = json.loads((Path(out) / "model.json").read_text())
    print(json.dumps({"wall_s": round(time.perf_counter() - started, 1), "collect_s": meta["collect_s"],
                      "fit_s": meta["fit_s"], "training": meta["training"], "peak_rss_mb": peak_rss_mb(),
                      # the largest collecting process's (with --jobs); all of them at once hold at most jobs x it
                      "child_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", nargs=3, metavar=("TRACE", "OUT", "JOBS"), help=argparse.SUPPRESS)
    ap.add_argument("--jobs", type=int, default=1, help="collecting processes (a trace cut into parts of time)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/raswarden-train-bench"))
    ap.add_argument("--seed", type=int, default=None, help="scenario seed (default: the scenario's own)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "train.json")
    args = ap.parse_args()
    if args.phase:
        phase(*args.phase)
        return
    trace = args.work / ("scalex640-30d" + ("" if args.seed is None else f"-{args.seed}"))
    simulate_s = 0.0
    if not (trace / "labels.jsonl").exists():
        started = time.perf_counter()
        cmd = [sys.executable, "-m", "daemon", "simulate", str(SCENARIO), "--format", "parquet", "--out", str(trace)]
        if args.seed is not None:
            cmd += ["--seed", str(args.seed)]
        subprocess.run(cmd, check=True, cwd=ROOT)
        simulate_s = round(time.perf_counter() - started, 1)
    faults = sum(1 for line in (trace / "labels.jsonl").read_text().splitlines()
                 if line.strip() and not json.loads(line)["fault"].startswith("benign_"))
    result = run_phase(__file__, str(trace), str(args.work / f"model-{args.jobs}"), str(args.jobs))
    out = {"trace": str(trace), "faults": faults, "simulate_s": simulate_s, "jobs": args.jobs} | result
    print(f"30-day scalex640 trace ({faults} faults), {args.jobs} job(s): collect {out['collect_s']} s, fit "
          f"{out['fit_s']} s, wall {out['wall_s']} s, peak RSS {out['peak_rss_mb']} MB (largest collecting "
          f"process {out['child_peak_rss_mb']} MB)")
    for kind, t in out["training"].items():
        print(f"  {kind}: {t['rows']:,} rows ({t['positive_rows']:,} positive), predictor out of fold "
              f"{t.get('predictor_out_of_fold')}")
    write_results(args.out, out)


if __name__ == "__main__":
    main()
