#!/usr/bin/env python3
"""Matrix runs with a shadow health tracker (issue 24; not a test): what a change of health's rules moves.

Each run of the matrix (``lab/matrix.py``, without the baseline) goes through the pipeline as ever; beside its
health tracker a second one, on the config given by ``--shadow`` (e.g. ``latched_at_once=false``: the rule before
latched evidence entered at once), is fed the same evidence each tick. Detectors never read health, so the two see
the same ticks, and their entries into flag states compare one to one: an entity and state only one of them entered
(a flag the change adds or takes away) and by how much the others moved. A change whose runs show no entry of the
one without the other changed when flags come, not which.

Results are appended to ``--out`` (the matrix's record format, a ``shadow`` field more per run; resumable) and the
table per cell is printed with the shadow's totals.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from dataclasses import fields, replace
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import cores  # noqa: E402

from lab.matrix import CELLS, NOISE, SAMPLING, parse_seeds, report, run_matrix, run_one  # noqa: E402
from lab.sim.faults import parse_duration  # noqa: E402


def parse_shadow(text: str) -> dict:
    """``name=value,...`` of HealthConfig fields (booleans as true/false) to a dict of typed values."""
    from daemon.judgement.health import HealthConfig

    types = {f.name: f.type for f in fields(HealthConfig)}
    out = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        if name not in types:
            raise ValueError(f"--shadow: {name!r} is not a HealthConfig field ({', '.join(types)})")
        kind = types[name] if isinstance(types[name], str) else types[name].__name__
        out[name] = value.lower() in ("1", "true", "yes") if kind == "bool" else (int(value) if kind == "int"
                                                                                    else float(value))
    return out


def run_shadowed(kind: str, sampling: str, noise: str, seed: int, model: str | None, warmup_s: float,
                 baseline: bool, shadow: dict) -> dict:
    """:func:`lab.matrix.run_one` with the shadow tracker beside the run's (raswarden's only: the baseline's pipeline
    would feed it too): the run's record with a ``shadow`` field."""
    import daemon.judgement.pipeline as pipeline
    from daemon.judgement.health import HealthTracker
    from detectors.evaluation import FLAG_STATES

    entries: dict[str, list] = {"run": [], "shadow": []}

    class Shadowed(HealthTracker):
        def __init__(self, config=None):
            super().__init__(config)
            self.shadow = HealthTracker(replace(self.config, **shadow))
            self.shadow.freshness = self.freshness  # one record of what was observed when, and each one's window

        def update(self, now, evidence):
            out = super().update(now, evidence)
            for who, moves in (("run", out), ("shadow", self.shadow.update(now, evidence))):
                entries[who] += [(t.ts, t.entity, t.new.label) for t in moves if t.new.label in FLAG_STATES]
            return out

    original, pipeline.HealthTracker = pipeline.HealthTracker, Shadowed
    try:
        record = run_one(kind, sampling, noise, seed, None, warmup_s, baseline=False)
    finally:
        pipeline.HealthTracker = original
    a, b = defaultdict(list), defaultdict(list)
    for ts, entity, state in sorted(entries["run"]):
        a[(entity, state)].append(ts)
    for ts, entity, state in sorted(entries["shadow"]):
        b[(entity, state)].append(ts)
    both = set(a) | set(b)
    moved = Counter(o - n for k in both if len(a[k]) == len(b[k]) for n, o in zip(a[k], b[k]))
    record["shadow"] = {"config": shadow, "entries_run": len(entries["run"]), "entries_shadow": len(entries["shadow"]),
                        "only_run": {f"{k[0]} {k[1]}": a[k] for k in both if len(a[k]) > len(b[k])},
                        "only_shadow": {f"{k[0]} {k[1]}": b[k] for k in both if len(b[k]) > len(a[k])},
                        "earlier_s": {f"{x:g}": n for x, n in sorted(moved.items())}}
    return record


def progress(r: dict) -> None:
    sh = r["shadow"]
    print(f"{r['kind']:5} {r['sampling']:5} {r['noise']:9} seed {r['seed']:3}: only in the run {len(sh['only_run'])}, "
          f"only in the shadow {len(sh['only_shadow'])}, earlier {sh['earlier_s']} ({r['wall_s']:.0f} s)", flush=True)


def shadow_totals(runs: list[dict]) -> str:
    """Per cell: entries only the run or only the shadow made, and how far the shared ones moved."""
    lines = []
    for cell in sorted({(r["sampling"], r["noise"]) for r in runs}):
        mine = [r for r in runs if (r["sampling"], r["noise"]) == cell]
        moved: Counter = Counter()
        for r in mine:
            moved.update({float(k): v for k, v in r["shadow"]["earlier_s"].items()})
        only_run = sum(len(r["shadow"]["only_run"]) for r in mine)
        only_shadow = sum(len(r["shadow"]["only_shadow"]) for r in mine)
        lines.append(f"{cell[0]}/{cell[1]:10} {len(mine):3} runs: entries only in the run {only_run}, only in the "
                     f"shadow {only_shadow}; earlier than the shadow's by " +
                     ", ".join(f"{k:g} s: {v}" for k, v in sorted(moved.items())))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sampling", default=",".join(CELLS), help=f"cells' sampling: {', '.join(SAMPLING)}")
    ap.add_argument("--noise", default=",".join(NOISE), help="cells' noise: " + ", ".join(NOISE))
    ap.add_argument("--seeds", default="1..20", help="dense seeds")
    ap.add_argument("--quiet-seeds", default="1..4", help="quiet-week seeds")
    ap.add_argument("--warmup", default="24h", help="dense runs: a healthy fleet this long before the faults")
    ap.add_argument("--shadow", default="latched_at_once=false", help="the shadow's HealthConfig fields")
    ap.add_argument("--jobs", type=int, default=cores(), help="processes at once (default: the cores this may use)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "health-shadow.json")
    ap.add_argument("--report", action="store_true", help="only print the tables of the results file")
    args = ap.parse_args()
    if args.report:
        results = json.loads(args.out.read_text())
    else:
        try:
            runner = partial(run_shadowed, shadow=parse_shadow(args.shadow))
            results = run_matrix(args.sampling.split(","), args.noise.split(","), parse_seeds(args.seeds),
                                 parse_seeds(args.quiet_seeds), args.out, args.jobs, None, progress,
                                 parse_duration(args.warmup, "--warmup"), baseline=False, runner=runner)
        except ValueError as exc:
            ap.error(str(exc))
    print(report(results))
    print(shadow_totals(results["runs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
