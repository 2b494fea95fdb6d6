#!/usr/bin/env python3
"""Where one matrix run's CPU goes, stage by stage of the pipeline's tick (issue 56; not a test).

``lab/stage_cost.py`` on one run of a cell (a quiet week by default, cut to ``--hours``). A flat table (no stage a
large share) says a faster matrix needs the tick reshaped, not one function made faster. Prints the table and writes
JSON (default bench/results/stages.json). The wrappers cost a little; a stage's share, not its seconds, is the
figure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import write_results  # noqa: E402
from lab.stage_cost import stage_cost  # noqa: E402


def main() -> int:
    from lab.matrix import DEFAULT_FLEET

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", default="quiet", choices=("quiet", "dense"))
    ap.add_argument("--sampling", default="15s")
    ap.add_argument("--noise", default="realistic")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hours", type=float, default=12.0, help="the run cut to this many hours (default 12)")
    ap.add_argument("--fleet", default=DEFAULT_FLEET)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "stages.json")
    args = ap.parse_args()
    try:
        result = stage_cost(args.kind, args.sampling, args.noise, args.seed, args.hours, args.fleet)
    except ValueError as exc:
        ap.error(str(exc))
    print(f"{args.kind} {args.sampling}/{args.noise} seed {args.seed}, {args.hours:g} h: "
          f"{result['total_cpu_s']:.1f} CPU s")
    for row in result["stages"]:
        print(f"  {row['stage']:52} {row['cpu_s']:8.2f} s {100 * row['share']:5.1f} %")
    write_results(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
