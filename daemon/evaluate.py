"""``raswarden evaluate``: replay labelled traces with raswarden's detectors and with the static baseline,
and score both against the labels (:mod:`detectors.evaluation`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from daemon.pipeline import PipelineConfig
from daemon.replay import replay
from daemon.trace import Trace
from detectors.evaluation import ClassScore, Evaluation, Fault, evaluate, flags_from_findings


class _Collect:
    """A findings sink for replay."""

    def __init__(self) -> None:
        self.findings: list[dict] = []

    def write(self, line: str) -> None:
        self.findings.append(json.loads(line))


def read_labels(path: Path, purpose: str = "evaluate against") -> list[Fault]:
    """The ground-truth labels of a trace directory (``labels.jsonl``, ARCHITECTURE §8)."""
    trace = Trace.discover([path])
    if trace.labels_path is None:
        raise FileNotFoundError(f"{path}: no labels.jsonl to {purpose}")
    return [Fault.from_dict(json.loads(x)) for x in trace.labels_path.read_text().splitlines() if x.strip()]


def evaluate_trace(path: Path, baseline: bool, interval_s: float = 30.0, model=None) -> Evaluation:
    """Replay one labelled trace and score its findings (with the learned detectors of ``model``)."""
    labels = read_labels(path)
    sink = _Collect()
    result = replay([path], findings_out=sink, config=PipelineConfig(interval_s=interval_s, baseline=baseline,
                                                                       model=None if baseline else model))
    stats = result.stats
    span_days = ((stats.last_ts or 0) - (stats.first_ts or 0) + interval_s) / 86400.0
    nodes = len(result.pipeline.node_seen)
    topo = result.pipeline.mapper.topology

    def holds(container: str, entity: str) -> bool:
        node = entity.split("/", 1)[0]
        return entity == container or node == container or topo.rack_of(node) == container

    return evaluate(flags_from_findings(sink.findings), labels, trace_end=stats.last_ts or 0.0,
                    node_days=nodes * span_days, interval_s=interval_s, holds=holds)


def merge(evaluations: list[Evaluation]) -> Evaluation:
    """Pool several traces' evaluations."""
    by_class: dict[str, ClassScore] = {}
    for ev in evaluations:
        for name, s in ev.by_class.items():
            by_class.setdefault(name, ClassScore()).add(s)
    return Evaluation(by_class, sum(e.flags for e in evaluations), sum(e.true_flags for e in evaluations),
                      sum(e.false_flags for e in evaluations), sum(e.confounder_flags for e in evaluations),
                      sum(e.node_days for e in evaluations), [w for e in evaluations for w in e.onset_to_failure_s],
                      [f for e in evaluations for f in e.false_flag_list])


@dataclass
class Comparison:
    raswarden: Evaluation
    baseline: Evaluation
    per_trace: list[dict]

    def as_dict(self) -> dict:
        return {"raswarden": self.raswarden.as_dict(), "baseline": self.baseline.as_dict(),
                "traces": self.per_trace}


def compare(paths: list[Path], interval_s: float = 30.0, model=None, progress=None) -> Comparison:
    """raswarden (with ``model``'s learned detectors when given) and the static baseline on every trace."""
    ours, base, per_trace = [], [], []
    for path in paths:
        a = evaluate_trace(path, baseline=False, interval_s=interval_s, model=model)
        b = evaluate_trace(path, baseline=True, interval_s=interval_s)
        ours.append(a)
        base.append(b)
        per_trace.append({"trace": str(path), "raswarden": a.as_dict(), "baseline": b.as_dict()})
        if progress:
            progress(path, a, b)
    return Comparison(merge(ours), merge(base), per_trace)
