"""Health per entity: the state machine with hysteresis, staleness, and the node roll-up (docs/architecture.md §4).

* A hard fault enters ``failed`` at once. Otherwise an entity enters a worse state when its evidence
  reached that level in ``enter_k`` of the last ``enter_n`` ticks, or at once when that evidence is latched (held
  by its detector once raised, :attr:`detectors.contract.Evidence.latched`: a second tick would only delay it).
* It leaves for a better state after ``clear_ticks`` consecutive fresh ticks whose evidence is below
  its state; ``failed`` is left only after ``failed_clear_ticks`` fresh ticks with no evidence at all.
* ``unknown``: no telemetry for its staleness window (``stale_after``, learned from the entity's own sampling
  interval by the pipeline; ``stale_after_s`` until it is known); only a healthy or suspect entity becomes unknown
  (a failed GPU that fell off the bus stays failed). Unknown is never acted on.
* A node's health is the worst of its own and its accelerators' and host components'; its fabric
  ports make it bad only when none of them is healthy (no path left).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from daemon.judgement.freshness import Freshness

from detectors.contract import Evidence
from detectors.schema import State, entity_kind, node_of


@dataclass
class HealthConfig:
    """Hysteresis and staleness parameters (in ticks and seconds)."""

    enter_k: int = 2
    enter_n: int = 3
    # latched evidence (held by its detector once raised) enters its level at once; False waits enter_k ticks of it too
    latched_at_once: bool = True
    clear_ticks: int = 10
    failed_clear_ticks: int = 20
    stale_after_s: float = 150.0
    # A state restored from the store (a restarted daemon) is kept this long at least: the streaming detectors
    # start again from nothing and need their longest short window (the trend's hour) to see again what they saw
    restore_hold_s: float = 3600.0


@dataclass
class Transition:
    """An entity's health changed."""

    ts: float
    entity: str
    old: State
    new: State
    score: float
    detector: str
    category: str
    reasons: list[str]


@dataclass
class EntityHealth:
    """The tracked health of one entity."""

    state: State = State.HEALTHY
    since: float = 0.0
    window: deque = field(default_factory=lambda: deque(maxlen=3))
    below: int = 0
    top: Evidence | None = None
    restored: bool = False  # restored from the store: held for restore_hold_s from the first tick after
    hold_until: float | None = None
    # What a tick must bring for this entity to stay exactly as it is (HealthTracker._steady_for); None: not steady
    steady: tuple | None = None


def _combine(evidence: list[Evidence]) -> Evidence:
    """One entity's evidence of a tick folded into its worst, with every reason at that level."""
    if len(evidence) == 1:  # (most entities: their one piece, its reasons once each)
        e = evidence[0]
        return Evidence(e.entity, e.level, e.category, list(dict.fromkeys(e.reasons)), e.detector, e.hard, e.score)
    worst = max(evidence, key=lambda e: (e.level, e.hard, e.score))
    reasons: list[str] = []
    for e in sorted(evidence, key=lambda e: (-e.level, e.category, e.reasons)):
        for r in e.reasons:
            if r not in reasons:
                reasons.append(r)
    hard = any(e.hard and e.level == worst.level for e in evidence)
    return Evidence(worst.entity, worst.level, worst.category, reasons, worst.detector, hard, worst.score)


