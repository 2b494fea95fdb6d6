"""Checkpoint-interval advice per job from raswarden's measured foresight (docs/playbooks.md, "Checkpoint advice").

A job that checkpoints every ``T`` seconds of work at a cost ``C`` loses ``C / T`` of its time to checkpoints and,
at each failure that finds it unprepared, the work since its last checkpoint (``T / 2`` on average). The failures
raswarden acts on ahead cost only the checkpoint it asks for and the restart, whatever ``T`` is. So the best ``T``
depends on the rate of the other failures the job's nodes see: those no incident warned of
(daemon/operations/foresight.py),
and, while an incident nobody acted on is open under the job (a degrading port the built-in playbook only notifies
about), that incident's hazard. The interval is Young's ``sqrt(2 C M)`` with ``M`` the mean time between them, with
Daly's higher-order correction (J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart
dumps", Future Generation Computer Systems 22, 2006).

Conservative by construction: ``M`` comes from the upper ``quantile`` of the rates, so a fleet with few failures on
record gets a shorter interval; the interval is never longer than the job's own maximum or ``max_interval_s``; and
while detection cannot be trusted (a collector failing, the playbooks' breaker open, a node of the job without
telemetry) the *safe* interval is advised at once: the same formula with every failure taken as unwarned.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from daemon.config import AdviceConfig
from daemon.operations.foresight import HARD_KINDS, Foresight, Prior, measure
from daemon.store import Store
from daemon.store.journal import StoreJournal
from playbooks.duration import parse_duration
from playbooks.scheduler import ClusterState, JobInfo

#: what a job may declare in its comment beside its opt-in: ``raswarden:checkpoint cost=2m restart=10m max=6h``
_DECLARED = re.compile(r"\b(cost|restart|max)=([0-9.]+[smhd]?)\b")


def daly_interval(cost_s: float, mtbf_s: float) -> float:
    """Daly's optimum compute time between checkpoints for a checkpoint cost and a mean time between (unforeseen)
    failures, both in seconds."""
    if not math.isfinite(mtbf_s):
        return math.inf
    if cost_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = cost_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * cost_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - cost_s


def overhead(interval_s: float, cost_s: float, restart_s: float, mtbf_s: float) -> float:
    """The expected share of a job's time lost to its periodic checkpoints and to failures at ``mtbf_s`` (the
    work since the last checkpoint, half an interval, and the restart), first order."""
    if not math.isfinite(mtbf_s):
        return cost_s / (interval_s + cost_s)
    return cost_s / (interval_s + cost_s) + ((interval_s + cost_s) / 2.0 + restart_s) / mtbf_s


@dataclass
class JobAdvice:
    """The advice for one job, as the API, the metric, the file and ``raswarden advise`` give it."""

    job: str
    nodes: int
    interval_s: float
    safe_interval_s: float
    safe: bool  # the safe interval is advised (detection degraded: ``why``)
    why: str
    checkpoint_cost_s: float
    cost_from: str  # measured | declared | default
    restart_cost_s: float
    max_interval_s: float
    mtbf_h: float  # the mean time between the failures the job must expect unprepared (at the upper rates)
    expected_overhead: float  # checkpoints + those failures at the advised interval, a share of its time
    updated_at: float
    expires_at: float  # after this, the file is stale: checkpoint at the safe interval
    measured_costs: list[float] = field(default_factory=list)
    at_risk: list[str] = field(default_factory=list)  # open sub-healthy parts under the job nobody acted on

    def as_dict(self) -> dict:
        d = asdict(self)
        for k in ("interval_s", "safe_interval_s", "checkpoint_cost_s", "restart_cost_s", "max_interval_s"):
            d[k] = round(d[k], 1)
        d["mtbf_h"] = round(d["mtbf_h"], 1) if math.isfinite(d["mtbf_h"]) else None
        d["expected_overhead"] = round(d["expected_overhead"], 5)
        d["measured_costs"] = [round(c, 1) for c in d["measured_costs"][-5:]]
        return d


def declared(comment: str) -> dict[str, float]:
    """What a job declares in its comment (``cost=2m restart=10m max=6h``), in seconds; bad values are left out."""
    out = {}
    for key, value in _DECLARED.findall(comment or ""):
        try:
            seconds = parse_duration(value)
        except ValueError:
            continue
        if seconds > 0:
            out[key] = seconds
    return out


def measured_costs(store: Store, since: float) -> dict[str, list[float]]:
    """Each job's measured checkpoint costs: from raswarden's signal (the checkpoint step) to the job's confirmation
    (the wait step), per playbook action, oldest first."""
    rows = StoreJournal(store).step_rows(("checkpoint", "wait_checkpoint"), since)
    signalled: dict[tuple[str, str], float] = {}  # (action key, job) -> when
    out: dict[str, list[float]] = {}
    for row in rows:
        action = row.idempotency_key.rsplit("#", 1)[0]
        d = row.detail or {}
        if row.step == "checkpoint" and d.get("signalled_at") is not None:
            for job in d.get("signalled", []):
                signalled[action, job] = float(d["signalled_at"])
        elif row.step == "wait_checkpoint":
            for job, at in (d.get("confirmed_at") or {}).items():
                if (action, job) in signalled and at >= signalled[action, job]:
                    # (at least a second: a job that confirmed within one playbook pass)
                    out.setdefault(job, []).append(max(1.0, float(at) - signalled[action, job]))
    return out


class Advisor:
    """Advice for every running opted-in job of a cluster snapshot, from the foresight measured."""

    def __init__(self, settings: AdviceConfig | None = None):
        self.settings = settings or AdviceConfig()
        self.declared: dict[str, dict[str, float]] = {}  # job -> what it declared (a confirmation rewrites comments)
        self.last: dict[str, JobAdvice] = {}
        self.foresight: Foresight | None = None  # as last measured

    def measure(self, store: Store, now: float) -> Foresight:
        """Foresight over the configured window, from the configured prior."""
        cfg = self.settings
        self.foresight = measure(store, now, cfg.window_days * 86400.0,
                                 Prior(cfg.prior_per_node_year, cfg.prior_failures, cfg.prior_incident_hours))
        return self.foresight

    def run(self, store: Store, state: ClusterState, now: float, degraded: str | None = None,
            scheduler_names: dict[str, str] | None = None) -> dict[str, JobAdvice]:
        """Measure foresight, the jobs' checkpoint costs and the open incidents from the store, and advise every job
        of ``state`` (``degraded``: :func:`degraded_reason`; ``scheduler_names``: node -> the scheduler's name, where
        the topology gives another)."""
        foresight = self.measure(store, now)
        costs = measured_costs(store, now - self.settings.window_days * 86400.0)
        stale, risks = open_by_node(store, scheduler_names or {})
        return self.advise(state, foresight, now, costs, degraded, stale, risks)

    def job_advice(self, job: JobInfo, foresight: Foresight, now: float, costs: list[float] | None = None,
                   degraded: str | None = None, at_risk: list[tuple[str, str]] = ()) -> JobAdvice:
        """The advice for one job: ``degraded``, why detection cannot be trusted for it, or None; ``at_risk``, the
        open sub-healthy incidents (entity, category) on its nodes that nobody acted on."""
        cfg, q = self.settings, self.settings.quantile
        decl = self.declared.setdefault(job.id, {})
        decl.update(declared(job.comment))
        if costs:
            cost, cost_from = statistics.median(costs[-5:]), "measured"
        elif "cost" in decl:
            cost, cost_from = decl["cost"], "declared"
        else:
            cost, cost_from = cfg.cost_s, "default"
        restart = decl.get("restart", cfg.restart_s)
        longest = min(cfg.max_interval_s, decl.get("max", math.inf))
        n = max(1, len(job.nodes))
        risk_h = sum(foresight.hazard(category, q) for _, category in at_risk)  # failures an hour
        safe_mtbf = 3600.0 / (n * foresight.rate("all", q) + risk_h)
        mtbf = 3600.0 / (n * foresight.rate("unwarned", q) + risk_h)
        clamp = lambda t: min(longest, max(cfg.min_interval_s, t))  # noqa: E731
        safe_t = clamp(daly_interval(cost, safe_mtbf))
        if degraded:
            t, why, used = safe_t, degraded, safe_mtbf
        else:
            t, used = clamp(daly_interval(cost, mtbf)), mtbf
            why = (f"{foresight.unwarned} unwarned of {len(foresight.failures)} hard failures in "
                   f"{foresight.node_hours:,.0f} node-hours")
            if at_risk:
                why += (f"; at risk from {', '.join(sorted({e for e, _ in at_risk})[:3])} (open, "
                        f"{', '.join(sorted({c for _, c in at_risk}))})")
            why += f"; {n} node(s): a failure every {mtbf / 3600:,.1f} h or sooner ({q:.0%} bound)"
            if t >= longest:
                why += f"; held at the job's maximum, {longest / 3600:g} h" if "max" in decl and \
                    decl["max"] <= cfg.max_interval_s else f"; held at the longest advised, {longest / 3600:g} h"
        return JobAdvice(job.id, n, t, safe_t, bool(degraded), why, cost, cost_from, restart, longest,
                         used / 3600.0, overhead(t, cost, restart, used), now, now + 3 * cfg.every_s,
                         list(costs or []), sorted({e for e, _ in at_risk}))

    def advise(self, state: ClusterState, foresight: Foresight, now: float, costs: dict[str, list[float]],
               degraded: str | None = None, degraded_nodes: dict[str, str] | None = None,
               risks: dict[str, list[tuple[str, str]]] | None = None) -> dict[str, JobAdvice]:
        """Advice for each running job that opted in to checkpoint signals (the others cannot act on it):
        ``degraded`` applies to all, ``degraded_nodes`` (node -> why) to the jobs on those nodes; ``risks`` (node ->
        open sub-healthy incidents as (entity, category)) shortens the intervals of the jobs on those nodes."""
        out = {}
        for job in state.jobs.values():
            if job.state != "running" or not job.checkpoint_opt_in:
                continue
            why = degraded or next((f"{node}: {degraded_nodes[node]}" for node in job.nodes
                                    if degraded_nodes and node in degraded_nodes), None)
            at_risk = [r for node in job.nodes for r in (risks or {}).get(node, [])]
            out[job.id] = self.job_advice(job, foresight, now, costs.get(job.id), why, at_risk)
        self.declared = {j: d for j, d in self.declared.items() if j in state.jobs}
        self.last = out
        return out


def open_by_node(store: Store, scheduler_names: dict[str, str]) -> tuple[dict[str, str], dict[str, list]]:
    """From the open incidents, by node as the scheduler names it: the nodes without telemetry (an open telemetry
    incident: their jobs get the safe interval), and the open sub-healthy hardware incidents, (entity, category) each.
    A node raswarden drains has no job left to advise; one whose incident only notifies (a degrading fabric port) or
    whose job did not move keeps its jobs at risk until the incident closes."""
    stale: dict[str, str] = {}
    risks: dict[str, list[tuple[str, str]]] = {}
    for r in store.incidents("open"):
        node = r.entity.split("/", 1)[0]
        if r.category == "telemetry" and r.kind == "node":
            stale[scheduler_names.get(node, node)] = "no telemetry"
        elif r.kind in HARD_KINDS and r.category != "telemetry" and r.severity == "subhealthy":
            risks.setdefault(scheduler_names.get(node, node), []).append((r.entity, r.category))
    return stale, risks


def degraded_reason(breaker: str | None, failing: list[str]) -> str | None:
    """Why detection cannot be trusted for any job (the playbooks' breaker open, collectors failing), or None."""
    if breaker:
        return f"the playbooks' breaker is open ({breaker})"
    if failing:
        return f"collector {', '.join(sorted(failing))} failing: failures may come unforeseen"
    return None


def write_files(directory: str | Path, advice: dict[str, JobAdvice], gone: set[str] | frozenset = frozenset(),
                forget_after_s: float = 86400.0) -> None:
    """Each job's advice as ``<directory>/<job>.json``, replaced atomically (a job never reads half a file). The
    files of ``gone`` (jobs this writer advised before and no longer does) are removed, and any file not rewritten
    for ``forget_after_s`` (long expired: a job that ended while no raswarden wrote, another shard's job); the other
    files are left to their writers (the shards of a cluster share the directory)."""
    import time

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    for job, a in advice.items():
        fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{job}.")
        with os.fdopen(fd, "w") as f:
            json.dump(a.as_dict(), f, indent=1)
        os.chmod(tmp, 0o644)
        os.replace(tmp, root / f"{job}.json")
    for job in gone - set(advice):
        (root / f"{job}.json").unlink(missing_ok=True)
    old = time.time() - forget_after_s
    for path in root.glob("*.json"):
        try:
            if path.stem not in advice and path.stat().st_mtime < old:
                path.unlink(missing_ok=True)
        except OSError:
            continue
