"""Scoring findings against ground-truth labels, with the definitions of docs/architecture.md §5, exactly.

* A **flag** is an entity's transition into ``subhealthy`` or ``failed``; it counts for a fault when it
  names the faulty entity or the node that holds it.
* **Recall before failure**: the share of all non-benign labelled faults flagged between their onset and
  two sampling intervals before their failure (or the end of the trace when they never fail).
* **Lead time**: failure time minus the first such flag (faults that fail and were flagged in time).
* **False flags**: flags on entities that carry no non-benign label (and on nodes that hold none), per
  1,000 node-days of trace; **confounder flags**: the false flags on a benign label's entities (the
  entity, or what it holds: a node's devices, a rack's nodes and devices) during its window.
* **Hard-fault latency**: first ``failed`` flag (after the onset) minus the failure time; negative when
  raswarden had already called the entity failed (a DBE before the final Xid, a GPU at its shutdown
  temperature before it drops off). A hard fault counts as failed in time when that flag comes no later
  than one interval after the failure.
* **Precision**: flags that count for some fault over all flags.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from detectors.schema import node_of

FLAG_STATES = ("subhealthy", "failed")
MAX_LISTED = 200
"""At most this many false flags are listed in :meth:`Evaluation.as_dict` (all are counted)."""


@dataclass(frozen=True)
class Fault:
    """A ground-truth label (docs/architecture.md §8)."""

    entity: str
    fault: str
    onset: float
    failure: float | None
    kind: str = ""
    template: str = ""

    @property
    def benign(self) -> bool:
        return self.fault.startswith("benign_")

    @classmethod
    def from_dict(cls, d: dict) -> Fault:
        return cls(str(d["entity"]), str(d["fault"]), float(d["onset"]),
                   None if d.get("failure") is None else float(d["failure"]), str(d.get("kind", "")),
                   str(d.get("template", "")))


@dataclass(frozen=True)
class Flag:
    ts: float
    entity: str
    state: str
    why: str = field(default="", compare=False)
    """The detector and its first reason (kept so a false flag can be explained; not scored)."""

    def as_dict(self) -> dict:
        return {"ts": self.ts, "entity": self.entity, "state": self.state, "why": self.why}


def flags_from_findings(findings: Iterable[dict]) -> list[Flag]:
    """The flags among findings (transitions into sub-healthy or failed)."""
    return [Flag(float(f["ts"]), str(f["entity"]), str(f["state"]),
                 f"{f.get('detector', '')}: {(f.get('reasons') or [''])[0]}")
            for f in findings if f["state"] in FLAG_STATES]


@dataclass
class ClassScore:
    """Figures for one fault class."""

    faults: int = 0
    flagged_before_failure: int = 0
    lead_times_s: list[float] = field(default_factory=list)
    hard_faults: int = 0
    failed_in_time: int = 0
    hard_latencies_s: list[float] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.flagged_before_failure / self.faults if self.faults else float("nan")

    def add(self, other: ClassScore) -> ClassScore:
        """Pool another score into this one; returns self."""
        self.faults += other.faults
        self.flagged_before_failure += other.flagged_before_failure
        self.lead_times_s += other.lead_times_s
        self.hard_faults += other.hard_faults
        self.failed_in_time += other.failed_in_time
        self.hard_latencies_s += other.hard_latencies_s
        return self

    def as_dict(self) -> dict:
        lead = np.asarray(self.lead_times_s)
        lat = np.asarray(self.hard_latencies_s)
        return {
            "faults": self.faults,
            "recall_before_failure": round(self.recall, 4) if self.faults else None,
            "lead_time_median_s": float(np.median(lead)) if len(lead) else None,
            "lead_time_p10_s": float(np.percentile(lead, 10)) if len(lead) else None,
            "hard_faults": self.hard_faults,
            "hard_faults_failed": self.failed_in_time,
            "hard_latency_median_s": float(np.median(lat)) if len(lat) else None,
            "hard_latency_max_s": float(lat.max()) if len(lat) else None,
        }


@dataclass
class Evaluation:
    """The result of :func:`evaluate`."""

    by_class: dict[str, ClassScore]
    flags: int
    true_flags: int
    false_flags: int
    confounder_flags: int
    node_days: float
    onset_to_failure_s: list[float]
    false_flag_list: list[Flag] = field(default_factory=list)
    """The false flags themselves, with why they were raised."""
    findings_digest: str = ""
    """sha256 of every finding the run made, in order (where the evaluation ran the pipeline itself): two runs with
    the same digest found the same, to the byte; a change meant to move nothing is checked on it (issue 56)."""
    fault_leads: list[dict] = field(default_factory=list)
    """Each labelled fault that fails, in the labels' order: its entity, class, template, onset and failure times,
    window and lead (None where not flagged before it failed): which faults a cell's median lead stands on."""

    @property
    def all_faults(self) -> ClassScore:
        total = ClassScore()
        for s in self.by_class.values():
            total.add(s)
        return total

    @property
    def false_flags_per_1000_node_days(self) -> float:
        return 1000.0 * self.false_flags / self.node_days if self.node_days else float("nan")

    @property
    def precision(self) -> float:
        return self.true_flags / self.flags if self.flags else float("nan")

    def as_dict(self) -> dict:
        window = np.asarray(self.onset_to_failure_s)
        return {
            "by_class": {k: v.as_dict() for k, v in sorted(self.by_class.items())},
            "all": self.all_faults.as_dict(),
            "flags": self.flags,
            "false_flags": self.false_flags,
            "false_flags_per_1000_node_days": round(self.false_flags_per_1000_node_days, 4),
            "confounder_flags": self.confounder_flags,
            "precision": round(self.precision, 4) if self.flags else None,
            "node_days": round(self.node_days, 3),
            "onset_to_failure_median_s": float(np.median(window)) if len(window) else None,
            "false_flag_list": [f.as_dict() for f in self.false_flag_list[:MAX_LISTED]],
        }


