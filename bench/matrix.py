#!/usr/bin/env python3
"""Detection over a matrix of fleets (issue 24; not a test): sampling interval x healthy-part noise.

The matrix itself is ``lab/matrix.py`` (``raswarden evaluate --matrix`` runs it too); this bench runs it
over many seeds into a resumable results file (default bench/results/matrix.json), ``--jobs`` processes at
once, and prints the table per cell. ``--report`` prints the table of the results file only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import cores  # noqa: E402

from lab.matrix import (CELLS, check_cells, DEFAULT_FLEET, DEFAULT_NOISE, FLEETS, NOISE, SAMPLING,  # noqa: E402
                        at_median, differences, fleet_label, parse_seeds, report, run_matrix)
from lab.sim.faults import parse_duration  # noqa: E402


def progress(r: dict) -> None:
    a = r["raswarden"]
    hit = sum(c["flagged"] for c in a["classes"].values())
    n = sum(c["faults"] for c in a["classes"].values())
    print(f"{r['kind']:5} {fleet_label(r)}{r['sampling']:5} {r['noise']:9} seed {r['seed']:3}: recall {hit}/{n}, false "
          f"{a['false_flags']} ({r['wall_s']:.0f} s)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sampling", default=",".join(CELLS),
                    help=f"cells' sampling: {', '.join(SAMPLING)} (default {','.join(CELLS)})")
    ap.add_argument("--noise", default=",".join(DEFAULT_NOISE),
                    help=f"cells' noise: {', '.join(NOISE)} (default {','.join(DEFAULT_NOISE)})")
    ap.add_argument("--fleet", default=DEFAULT_FLEET,
                    help=f"the hardware: {', '.join(FLEETS)} (default {DEFAULT_FLEET}, an H100 rack; gb200: nine GB200 "
                         "NVL72 racks, NVLink 5's counters and lines)")
    ap.add_argument("--seeds", default="1..20", help="dense seeds, e.g. 1..20")
    ap.add_argument("--quiet-seeds", default="1..4", help="quiet-week seeds")
    ap.add_argument("--model", help="a model directory (adds the learned detectors)")
    ap.add_argument("--jobs", type=int, default=cores(), help="processes at once (default: the cores this may use)")
    ap.add_argument("--warmup", default="0s", help="dense runs: this long a healthy fleet before the faults, e.g. 24h")
    ap.add_argument("--no-baseline", action="store_true",
                    help="do not run the static-threshold baseline (a quarter of a run: it shares the simulation; its "
                         "figures are a run with it)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "matrix.json")
    ap.add_argument("--report", action="store_true", help="only print the table of the results file")
    ap.add_argument("--at-median", type=int, metavar="N",
                    help="then print, per cell, the N faults each side of its median lead (what moves the median)")
    ap.add_argument("--same-as", type=Path, metavar="FILE",
                    help="then compare every run with FILE's of the same key (findings digests and figures; exit 1 "
                         "when any differs): a change meant to move nothing is checked on the whole matrix")
    args = ap.parse_args()
    if args.report:
        results = json.loads(args.out.read_text())
        print(report(results))
        if args.at_median:
            print(at_median(results, args.at_median))
        return same_as(args.out, args.same_as) if args.same_as else 0
    try:  # the arguments only: an error inside a run is a traceback, not a usage message
        seeds, quiet_seeds = parse_seeds(args.seeds), parse_seeds(args.quiet_seeds)
        warmup_s = parse_duration(args.warmup, "--warmup")
        check_cells(args.sampling.split(","), args.noise.split(","), args.fleet)
    except ValueError as exc:
        ap.error(str(exc))
    results = run_matrix(args.sampling.split(","), args.noise.split(","), seeds, quiet_seeds, args.out, args.jobs,
                         args.model, progress, warmup_s, baseline=not args.no_baseline, fleet=args.fleet)
    print(report(results))
    if args.at_median:
        print(at_median(results, args.at_median))
    return same_as(args.out, args.same_as) if args.same_as else 0


def same_as(path: Path, other: Path) -> int:
    compared, differ = differences(json.loads(path.read_text()), json.loads(other.read_text()))
    for line in differ:
        print(f"differs: {line}")
    print(f"{compared} runs compared with {other}: {len(differ)} differ")
    return 1 if differ or not compared else 0


if __name__ == "__main__":
    sys.exit(main())
