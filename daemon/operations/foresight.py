"""Foresight, measured: from raswarden's own journal, how many hard failures it acted on ahead, how many it warned of
without acting, and how many came unwarned, per fault class and per rack; and the rates a job's nodes see, with
their uncertainty.

A *hard failure* is an incident of a node, an accelerator or a fabric port that became ``failed``
(``incident.failed_at``). It was *acted on ahead* when raswarden had drained its node before it (the jobs had
checkpointed and moved off) or a checkpoint of the node's jobs was confirmed within ``fresh_s`` before it. A
sub-healthy incident whose node raswarden drained and that never became ``failed`` is a failure *averted* (the part
went to repair first; some would never have failed, which only makes the rates higher and the advice built on them
more careful). A failure not acted on was *warned* when a hardware incident of its node (its own, sub-healthy
first, or another) had been open at least ``warned_s`` before it without a drain: a degrading fabric port that the
built-in playbook only notifies about, a job that did not opt in. Else it came *unwarned*.

Two rates follow. The rate of unwarned failures a node-hour is what any job sees on healthy-looking nodes; the
*hazard of an open incident* (per category: warned failures over the hours such incidents were open and not
drained) is what a job sees on a node with one open under it (daemon/operations/advice.py shortens that job's interval
while it
is open). Both are Gamma posteriors (a Poisson count over an exposure): the node rate from a prior worth
``Prior.failures`` failures at the fleet's published rate (docs/fleet-stats.md: Llama 3's 419 unexpected
interruptions on 16,384 GPUs in 54 days, 1.4 a node-year of 8 GPUs), assuming no foresight before any is shown; the
hazard from one failure in ``Prior.incident_hours`` of an open incident. Coverage is a Beta posterior (Jeffreys). Few
failures give wide intervals, and advice reads the upper bound.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from scipy import stats

from daemon.store import Store
from daemon.store.journal import StoreJournal

YEAR_H = 8766.0
#: incident kinds whose ``failed`` is a hard failure a job on the node suffers
HARD_KINDS = ("node", "accelerator", "port")
#: what happened before a failure: acted on ahead (the first three), warned but not acted on, neither
ACTED = ("drained ahead", "checkpoint confirmed", "averted")
WARNED = "warned, not acted on"
UNWARNED = "unwarned"


@dataclass
class Failure:
    """One hard failure, or one averted, and what raswarden did before it (``how``: one of :data:`ACTED`,
    :data:`WARNED`, :data:`UNWARNED`)."""

    incident: str
    entity: str
    kind: str
    category: str
    rack: str | None
    node: str
    at: float  # the failure, or (averted) the drain that sent the part to repair
    how: str
    warned_by: str | None = None  # the category of the incident that warned of it (WARNED)

    @property
    def foreseen(self) -> bool:
        return self.how in ACTED


@dataclass
class Counts:
    """Hard failures of one group: acted on ahead (averted ones included), warned of only, unwarned."""

    foreseen: int = 0
    warned: int = 0
    unwarned: int = 0

    def add(self, f: Failure) -> None:
        if f.foreseen:
            self.foreseen += 1
        elif f.how == WARNED:
            self.warned += 1
        else:
            self.unwarned += 1

    def as_dict(self) -> dict:
        return {"foreseen": self.foreseen, "warned": self.warned, "unwarned": self.unwarned}


@dataclass
class Prior:
    """What is assumed before raswarden has seen any failure: ``per_node_year`` hard failures a node-year, worth
    ``failures`` failures of evidence (a weak prior: a month of a small fleet outweighs it); and one failure in
    ``incident_hours`` of an open sub-healthy incident nobody acted on."""

    per_node_year: float = 1.4
    failures: float = 1.0
    incident_hours: float = 24.0

    @property
    def node_hours(self) -> float:
        """The exposure the node prior stands for."""
        return self.failures / (self.per_node_year / YEAR_H)


@lru_cache(maxsize=4096)
def _gamma(shape: float, exposure: float, quantile: float | None) -> float:
    return shape / exposure if quantile is None else float(stats.gamma.ppf(quantile, shape) / exposure)


@dataclass
class Foresight:
    """What the journal shows over ``[since, until]``: every hard failure and averted one, the node-hours watched
    and, per category, the hours hardware incidents were open without a drain."""

    since: float
    until: float
    node_hours: float
    failures: list[Failure] = field(default_factory=list)
    prior: Prior = field(default_factory=Prior)
    open_hours: dict[str, float] = field(default_factory=dict)  # category -> incident-hours open, not drained

    @cached_property
    def _tally(self) -> Counter:
        """The failures by how they came, and the warned ones by the category that warned (counted once: every
        job's advice reads them; ``failures`` is not changed after)."""
        return Counter([f.how for f in self.failures] + [(WARNED, f.warned_by) for f in self.failures
                                                           if f.how == WARNED])

    @property
    def foreseen(self) -> int:
        return sum(self._tally[how] for how in ACTED)

    @property
    def unforeseen(self) -> int:
        """Not acted on ahead (warned of or not)."""
        return len(self.failures) - self.foreseen

    @property
    def warned(self) -> int:
        """Warned of by an open incident, not acted on."""
        return self._tally[WARNED]

    @property
    def unwarned(self) -> int:
        return self._tally[UNWARNED]

    def by(self, key: str) -> dict[str, Counts]:
        """Counts per ``category`` (fault class), ``rack`` or ``kind``."""
        out: dict[str, Counts] = defaultdict(Counts)
        for f in self.failures:
            out[str(getattr(f, key) or "-")].add(f)
        return dict(sorted(out.items()))

    def rate(self, which: str = "unwarned", quantile: float | None = None) -> float:
        """Hard failures a node-hour: ``unwarned``, ``unforeseen`` (not acted on ahead) or ``all``; the posterior
        mean, or its ``quantile`` (0.9: the rate is below it with 90 % belief). The prior assumes no foresight, so
        all three start at the fleet's rate."""
        k = {"unwarned": self.unwarned, "unforeseen": self.unforeseen, "all": len(self.failures)}[which]
        return _gamma(self.prior.failures + k, self.prior.node_hours + self.node_hours, quantile)

    def hazard(self, category: str, quantile: float | None = None) -> float:
        """Hard failures an hour of an open incident of ``category`` nobody acted on (its node's jobs still there)."""
        k = self._tally[WARNED, category]
        return _gamma(1.0 + k, self.prior.incident_hours + self.open_hours.get(category, 0.0), quantile)

    def coverage(self, level: float = 0.8) -> tuple[float | None, float | None, float | None]:
        """The share of hard failures acted on ahead: estimate and central ``level`` interval (Jeffreys); Nones when
        there was none."""
        n, k = len(self.failures), self.foreseen
        if not n:
            return None, None, None
        lo, hi = stats.beta.ppf([(1 - level) / 2, (1 + level) / 2], k + 0.5, n - k + 0.5)
        return k / n, float(lo) if k else 0.0, float(hi) if k < n else 1.0

    def summary(self, quantile: float = 0.9, latest: int = 50) -> dict:
        """The figures as the API and ``raswarden advise --foresight`` give them, with the ``latest`` failures, newest
        first (a large fleet's window holds thousands)."""
        share, lo, hi = self.coverage()
        q = f"q{int(quantile * 100)}"
        per_year = {f"{which}{suffix}": round(self.rate(which, qq) * YEAR_H, 4)
                    for which in ("all", "unforeseen", "unwarned") for suffix, qq in (("", None), (f"_{q}", quantile))}
        hazards = {c: {"open_hours": round(h, 1), "per_day": round(24 * self.hazard(c), 4),
                       f"per_day_{q}": round(24 * self.hazard(c, quantile), 4)}
                   for c, h in sorted(self.open_hours.items())}
        return {"since": self.since, "until": self.until, "node_hours": round(self.node_hours, 1),
                "hard_failures": len(self.failures), "foreseen": self.foreseen,
                "warned": self.warned, "unwarned": self.unwarned,
                "coverage": None if share is None else round(share, 4),
                "coverage_interval": None if share is None else [round(lo, 4), round(hi, 4)],
                "per_node_year": per_year, "open_incident_hazard": hazards,
                "prior": {"per_node_year": self.prior.per_node_year, "failures": self.prior.failures,
                          "incident_hours": self.prior.incident_hours},
                "by_class": {k: v.as_dict() for k, v in self.by("category").items()},
                "by_rack": {k: v.as_dict() for k, v in self.by("rack").items()},
                "latest_failures": [f.__dict__ for f in reversed(self.failures[-latest:])] if latest > 0 else []}


def measure(store: Store, now: float, window_s: float = 180 * 86400.0, prior: Prior | None = None,
            fresh_s: float = 600.0, lookback_s: float = 86400.0, same_s: float = 3600.0,
            warned_s: float = 600.0) -> Foresight:
    """Foresight over the last ``window_s`` before ``now`` from the store: incidents, the action journal, the
    nodes watched. ``fresh_s``: a checkpoint confirmed this long before a failure counts as acting ahead;
    ``lookback_s``: how long before a failure a drain of its node (for an incident still open then) is taken as done
    for it; ``same_s``: incidents of one node this close are one failure; ``warned_s``: how long an incident must
    have been open before a failure to have warned of it (time for a job to checkpoint)."""
    since = now - window_s
    nodes = store.entities("node")
    incidents = store.incident_outlines(HARD_KINDS, since - lookback_s)
    steps = StoreJournal(store).step_rows(("drain", "wait_checkpoint"), since - lookback_s)
    node_hours = sum(max(0.0, now - max(n.first_seen, since)) for n in nodes) / 3600.0
    by_id = {r.id: r for r in incidents}
    node_of = {r.id: r.entity.split("/", 1)[0] for r in incidents}
    # what raswarden did on each node for a hardware incident: drains done (act mode), checkpoint confirmations
    drains: dict[str, list[tuple[float, str]]] = defaultdict(list)
    drained_at: dict[str, float] = {}  # incident -> its first drain
    confirmations: dict[str, list[float]] = defaultdict(list)
    for row in steps:
        d = row.detail or {}
        if row.incident_id not in by_id or d.get("mode", "act") != "act":
            continue
        node = node_of[row.incident_id]
        if row.step == "drain" and row.status == "done" and "already drained" not in d.get("note", ""):
            at = d.get("finished_at") or row.ts
            drains[node].append((at, row.incident_id))
            drained_at[row.incident_id] = min(at, drained_at.get(row.incident_id, at))
        elif row.step == "wait_checkpoint":
            confirmations[node].extend(float(t) for t in (d.get("confirmed_at") or {}).values())

    def open_at(r: Any, at: float) -> bool:  # open (and not drained) at ``at``
        return r.opened_at <= at and (r.closed_at is None or r.closed_at >= at) and r.id not in drained_at

    def ended(r: Any) -> float:  # when its node stopped being at risk with jobs on it
        return min(x for x in (r.failed_at, r.closed_at, drained_at.get(r.id), now) if x is not None)

    on_node: dict[str, list[Any]] = defaultdict(list)
    for r in incidents:
        on_node[node_of[r.id]].append(r)
    out: list[Failure] = []
    seen: dict[str, list[float]] = defaultdict(list)  # node -> the times of its failures counted so far
    open_hours: dict[str, float] = defaultdict(float)
    for r in sorted(incidents, key=lambda r: (r.failed_at or r.opened_at, r.id)):
        node = node_of[r.id]
        if r.failed_at is None or r.failed_at > r.opened_at:  # it was open (sub-healthy) for a while
            open_hours[r.category] += max(0.0, ended(r) - max(r.opened_at, since)) / 3600.0
        if r.failed_at is not None:
            if r.failed_at < since:
                continue
            ahead = [t for t, inc in drains.get(node, []) if r.failed_at - lookback_s <= t <= r.failed_at
                     and (by_id[inc].closed_at is None or by_id[inc].closed_at >= r.failed_at)]
            fresh = [t for t in confirmations.get(node, []) if r.failed_at - fresh_s <= t <= r.failed_at]
            warning = sorted((w for w in on_node[node] if open_at(w, r.failed_at - warned_s)),
                             key=lambda w: w.opened_at)
            how = ACTED[0] if ahead else ACTED[1] if fresh else WARNED if warning else UNWARNED
            found = Failure(r.id, r.entity, r.kind, r.category, r.rack, node, r.failed_at, how,
                            warning[0].category if how == WARNED else None)
        elif r.id in drained_at and drained_at[r.id] >= since:
            found = Failure(r.id, r.entity, r.kind, r.category, r.rack, node, drained_at[r.id], ACTED[2])
        else:
            continue
        # One failure of a node is seen as several incidents (a GPU's and, escalated, its node's; several parts
        # drained together): within ``same_s`` of each other they are one.
        if not any(abs(t - found.at) <= same_s for t in seen[node]):
            seen[node].append(found.at)
            out.append(found)
    out.sort(key=lambda f: f.at)
    return Foresight(since, now, node_hours, out, prior or Prior(), dict(open_hours))
