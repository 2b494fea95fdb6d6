#!/usr/bin/env python3
"""What flagged each fault of one matrix run, and when (not a test; the matrix is bench/matrix.py).

One run of ``lab/matrix.py`` (a cell's sampling and noise, a seed, a warm-up, a fleet), and for each labelled fault
that fails its class, template, entity, onset and failure (hours from the scenario's start after its warm-up), then
the first finding of each state on its entity or its node between its onset and its failure, with its lead and first
reason (``lab/fault_trace.py``). ``--fault`` keeps one class; ``--all`` prints every finding on the fault's entity in
that time, not the first of each state.
Where a cell's median lead stands (``bench/matrix.py --at-median``) names the faults worth a look.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab.fault_trace import fault_lines  # noqa: E402
from lab.matrix import DEFAULT_FLEET, FLEETS, check_cells, run_one, scenario_for  # noqa: E402
from lab.sim.faults import parse_duration  # noqa: E402
from lab.sim.scenario import Scenario  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sampling", default="60s")
    ap.add_argument("--noise", default="realistic")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", default="0s", help="a healthy fleet this long before the faults, e.g. 24h")
    ap.add_argument("--fleet", default=DEFAULT_FLEET, help=f"one of {', '.join(FLEETS)}")
    ap.add_argument("--fault", help="one fault class, e.g. gpu_off_bus")
    ap.add_argument("--all", action="store_true", help="every finding on the fault's entity, not the first a state")
    ap.add_argument("--width", type=int, default=300, help="cut each line to this many characters")
    args = ap.parse_args()
    try:
        check_cells([args.sampling], [args.noise], args.fleet)
        warmup_s = parse_duration(args.warmup, "--warmup")
    except ValueError as exc:
        ap.error(str(exc))
    findings: list[list[dict]] = []
    record = run_one("dense", args.sampling, args.noise, args.seed, None, warmup_s, False, args.fleet,
                     findings_out=findings)
    d = scenario_for("dense", args.sampling, args.noise, args.seed, warmup_s, args.fleet)
    start = Scenario.from_dict(d, d["name"]).start + warmup_s
    print(f"{args.fleet} {args.sampling}/{args.noise} seed {args.seed}, warm-up {args.warmup} "
          f"(hours from the scenario's start, after the warm-up)")
    print("\n".join(fault_lines(record, findings[0], start, args.fault, args.all, args.width)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