def evaluate(
    flags: list[Flag],
    labels: list[Fault],
    trace_end: float,
    node_days: float,
    interval_s: float,
    holds: Callable[[str, str], bool] | None = None,
    sampling_s: float | None = None,
) -> Evaluation:
    """Score flags against labels. ``holds(container, entity)`` says whether a benign label's entity
    (a rack, say) holds an entity; by default a node holds the devices named ``node/...``. ``sampling_s`` is the
    telemetry's sampling interval where it is longer than the tick: a fault is flagged before its failure when
    two sampling intervals before it, and a hard fault is failed in time when within one sampling interval (and
    the tick that reads it) after it."""
    step = max(interval_s, sampling_s or 0.0)
    allowance = interval_s if step <= interval_s else step + interval_s
    holds = holds or (lambda container, entity: entity == container or node_of(entity) == container)
    faults = [lb for lb in labels if not lb.benign]
    benign = [lb for lb in labels if lb.benign]
    faulty_entities = {f.entity for f in faults}
    faulty_nodes = {node_of(f.entity) for f in faults}
    by_entity: dict[str, list[Flag]] = defaultdict(list)
    for fl in sorted(flags, key=lambda f: f.ts):
        by_entity[fl.entity].append(fl)

    by_class: dict[str, ClassScore] = defaultdict(ClassScore)
    windows = []
    fault_leads: list[dict] = []
    for f in faults:
        score = by_class[f.fault]
        score.faults += 1
        candidates = sorted(by_entity.get(f.entity, []) + (by_entity.get(node_of(f.entity), [])
                                                            if node_of(f.entity) != f.entity else []),
                            key=lambda x: x.ts)
        deadline = (f.failure - 2 * step) if f.failure is not None else trace_end
        early = [x for x in candidates if f.onset <= x.ts <= deadline]
        if early:
            score.flagged_before_failure += 1
            if f.failure is not None:
                score.lead_times_s.append(f.failure - early[0].ts)
        if f.failure is not None:
            windows.append(f.failure - f.onset)
            fault_leads.append({"entity": f.entity, "fault": f.fault, "template": f.template, "onset": f.onset,
                                "failure": f.failure, "window_s": f.failure - f.onset,
                                "lead_s": f.failure - early[0].ts if early else None})
            score.hard_faults += 1
            failed = [x for x in candidates if x.state == "failed" and x.ts >= f.onset]
            if failed:
                score.hard_latencies_s.append(failed[0].ts - f.failure)
                if failed[0].ts <= f.failure + allowance:
                    score.failed_in_time += 1

    n_flags = len(flags)
    true_flags = sum(1 for fl in flags if fl.entity in faulty_entities or fl.entity in faulty_nodes)
    false = [fl for fl in flags if fl.entity not in faulty_entities and fl.entity not in faulty_nodes]
    confounder = sum(1 for fl in false if any(lb.onset <= fl.ts <= (lb.failure if lb.failure is not None
                                                                    else trace_end) and holds(lb.entity, fl.entity)
                                              for lb in benign))
    return Evaluation(dict(by_class), n_flags, true_flags, len(false), confounder, node_days, windows, false,
                      fault_leads=fault_leads)
