"""``raswarden evaluate``: replay labelled traces with raswarden's detectors and with the static baseline,
and score both against the labels (:mod:`detectors.evaluation`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from daemon.judgement.pipeline import PipelineConfig
from daemon.replay import replay
from daemon.ingest.trace import Trace
from detectors.contract import TICK_S
from detectors.evaluation import ClassScore, Evaluation, Fault, evaluate, flags_from_findings


class _Collect:
    """A findings sink for replay."""

    def __init__(self) -> None:
        self.findings: list[dict] = []

    def write(self, line: str) -> None:
        self.findings.append(json.loads(line))


def read_labels(path: Path, purpose: str = "evaluate against") -> list[Fault]:
    """The ground-truth labels of a trace directory (``labels.jsonl``, docs/architecture.md §8)."""
    trace = Trace.discover([path])
    if trace.labels_path is None:
        raise FileNotFoundError(f"{path}: no labels.jsonl to {purpose}")
    return [Fault.from_dict(json.loads(x)) for x in trace.labels_path.read_text().splitlines() if x.strip()]


def evaluate_trace(path: Path, baseline: bool, interval_s: float = TICK_S, model=None,
                   timezone: str | None = None) -> Evaluation:
    """Replay one labelled trace and score its findings (with the learned detectors of ``model``; ``timezone``: of
    its stamps that name none, as :func:`daemon.replay.replay` takes it)."""
    return evaluate_trace_by_vendor(path, baseline, interval_s, model, timezone)["all"]


def evaluate_trace_by_vendor(path: Path, baseline: bool, interval_s: float = TICK_S, model=None,
                             timezone: str | None = None) -> dict[str, Evaluation]:
    """One replay, scored over the whole trace (``all``) and over each vendor's nodes when the topology names
    more than one vendor: that vendor's faults and flags, node-days of its nodes; labels on racks and cooling
    loops count for every vendor."""
    labels = read_labels(path)
    sink = _Collect()
    result = replay([path], findings_out=sink, config=PipelineConfig(interval_s=interval_s, baseline=baseline,
                                                                       model=None if baseline else model),
                    timezone=timezone)
    stats = result.stats
    span_days = ((stats.last_ts or 0) - (stats.first_ts or 0) + interval_s) / 86400.0
    topo = result.pipeline.mapper.topology
    seen = result.pipeline.node_seen

    def holds(container: str, entity: str) -> bool:
        node = entity.split("/", 1)[0]
        return entity == container or node == container or topo.rack_of(node) == container

    flags = flags_from_findings(sink.findings)
    end = stats.last_ts or 0.0
    out = {"all": evaluate(flags, labels, trace_end=end, node_days=len(seen) * span_days, interval_s=interval_s,
                           holds=holds)}
    vendors = sorted(set(topo.node_vendor.values()))
    if len(vendors) > 1:
        for vendor in vendors:
            def mine(entity: str, vendor=vendor) -> bool:
                node = entity.split("/", 1)[0]
                return topo.node_vendor.get(node, vendor if node not in topo.node_rack else "") == vendor

            nodes = [n for n in seen if topo.node_vendor.get(n) == vendor]
            out[vendor] = evaluate([f for f in flags if mine(f.entity)], [lb for lb in labels if mine(lb.entity)],
                                   trace_end=end, node_days=len(nodes) * span_days, interval_s=interval_s,
                                   holds=holds)
    return out


TICKS_A_CHUNK = 20
"""Ticks' worth of simulator steps made at once by :func:`evaluate_simulation_judges` (the same world in any chunks:
larger chunks cost the simulator less a step, and hold more rows not yet ticked)."""


def evaluate_simulation(sim, baseline: bool, interval_s: float = TICK_S, model=None) -> Evaluation:
    """Run a simulation straight through the pipeline, tick by tick without writing a trace, and score it against
    its own labels (for the evaluation matrix, where traces would be hundreds of gigabytes). The batches are the
    ones its trace would replay: rows stamped past a tick's end (jitter) go to the next tick."""
    return evaluate_simulation_judges(sim, [(baseline, None if baseline else model)], interval_s)[0]


