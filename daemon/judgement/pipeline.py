"""The tick: one batch of samples and events in, health transitions, findings and incidents out.

The same :meth:`Pipeline.tick` runs in live, replay and simulation mode (docs/architecture.md §1); only the
clock and the source of batches differ. Nothing in here reads a wall clock.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pandas as pd

from daemon import metrics
from daemon.ingest.batch import Batch
from daemon.ingest.naming import SeriesMapper
from daemon.judgement.health import HealthConfig, HealthTracker, Transition, rollup_nodes
from daemon.judgement.idle_ticks import IdleTicks
from daemon.judgement.incidents import Incident, IncidentBook
from daemon.judgement.node_tracking import NodeTracking
from daemon.judgement.pipeline_memory import PipelineMemory
from daemon.judgement.resolve import EventResolver, is_code_gauge
from daemon.store import Store
from detectors import registry
from detectors.cadence import Cadence
from detectors.contract import TICK_S, Detector, Evidence, TickInput
from detectors.counters import CounterTracker
from detectors.features import FeatureState
from detectors.grouping import PerNameArray, group_keys, group_mean, last_and_max
from detectors.hold import GaugeHold
from detectors.rules import RuleDetector
from detectors.schema import (NamesWhere, State, entity_kind, events_frame, is_counter, name_codes, names_mask,
                              node_of)
from detectors.table import NO_NAMES, Names, Table, keeps_layout, read_only

log = logging.getLogger("raswarden.pipeline")
T = TypeVar("T")


_IsCounter = NamesWhere(is_counter)
_IsCodeGauge = NamesWhere(is_code_gauge)
_NO_COUNTERS = Table({"ts": np.empty(0), "entity": NO_NAMES, "metric": NO_NAMES, "value": np.empty(0)})
_NO_GAUGES = Table({"entity": NO_NAMES, "metric": NO_NAMES, "last": np.empty(0), "max": np.empty(0),
                    "mean": np.empty(0)})
_NO_CODE_ROWS = Table({"entity": NO_NAMES, "metric": NO_NAMES, "ts": np.empty(0), "value": np.empty(0)})

@dataclass
class PipelineConfig:
    """Tick and detection parameters."""

    interval_s: float = TICK_S
    reboot_grace_s: float = 600.0  # after reboot evidence: a boot, a new boot time, a node's counters reset at once
    telemetry_incident_after_s: float = 900.0  # at least; a node sampled every 5 min gets four intervals
    baseline: bool = False  # run only the static-threshold baseline rules (for evaluation)
    rules_only: bool = False  # run only raswarden's rules, the one detector that says `failed` (reactive policy)
    model: object | None = None  # a detectors.bundle.ModelBundle: adds the learned detectors
    features: bool = False  # compute the feature frames even when no detector reads them (training)
    # Only the feature frames (``raswarden train``): no detector, health or incident runs, and no finding comes
    features_only: bool = False
    # An idle tick (no sample, event or increase) takes the detectors' evidence of the tick before while they say it
    # stands (daemon/judgement/idle_ticks.py); off: every tick runs every detector (to check that it changes nothing)
    reuse_idle_evidence: bool = True
    health: HealthConfig = field(default_factory=HealthConfig)


@dataclass
class Finding:
    """One visible state transition, in the JSON-lines form of docs/architecture.md §8."""

    ts: float
    entity: str
    kind: str
    state: str
    score: float
    detector: str
    reasons: list[str]

    def as_dict(self) -> dict:
        return {"ts": self.ts, "entity": self.entity, "kind": self.kind, "state": self.state,
                "score": round(self.score, 4), "detector": self.detector, "reasons": self.reasons}


@dataclass
class TickResult:
    findings: list[Finding]
    incidents: list[Incident]
    events: int
    samples: int


class SharedIngest:
    """What pipelines that judge the same batches side by side (an evaluation's raswarden and its static baseline)
    would each work out alike from a tick, worked out once: the batch split into counters, gauges and code gauges, and
    its counter increases; which entities were sampled and when (the sampling cadence they learn from it); the gauge
    readings current at the tick. Each is a function of the batches and of state such pipelines hold alike (the
    counters' last values, the cadence, the gauge hold): the first pipeline to tick at a time works a part out, the
    others take it. A pipeline given one reads its counters only through it, and shares its cadence and gauge hold
    (:meth:`adopt`)."""

    def __init__(self) -> None:
        self._at: float | None = None
        self._rows = -1
        self._parts: tuple[Table, Table, Table, Table] | None = None
        self._kept: dict[str, tuple[float, int, object]] = {}
        self._cadence: Cadence | None = None
        self._hold: GaugeHold | None = None

    def take(self, now: float, rows: int) -> tuple[Table, Table, Table, Table] | None:
        """The parts worked out at ``now`` for a batch of ``rows`` samples, if a pipeline did."""
        return self._parts if self._at == now and self._rows == rows else None

    def keep(self, now: float, rows: int, parts: tuple[Table, Table, Table, Table]) -> None:
        self._at, self._rows, self._parts = now, rows, parts

    def adopt(self, pipeline: Pipeline) -> bool:
        """Give ``pipeline`` the cadence and gauge hold of the first pipeline adopted (that one keeps its own), when
        their cadences learn alike (the same tick, factor and floor); whether it shares them."""
        if self._cadence is None:
            self._cadence, self._hold = pipeline.cadence, pipeline.hold
            return True
        mine, theirs = self._cadence, pipeline.cadence
        if (mine.tick_s, mine.factor, mine.floor_s) != (theirs.tick_s, theirs.factor, theirs.floor_s):
            return False
        pipeline.cadence, pipeline.hold = mine, self._hold
        return True

    def once(self, part: str, now: float, rows: int, work: Callable[[], T]) -> T:
        """``part`` of the tick at ``now`` (a batch of ``rows`` samples): worked out by ``work`` by the first pipeline
        to ask, the same object for the others."""
        kept = self._kept.get(part)
        if kept is not None and kept[0] == now and kept[1] == rows:
            return kept[2]  # type: ignore[return-value]
        out = work()
        self._kept[part] = (now, rows, out)
        return out


class Pipeline(PipelineMemory, NodeTracking):
    """Streaming state of one raswarden: counters, rules, health, incidents."""

    def __init__(
        self,
        mapper: SeriesMapper | None = None,
        config: PipelineConfig | None = None,
        store: Store | None = None,
        on_finding: Callable[[Finding], None] | None = None,
    ):
        self.mapper = mapper or SeriesMapper()
        self.config = config or PipelineConfig()
        self.store = store
        self.on_finding = on_finding
        self.resolver = EventResolver(self.mapper, window_s=max(120.0, 4 * self.config.interval_s))
        self.counters = CounterTracker()
        self.detectors: list[Detector] = [] if self.config.features_only else registry.build(
            baseline=self.config.baseline, model=self.config.model, rules_only=self.config.rules_only)
        wants = self.config.features or self.config.features_only or \
            any(d.needs_features for d in self.detectors)
        self.features = FeatureState() if wants else None
        self.rules = next((d for d in self.detectors if isinstance(d, RuleDetector)), None)  # None: features only
        self.health = HealthTracker(self.config.health)
        rack_sizes = Counter(self.mapper.topology.node_rack.values())
        self.incidents = IncidentBook(self.mapper.topology.rack_of, self.config.telemetry_incident_after_s,
                                      rack_size=lambda rack: rack_sizes.get(rack, 0))
        # The switch end of each fabric link (topology `switchport`): its telemetry is judged as the link's.
        self.switch_ends = {sp: port for port, sp in self.mapper.topology.port_switchport.items()}
        self.cadence = Cadence(tick_s=self.config.interval_s, floor_s=self.config.health.stale_after_s)
        self._told_window = np.empty(0)  # the window health was last given, per cadence row
        self._window_places = None  # where those windows go in health (NodeTracking._tell_windows)
        self.hold = GaugeHold()
        self.idle = IdleTicks()
        self._layout_memo = None  # the last tick's names and how its rows split (_split_layout)
        self.grace_until: dict[str, float] = {}
        self.unplaced_hosts: dict[str, tuple[float, str]] = {}  # host -> (watched until, its last kernel line)
        self.boot_time: dict[str, float] = {}
        self.node_seen: dict[str, float] = {}
        self.node_window: dict[str, float] = {}  # the longest staleness window of a node's entities
        self.node_stale_since: dict[str, float] = {}
        self.ports_by_node: dict[str, set[str]] = {}
        self.reported: dict[str, State] = {}
        self.events_by_kind: dict[str, int] = {}
        self.known_entities: set[str] = set()
        self.node_of_entity: dict[str, str] = {}  # every known entity's node, so a tick splits no ids
        self.new_entities: list[dict] = []
        # what is known of each name of the last few name arrays (NodeTracking._name_facts)
        self._facts = PerNameArray(self._new_facts)
        self.shared_ingest: SharedIngest | None = None  # (evaluation: pipelines judging the same batches, share())
        self._shares_cadence = False  # (the shared ingest's cadence and gauge hold are this pipeline's)

    def share(self, ingest: SharedIngest) -> None:
        """Judge side by side with the other pipelines given ``ingest``: the parts of a tick that are alike for all of
        them are worked out once (:class:`SharedIngest`). Before the first tick."""
        self.shared_ingest = ingest
        self._shares_cadence = ingest.adopt(self)

    def use_model(self, model) -> None:
        """Swap the learned detectors for those of ``model`` (None: run without); the others keep their state."""
        self.detectors = [d for d in self.detectors if d.name not in registry.LEARNED]
        if model is not None and not (self.config.baseline or self.config.rules_only):
            self.detectors += model.detectors()
        self.config.model = model
        self.idle.forget()
        if self.features is None and any(d.needs_features for d in self.detectors):
            self.features = FeatureState()

    # ------------------------------------------------------------------------------------------

    def tick(self, now: float, batch: Batch, collector_state: dict[str, dict] | None = None) -> TickResult:
        """Process the batch of tick ``(now - interval, now]``.

        ``collector_state`` (live mode: where each collector stopped reading) is saved in the same
        transaction as the tick's findings and incidents, so a crash loses or repeats no input.
        """
        samples = batch.samples
        shared = self.shared_ingest.take(now, len(samples)) if self.shared_ingest is not None else None
        counters, sampled, xid_gauge = shared[:3] if shared is not None else self._split(samples)
        events = self.resolver.resolve(batch.events)
        gauge_xids = self.resolver.code_gauge_events(xid_gauge)
        if gauge_xids:
            extra = events_frame(gauge_xids)
            events = extra if events.empty else pd.concat([events, extra], ignore_index=True)
        events = self.resolver.merge_xids(events, now)
        events = self._set_apart_unplaced(now, events)
        if len(events):  # (most ticks have none: a frame's column costs more than the loop)
            for kind in events["kind"]:
                self.events_by_kind[kind] = self.events_by_kind.get(kind, 0) + 1

        names, seen = self._seen_entities(samples, now)
        self._track_nodes(now, names, seen)
        if shared is not None:
            increases = shared[3]
        else:
            increases = self.counters.update(counters)
            if self.shared_ingest is not None:
                self.shared_ingest.keep(now, len(samples), (counters, sampled, xid_gauge, increases))
        self._reboot_evidence(now, events, increases, sampled)
        grace = frozenset(n for n, t in self.grace_until.items() if t >= now)
        found = None
        if self.config.reuse_idle_evidence and self.features is None and not len(samples) and not len(events):
            found = self.idle.evidence_for(now, grace)
        if found is None:
            found = self._detect(now, events, increases, sampled, grace)
            if found is None:
                return TickResult([], [], len(events), len(samples))
        evidence = found + self._unplaced_watches(now)
        if self.switch_ends:
            evidence = self._both_ends(evidence)
        self.health.observe_names(names, seen, now)
        if len(events):
            self.health.observe(set(events["entity"]), now)
        transitions = self.health.update(now, evidence)
        findings = self._findings(now, transitions)
        for node in self._staleness_to_tell():
            # a node sampled every 5 minutes is not lost after one missed sample
            after = max(self.config.telemetry_incident_after_s, 1.5 * self.node_window.get(node, 0.0))
            self.incidents.on_stale(now, node, self.node_stale_since.get(node), after)
        self.incidents.escalate(now)
        changed = self.incidents.take_changed()
        if self.store is not None:
            self.store.upsert_entities(self.new_entities)
            self.new_entities = []
            self._replaced_parts(now)
            self.store.record_tick(
                [dict(f.as_dict(), reasons=list(f.reasons)) for f in findings], changed,
                [{"entity": f.entity, "state": f.state, "since": f.ts, "score": f.score, "reasons": f.reasons}
                 for f in findings], collector_state=collector_state, now=now,
            )
        if self.on_finding is not None:
            for f in findings:
                self.on_finding(f)
        return TickResult(findings, changed, len(events), len(samples))

    def _detect(self, now: float, events: pd.DataFrame, increases, sampled,
                grace: frozenset[str]) -> list[Evidence] | None:
        """Every detector run on the tick (None: features only); the evidence is remembered for the idle ticks
        after it (:class:`IdleTicks`)."""
        gauges = self._alike("gauges", now, len(sampled), lambda: self.hold.update(now, sampled, self.cadence))
        models = self.mapper.accelerator_model
        frames = None
        if self.features is not None:  # the streaming features take only this tick's readings
            fresh = gauges[gauges["fresh"]] if len(gauges) else gauges
            frames = self.features.update(now, increases, fresh, events, models)
        if self.config.features_only:
            return None
        tick_input = TickInput(now, events, increases, gauges, grace, frames, models, self.mapper.topology.node_rack)
        evidence = []
        for detector in self.detectors:
            evidence += detector.update(tick_input)
            take_unjudged = getattr(detector, "take_unjudged", None)
            if take_unjudged is not None:
                for (catalog, code), n in take_unjudged().items():
                    metrics.FAULT_CODES_UNJUDGED.labels(catalog, str(code)).inc(n)
        self.idle.ran(now, evidence, grace, list(self.detectors), lambda: self.hold.held_until(self.cadence))
        return evidence

    def _set_apart_unplaced(self, now: float, events: pd.DataFrame) -> pd.DataFrame:
        """Kernel events of a host a topology is given for and does not place are a configuration matter, not a
        failed part (issue 54: a journal's unknown host name became a failed incident): set apart from the detectors
        and held an hour as a watch on the host (:meth:`_unplaced_watches`)."""
        placed = self.mapper.topology.node_rack
        if not placed or not len(events):
            return events
        hosts = [str(e).split("/", 1)[0] for e in events["entity"].tolist()]  # (a tick's few: no pandas str ops)
        stray = np.fromiter((h not in placed for h in hosts), dtype=bool, count=len(hosts))
        if not stray.any():
            return events
        for i in np.flatnonzero(stray):
            self.unplaced_hosts[hosts[i]] = (now + 3600.0, str(events["message"].iloc[i] or "")[:160])
        return events[~stray].reset_index(drop=True)

    def _unplaced_watches(self, now: float) -> list[Evidence]:
        out = []
        for host, (until, message) in list(self.unplaced_hosts.items()):
            if until < now:
                del self.unplaced_hosts[host]
                continue
            out.append(Evidence(host, State.SUSPECT, "telemetry", [
                f"kernel events from host {host!r}, which the topology does not place: add it to topology.yaml "
                f"(watched, not acted on; the last: {message})"], detector="topology", latched=True))
        return out

    def _split(self, samples: pd.DataFrame) -> tuple[Table, Table, Table]:
        """Counter samples, per-(entity, metric) gauge last/max/mean over the tick, and the rows of the gauges that
        hold fault codes (``xid_last``, ``npu_error_code_*``; see :meth:`EventResolver.code_gauge_events`)."""
        if samples.empty:
            return _NO_COUNTERS, _NO_GAUGES, _NO_CODE_ROWS
        ent, ent_names = name_codes(samples["entity"])
        met, met_names = name_codes(samples["metric"])
        ts, value = np.asarray(samples["ts"]), np.asarray(samples["value"])  # (a DataFrame's or a Table's)
        unnamed = (ent < 0) | (met < 0)
        if unnamed.any():  # no reader makes these; never let one index the name tables from the end
            log.warning("tick: %d samples without an entity or metric name dropped", int(unnamed.sum()))
            metrics.INPUT_REJECTED.labels("samples", "no entity or metric name").inc(int(unnamed.sum()))
            keep = ~unnamed
            ent, met, ts, value = ent[keep], met[keep], ts[keep], value[keep]
        layout = self._split_layout(ent, ent_names, met, met_names)
        ctr, xid, g, inverse, uniq, gauge_ent, gauge_met = layout
        counters = Table({"ts": ts[ctr[0]], "entity": ctr[1], "metric": ctr[2], "value": value[ctr[0]]})
        code_rows = Table({"entity": xid[1], "metric": xid[2], "ts": ts[xid[0]], "value": value[xid[0]]})
        if g is None:
            return counters, _NO_GAUGES, code_rows
        values = value[g]
        if len(uniq) == len(inverse):  # one reading of each series (most ticks): it is its own last, max and mean
            last = np.empty(len(uniq))
            last[inverse] = values
            peak = last.copy()
            mean = np.where(np.isfinite(last), 0.0 + last, np.nan)  # (as the sum by series makes it: -0.0 is 0.0)
        else:
            last, peak = last_and_max(inverse, len(uniq), values)
            mean = group_mean(inverse, len(uniq), values)
        gauges = Table({"entity": gauge_ent, "metric": gauge_met, "last": last, "max": peak, "mean": mean})
        return counters, gauges, code_rows

    def _split_layout(self, ent: np.ndarray, ent_names: np.ndarray, met: np.ndarray, met_names: np.ndarray) -> tuple:
        """Which rows of the tick are counters, fault-code gauges and gauges (row indices, with their name columns),
        and the gauge rows' series (each row's series number, the series' keys, their name columns). It depends on
        the rows' names alone, so it is kept while a tick's names come as the last one's (a fleet sampled every
        tick sends the same series in the same order tick after tick), and its name columns are then the same
        read-only objects: a detector may key its own work on them."""
        memo = self._layout_memo
        if memo is not None and memo[0] is ent_names and memo[1] is met_names and np.array_equal(memo[2], ent) \
                and np.array_equal(memo[3], met):
            return memo[4]
        # each metric's parts, counter (bit 1) and fault-code gauge (bit 2) or else gauge, looked up once a row
        kind = (names_mask(met_names, _IsCounter).astype(np.int8) | 2 * names_mask(met_names, _IsCodeGauge))[met]
        keep = keeps_layout(len(ent))

        def rows_of(mask: np.ndarray) -> np.ndarray:  # indices where kept (taken again each tick), else the mask
            return np.flatnonzero(mask) if keep else mask

        def part(rows: np.ndarray) -> tuple[np.ndarray, Names, Names]:
            return rows, Names(read_only(ent[rows]), ent_names), Names(read_only(met[rows]), met_names)

        ctr, xid = part(rows_of((kind & 1).astype(bool))), part(rows_of(kind >= 2))
        g = rows_of(kind == 0)
        if not (g.any() if g.dtype == bool else len(g)):
            layout = (ctr, xid, None, None, None, None, None)
        else:
            # Rows are in time order within the tick: the last row of an (entity, metric) holds its last value.
            width = len(met_names) + 1
            key = ent[g].astype(np.int64) * width + met[g]
            inverse, uniq = group_keys(key, len(ent_names) * width)
            layout = (ctr, xid, g, inverse, uniq, Names(read_only(uniq // width), ent_names),
                      Names(read_only(uniq % width), met_names))
        self._layout_memo = (ent_names, met_names, ent.copy(), met.copy(), layout) if keep else None
        return layout

    def _both_ends(self, evidence: list[Evidence]) -> list[Evidence]:
        """A link is judged from both ends: what a detector says of a switch port is said of the node port
        at the other end of its cable, naming the switch end (symbol errors are counted by the receiver,
        so a failing node-side transmitter shows only at the switch)."""
        out = []
        for ev in evidence:
            port = self.switch_ends.get(ev.entity)
            if port is None:
                out.append(ev)
                continue
            reasons = [f"switch end {ev.entity}: {r}" for r in ev.reasons]
            out.append(Evidence(port, ev.level, ev.category, reasons, ev.detector, ev.hard, ev.score))
        return out

    def _findings(self, now: float, transitions: list[Transition]) -> list[Finding]:
        findings: list[Finding] = []
        touched_nodes: set[str] = set()
        for t in transitions:
            kind = entity_kind(t.entity)
            touched_nodes.add(node_of(t.entity))
            if kind == "node":
                continue  # reported through the roll-up below
            if t.new != State.UNKNOWN:
                self.incidents.on_entity(now, t.entity, t.new, t.category, t.reasons)
            self._report(findings, now, t.entity, kind, t.new, t.score, t.detector, t.reasons)
        if touched_nodes:
            rolled = rollup_nodes(self.health, sorted(touched_nodes), self.ports_by_node)
            for node, r in rolled.items():
                own = self.health.state_of(node)
                escalate = own >= State.SUBHEALTHY or r.bad_accelerators >= 2 or "fabric" in r.category
                prev = self.reported.get(node, State.HEALTHY)
                if r.state != prev and r.state != State.UNKNOWN:
                    self.incidents.on_node(now, node, r.state, r.category, r.reasons, escalate)
                detector = "rules" if own >= State.SUSPECT else "rollup"
                self._report(findings, now, node, "node", r.state, r.score, detector,
                             r.reasons or ["recovered"])
        return findings

    def _report(self, out: list[Finding], now: float, entity: str, kind: str, state: State, score: float,
                detector: str, reasons: list[str]) -> None:
        """Append a finding when the visible state changed (unknown is not a finding)."""
        if state == State.UNKNOWN:
            return
        prev = self.reported.get(entity, State.HEALTHY)
        if state == prev:
            return
        self.reported[entity] = state
        out.append(Finding(now, entity, kind, state.label, float(score), detector, list(reasons)))