class HealthTracker:
    """Tracks every entity's health tick by tick; returns the transitions."""

    def __init__(self, config: HealthConfig | None = None):
        self.config = config or HealthConfig()
        self.entities: dict[str, EntityHealth] = {}
        # when each entity was last observed, and its staleness window from its sampling interval
        self.freshness = Freshness(self.config.stale_after_s)

    def state_of(self, entity: str) -> State:
        h = self.entities.get(entity)
        return h.state if h else State.HEALTHY

    def observe(self, entities, now: float) -> None:
        """Mark entities as having fresh telemetry at ``now``."""
        self.freshness.observe(entities, now)

    def observe_names(self, names: np.ndarray, codes: np.ndarray, now: float) -> None:
        """Mark the entities ``names[codes]`` as having fresh telemetry at ``now`` (``names``: a name array as
        :func:`detectors.schema.name_codes` hands them out, the same object while the names do not change)."""
        if len(codes):
            self.freshness.observe_rows(self.freshness.rows(names)[codes], now)

    def is_fresh(self, entity: str, now: float) -> bool:
        self.freshness.default_s = self.config.stale_after_s
        return self.freshness.is_fresh(entity, now)

    def update(self, now: float, evidence: list[Evidence]) -> list[Transition]:
        """Advance every entity by one tick."""
        cfg = self.config
        by_entity: dict[str, list[Evidence]] = {}
        for ev in evidence:
            by_entity.setdefault(ev.entity, []).append(ev)
        combined = {e: _combine(evs) for e, evs in by_entity.items()}
        latched = {e: max(x.level for x in evs if x.latched) for e, evs in by_entity.items()
                   if cfg.latched_at_once and any(x.latched for x in evs)}
        transitions: list[Transition] = []
        candidates = set(combined) | {e for e, h in self.entities.items() if h.state != State.HEALTHY or any(h.window)}
        self.freshness.default_s = cfg.stale_after_s
        candidates.update(self.freshness.stale(now))
        for entity in sorted(candidates):
            h = self.entities.get(entity)
            ev = combined.get(entity)
            if h is not None and h.steady is not None:  # a tick that would change nothing of it: only its top moves
                if ev is not None:
                    if h.steady == (ev.level, ev.hard, latched.get(entity, State.HEALTHY)):
                        if ev.level >= State.SUSPECT:
                            h.top = ev
                        continue
                elif h.steady is _UNSEEN and not self.is_fresh(entity, now):
                    continue
            if h is None:
                h = self.entities[entity] = EntityHealth(since=now, window=deque(maxlen=cfg.enter_n))
            level = ev.level if ev else State.HEALTHY
            h.window.append(int(level))
            fresh = ev is not None or self.is_fresh(entity, now)
            if h.restored and h.hold_until is None:
                h.hold_until = now + cfg.restore_hold_s
            held = h.hold_until is not None and now < h.hold_until
            new = self._next(h, ev, level, fresh, held, latched.get(entity, State.HEALTHY))
            if ev is not None and ev.level >= State.SUSPECT:
                h.top = ev
            if new != h.state:
                top = ev if ev is not None else h.top
                reasons = list(top.reasons) if top and new > State.HEALTHY else (
                    ["no telemetry"] if new == State.UNKNOWN else ["recovered: no evidence for "
                                                                   f"{h.below} ticks"])
                transitions.append(Transition(
                    now, entity, h.state, new,
                    top.score if top and new > State.HEALTHY else 0.0,
                    top.detector if top else "health",
                    top.category if top else ("telemetry" if new == State.UNKNOWN else ""),
                    reasons,
                ))
                h.state = new
                h.since = now
                h.below = 0
                if new == State.HEALTHY:
                    h.top = None
            if h.state == State.HEALTHY and not any(h.window) and entity not in combined:
                del self.entities[entity]
            else:
                h.steady = self._steady_for(h, ev, level, fresh, latched.get(entity, State.HEALTHY))
        return transitions

    def _steady_for(self, h: EntityHealth, ev: Evidence | None, level: State, fresh: bool, latched: State
                    ) -> tuple | None:
        """What a tick must bring for ``h`` to come out of it exactly as it is now: the same evidence level, hardness
        and latched level (``ev`` given), or no evidence and no fresh telemetry (:data:`_UNSEEN`); None when the next
        tick would move something whatever it brings (a window not yet uniform, a count towards leaving, a state to
        enter). A large fleet in trouble keeps hundreds of entities flagged for hours; a tick then walks the state
        machine only of those whose input changed (issue 56)."""
        window = h.window
        if h.below or len(window) < (window.maxlen or 0) or any(x != level for x in window):
            return None
        if ev is None:
            if fresh or h.state in (State.HEALTHY, State.SUSPECT):
                return None
            return _UNSEEN
        if not (ev.hard and level == State.FAILED):
            state = h.state
            if max(_entered(window, self.config.enter_k), latched) > state:
                return None
            if (level == State.HEALTHY) if state == State.FAILED else (level < state):
                return None
        elif h.state != State.FAILED:
            return None
        return (level, ev.hard, latched)

    def _next(self, h: EntityHealth, ev: Evidence | None, level: State, fresh: bool, held: bool = False,
              latched: State = State.HEALTHY) -> State:
        cfg = self.config
        state = h.state
        if ev is not None and ev.hard and level == State.FAILED:
            h.below = 0
            return State.FAILED
        if not fresh:
            h.below = 0
            return State.UNKNOWN if state in (State.HEALTHY, State.SUSPECT, State.UNKNOWN) else state
        if state == State.UNKNOWN:
            state = State.HEALTHY
        candidate = max(_entered(h.window, cfg.enter_k), latched)  # latched evidence cannot flicker: no second tick
        if candidate > state:
            h.below = 0
            return candidate
        # Leaving: below the current state for clear_ticks fresh ticks; a failed entity must be
        # entirely clean (no evidence at all) for failed_clear_ticks. A restored state waits out its hold.
        better = level == State.HEALTHY if state == State.FAILED else level < state
        if held:
            h.below = 0
            return state
        if better:
            h.below += 1
            needed = cfg.failed_clear_ticks if state == State.FAILED else cfg.clear_ticks
            if h.below >= needed:
                return State(max(int(candidate), int(level)))
        else:
            h.below = 0
        return state