def evaluate_simulation_judges(sim, judges: list[tuple[bool, object]], interval_s: float = TICK_S,
                               findings_out: list[list[dict]] | None = None) -> list[Evaluation]:
    """:func:`evaluate_simulation` for several judges of one simulation, each ``(baseline, model)``: the simulator
    runs once and every judge's pipeline ticks the same batches (raswarden and the static baseline of a matrix run
    side by side, at the cost of the simulation once). Each evaluation is the one its judge's own run makes; with
    ``findings_out``, each judge's findings are appended to it as a list (to read what flagged a fault, and when)."""
    import numpy as np

    from daemon.ingest.batch import Batch
    from daemon.ingest.naming import SeriesMapper
    from daemon.judgement.pipeline import Pipeline, SharedIngest
    from daemon.ingest.rejects import RejectLog
    from detectors.schema import events_frame
    from lab.sim.batches import chunk_event_rows, chunk_samples
    from daemon.ingest.timeorder import tick_index
    from daemon.topology import Topology

    per_node = sim.topo.gpus_per_node
    topo = Topology.from_dict(sim.topo.to_dict(uuid_of=lambda n, g: f"GPU-{sim.uuids[n * per_node + g]}"))
    sinks: list[list[dict]] = []
    pipelines = []
    for baseline, model in judges:
        sink: list[dict] = []
        config = PipelineConfig(interval_s=interval_s, baseline=baseline, model=None if baseline else model)
        pipelines.append(Pipeline(SeriesMapper(topology=topo, rejects=RejectLog()), config,
                                  on_finding=lambda f, sink=sink: sink.append(f.as_dict())))
        sinks.append(sink)
    if len(pipelines) > 1:  # the batch's split and counter increases worked out once for them all
        shared = SharedIngest()
        for pipeline in pipelines:
            pipeline.share(shared)
    # The simulator's world is the same in chunks of any size (lab.sim.streams): a chunk holds many ticks' steps,
    # and the ticks cut it where their rows end.
    per_tick = max(1, int(round(interval_s / sim.scenario.resolution)))
    samples = None  # the rows not yet ticked: stamped past the last tick's end
    events: list[tuple] = []
    last = None
    for chunk in sim.chunks(chunk_steps=per_tick * TICKS_A_CHUNK):
        fresh = chunk_samples(sim, chunk)
        samples = fresh if samples is None else samples.then(fresh)
        events += chunk_event_rows(chunk)
        end = float(tick_index(np.array([chunk.ts[-1]]), interval_s)[0] * interval_s)
        # every tick replay would make up to the chunk's end: a simulator step longer than the tick (a 5-minute
        # cell's 60 s) is more than one tick of the daemon, and its kernel lines fall in the tick of their stamp
        if last is None:  # the first tick ends with the first tick's steps
            first_end = chunk.ts[min(per_tick, len(chunk.ts)) - 1]
            last = float(tick_index(np.array([first_end]), interval_s)[0] * interval_s) - interval_s
        nows = np.arange(last + interval_s, end + interval_s / 2, interval_s)
        cuts, at = samples.cuts(nows), 0
        for i, now in enumerate(nows.tolist()):
            if cuts is None:
                tick_samples, samples = samples.split(now)
            else:
                tick_samples, at = samples.take(slice(at, int(cuts[i]))), int(cuts[i])
            tick_events = [e for e in events if not e[0] > now]
            events = [e for e in events if e[0] > now]
            for pipeline in pipelines:  # each its own frames: a pipeline may keep what it is given
                pipeline.tick(now, Batch(samples=tick_samples.table(), events=events_frame(tick_events)))
            last = now
        if cuts is not None:
            samples = samples.take(slice(at, None))
    labels = [Fault.from_dict(x) for x in sim.labels()]
    sampling = max((s.interval for s in sim.scenario.sampling.values()), default=sim.scenario.resolution)
    days = sim.scenario.duration / 86400.0

    def holds(container: str, entity: str) -> bool:
        node = entity.split("/", 1)[0]
        return entity == container or node == container or topo.rack_of(node) == container

    out = []
    for findings in sinks:
        ev = evaluate(flags_from_findings(findings), labels, trace_end=last or sim.scenario.start,
                      node_days=len(sim.topo.nodes) * days, interval_s=interval_s, holds=holds, sampling_s=sampling)
        ev.findings_digest = findings_digest(findings)
        out.append(ev)
    if findings_out is not None:
        findings_out.extend(sinks)
    return out


def findings_digest(findings: list[dict]) -> str:
    """sha256 of the findings in order, each as its JSON line with sorted keys."""
    import hashlib

    h = hashlib.sha256()
    for f in findings:
        h.update(json.dumps(f, sort_keys=True).encode() + b"\n")
    return h.hexdigest()


def merge(evaluations: list[Evaluation]) -> Evaluation:
    """Pool several traces' evaluations."""
    by_class: dict[str, ClassScore] = {}
    for ev in evaluations:
        for name, s in ev.by_class.items():
            by_class.setdefault(name, ClassScore()).add(s)
    return Evaluation(by_class, sum(e.flags for e in evaluations), sum(e.true_flags for e in evaluations),
                      sum(e.false_flags for e in evaluations), sum(e.confounder_flags for e in evaluations),
                      sum(e.node_days for e in evaluations), [w for e in evaluations for w in e.onset_to_failure_s],
                      [f for e in evaluations for f in e.false_flag_list],
                      fault_leads=[x for e in evaluations for x in e.fault_leads])


@dataclass
class Comparison:
    raswarden: Evaluation
    baseline: Evaluation
    per_trace: list[dict]
    by_vendor: dict[str, tuple[Evaluation, Evaluation]] = field(default_factory=dict)  # (raswarden, baseline)

    def as_dict(self) -> dict:
        out = {"raswarden": self.raswarden.as_dict(), "baseline": self.baseline.as_dict(), "traces": self.per_trace}
        if self.by_vendor:
            out["by_vendor"] = {v: {"raswarden": a.as_dict(), "baseline": b.as_dict()}
                                for v, (a, b) in self.by_vendor.items()}
        return out


def compare(paths: list[Path], interval_s: float = TICK_S, model=None, progress=None,
            timezone: str | None = None) -> Comparison:
    """raswarden (with ``model``'s learned detectors when given) and the static baseline on every trace, pooled,
    and per vendor where a trace's topology names several."""
    ours, base, per_trace = [], [], []
    vendors: dict[str, tuple[list[Evaluation], list[Evaluation]]] = {}
    for path in paths:
        av = evaluate_trace_by_vendor(path, baseline=False, interval_s=interval_s, model=model, timezone=timezone)
        bv = evaluate_trace_by_vendor(path, baseline=True, interval_s=interval_s, timezone=timezone)
        a, b = av["all"], bv["all"]
        ours.append(a)
        base.append(b)
        per_trace.append({"trace": str(path), "raswarden": a.as_dict(), "baseline": b.as_dict()})
        for vendor in av.keys() - {"all"}:
            pair = vendors.setdefault(vendor, ([], []))
            pair[0].append(av[vendor])
            pair[1].append(bv[vendor])
        if progress:
            progress(path, a, b)
    return Comparison(merge(ours), merge(base), per_trace,
                      {v: (merge(a), merge(b)) for v, (a, b) in sorted(vendors.items())})
