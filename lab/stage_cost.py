"""Where one matrix run's CPU goes, stage by stage of the pipeline's tick (issue 56; ``bench/stages.py`` prints it).

One run of :mod:`lab.matrix` (a quiet week or a dense trace of a cell, cut to some hours), raswarden alone (the
static baseline shares the simulation and the batch's split with it and adds little), through
:func:`lab.evaluate.evaluate_simulation_judges`, with each named stage of the tick timed in process CPU time, its own
calls included (the detectors within ``detect``). What is not the tick is the simulator and the harness that cuts
its chunks into ticks.
"""

from __future__ import annotations

import collections
import functools
import time


def stages() -> list[tuple[str, type, str]]:
    """(label, class, method) of each stage timed; a method renamed fails here, loudly."""
    from daemon.judgement.health import HealthTracker
    from daemon.judgement.node_tracking import NodeTracking
    from daemon.judgement.pipeline import Pipeline
    from daemon.judgement.resolve import EventResolver
    from detectors.counters import CounterTracker
    from detectors.hold import GaugeHold
    from detectors.peer import PeerDeviation
    from detectors.rules import RuleDetector
    from detectors.trend import TrendDetector

    return [("tick", Pipeline, "tick"),
            ("  split the batch (counters, gauges, code gauges)", Pipeline, "_split"),
            ("  counter increases", CounterTracker, "update"),
            ("  entities seen, sampling cadence", NodeTracking, "_seen_entities"),
            ("  nodes' staleness", NodeTracking, "_track_nodes"),
            ("  reboot evidence", NodeTracking, "_reboot_evidence"),
            ("  kernel events resolved", EventResolver, "resolve"),
            ("  detect", Pipeline, "_detect"),
            ("    gauges held current", GaugeHold, "update"),
            ("    rules", RuleDetector, "update"),
            ("    trend", TrendDetector, "update"),
            ("    peer", PeerDeviation, "update"),
            ("  health", HealthTracker, "update")]


def stage_cost(kind: str, sampling: str, noise: str, seed: int, hours: float, fleet: str = "scalex640") -> dict:
    """CPU seconds and share of the whole of each stage of :func:`stages` over the run, and of the simulator and
    harness (the rest); the stages' methods are restored after, whatever happens. ValueError: a cell or fleet the
    matrix does not have."""
    from lab.evaluate import evaluate_simulation_judges
    from lab.matrix import FAULTS, check_cells, scenario_for
    from lab.sim.faults import load_library
    from lab.sim.scenario import Scenario
    from lab.sim.simulator import Simulator

    check_cells([sampling], [noise], fleet)
    spent: collections.Counter[str] = collections.Counter()
    timed_stages = stages()
    originals = []
    for label, cls, name in timed_stages:
        method = getattr(cls, name)
        originals.append((cls, name, method))

        @functools.wraps(method)
        def timed(*args, _method=method, _label=label, **kwargs):
            began = time.process_time()
            try:
                return _method(*args, **kwargs)
            finally:
                spent[_label] += time.process_time() - began

        setattr(cls, name, timed)
    try:
        d = scenario_for(kind, sampling, noise, seed, 0.0, fleet)
        d["duration"] = f"{hours * 3600:g}s"
        sim = Simulator(Scenario.from_dict(d, d["name"]), load_library(FAULTS))
        began = time.process_time()
        evaluate_simulation_judges(sim, [(False, None)])
        total = time.process_time() - began
    finally:
        for cls, name, method in originals:
            setattr(cls, name, method)
    spent_s = [("simulator and harness (not the tick)", total - spent["tick"])]
    spent_s += [(label, spent[label]) for label, _, _ in timed_stages]
    # (each share of the unrounded seconds: the shares of a short run's rounded ones need not add up)
    rows = [{"stage": label, "cpu_s": round(cpu, 3), "share": round(cpu / total, 4) if total else 0.0}
            for label, cpu in spent_s]
    return {"kind": kind, "sampling": sampling, "noise": noise, "seed": seed, "hours": hours, "fleet": fleet,
            "total_cpu_s": round(total, 3), "stages": rows}