_UNSEEN = ("no evidence", "not fresh")  # EntityHealth.steady of an entity that stays as it is while unobserved


def _entered(window: deque, k: int) -> State:
    """The worst level of suspect, sub-healthy and failed that at least ``k`` of the window's ticks reached (healthy
    when none): the window's k-th highest level."""
    if k < 1:
        return State.FAILED
    if len(window) < k:
        return State.HEALTHY
    kth = sorted(window)[-k]
    return State(kth) if kth >= State.SUSPECT else State.HEALTHY


@dataclass
class RollupState:
    """A node's derived health and why."""

    state: State
    reasons: list[str]
    category: str
    score: float
    bad_accelerators: int = 0  # its accelerators sub-healthy or failed


def rollup_nodes(tracker: HealthTracker, nodes, ports_by_node: dict[str, set[str]]) -> dict[str, RollupState]:
    """Derived health of each node from its own state, its accelerators and components, and its ports."""
    children: dict[str, list[tuple[str, EntityHealth]]] = {}
    for entity, h in tracker.entities.items():
        if "/" in entity and h.state in (State.SUSPECT, State.SUBHEALTHY, State.FAILED):
            children.setdefault(node_of(entity), []).append((entity, h))
    out: dict[str, RollupState] = {}
    for node in nodes:
        own = tracker.entities.get(node)
        state = own.state if own else State.HEALTHY
        reasons = list(own.top.reasons) if own and own.top and state > State.HEALTHY else []
        category = own.top.category if own and own.top else ""
        score = own.top.score if own and own.top else 0.0
        bad_ports = []
        bad_accelerators = 0
        for entity, h in sorted(children.get(node, [])):
            short = entity.split("/", 1)[1]
            kind = entity_kind(entity)
            if kind == "port":
                bad_ports.append((entity, h))
                continue
            bad_accelerators += kind == "accelerator" and h.state >= State.SUBHEALTHY
            if h.state > state or (state == State.UNKNOWN and h.state >= State.SUBHEALTHY):
                state, category = h.state, (h.top.category if h.top else category)
                score = max(score, h.top.score if h.top else 0.0)
            if h.state >= State.SUBHEALTHY:
                reasons.append(f"{short} {h.state.label}: " + "; ".join(h.top.reasons if h.top else []))
        ports = ports_by_node.get(node, set())
        if ports and len(bad_ports) == len(ports) and all(h.state >= State.SUBHEALTHY for _, h in bad_ports):
            worst = min(h.state for _, h in bad_ports)
            if worst > state:
                state, category = worst, "fabric_link"
            reasons.append(f"no healthy fabric port left ({len(ports)} of {len(ports)} bad)")
        out[node] = RollupState(state, reasons, category, score, bad_accelerators)
    return out
