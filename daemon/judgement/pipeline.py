"""The tick: one batch of samples and events in, health transitions, findings and incidents out.

The same :meth:`Pipeline.tick` runs in live, replay and simulation mode (docs/architecture.md §1); only the
clock and the source of batches differ. Nothing in here reads a wall clock.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, deque
from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np
import pandas as pd

from daemon import metrics
from daemon.ingest.batch import Batch
from daemon.judgement.health import EntityHealth, HealthConfig, HealthTracker, Transition, rollup_nodes
from daemon.judgement.incidents import CLUSTER_KINDS, Incident, IncidentBook
from daemon.ingest.naming import SeriesMapper
from daemon.judgement.resolve import EventResolver, is_code_gauge
from daemon.store import Store
from detectors.cadence import Cadence
from detectors.counters import CounterTracker
from detectors.grouping import group_keys, group_mean, last_and_max
from detectors.features import FeatureState
from detectors.hold import GaugeHold
from detectors import registry
from detectors.contract import TICK_S, Detector, Evidence, TickInput
from detectors.rules import RuleDetector
from detectors.schema import (State, entity_kind, events_frame, frame, is_counter, name_codes, name_column, names_in,
                              names_mask, node_of)

log = logging.getLogger("raswarden.pipeline")

# The pipeline's own streaming memory in a warm state (Pipeline.warm_state): not the resolver's two-minute merge
# window (it holds the mapper) nor the incidents (the store's).
_WARM = ("counters", "cadence", "_told_window", "hold", "features", "grace_until", "boot_time", "node_seen",
         "node_window", "node_stale_since", "ports_by_node", "events_by_kind", "known_entities", "node_of_entity",
         "reported")
_WARM_HEALTH = ("entities", "last_seen", "stale_after")  # not its config: the running daemon's


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


class Pipeline:
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
        self.hold = GaugeHold()
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

    def use_model(self, model) -> None:
        """Swap the learned detectors for those of ``model`` (None: run without); the others keep their state."""
        self.detectors = [d for d in self.detectors if d.name not in registry.LEARNED]
        if model is not None and not (self.config.baseline or self.config.rules_only):
            self.detectors += model.detectors()
        self.config.model = model
        if self.features is None and any(d.needs_features for d in self.detectors):
            self.features = FeatureState()

    # ------------------------------------------------------------------------------------------
    def warm_state(self) -> dict:
        """What this pipeline has learned from the telemetry, which a new one would take hours to learn again:
        counters' last values, sampling intervals, held gauges, features, the streaming detectors (the trend
        detector's records, the peer detector's baselines; not the learned ones, which a model brings), reboot
        graces and health's hysteresis. Saved and checked by :mod:`daemon.judgement.warmstate`; incidents are the
        store's."""
        state = {name: getattr(self, name) for name in _WARM}
        state["health"] = {name: getattr(self.health, name) for name in _WARM_HEALTH}
        state["detectors"] = {d.name: d for d in self.detectors if d.name not in registry.LEARNED}
        return state

    def take_warm_state(self, state: dict) -> list[str]:
        """Take up another pipeline's :meth:`warm_state` (call :meth:`restore` after it: the store's states are
        newer). A detector this pipeline does not run is left out; returns the names of the detectors taken up."""
        for name in _WARM:
            if name == "features" and (self.features is None or state[name] is None):
                continue  # one of the two runs no detector that reads the features: they start afresh
            setattr(self, name, state[name])
        for name in _WARM_HEALTH:
            setattr(self.health, name, state["health"][name])
        taken = []
        for i, detector in enumerate(self.detectors):
            saved = state["detectors"].get(detector.name)
            if saved is not None and type(saved) is type(detector):
                self.detectors[i] = saved
                taken.append(detector.name)
        if self.rules is not None:
            self.rules = next(d for d in self.detectors if isinstance(d, RuleDetector))
        return taken

    def restore(self, store: Store, owns: Callable[[str], bool] = lambda entity: True) -> tuple[int, int]:
        """Take up where an earlier daemon on this store stopped: its open incidents and non-healthy states.

        A restarted daemon then updates the incidents it had open (same ids, so no second alert or action)
        and a failed GPU stays failed until it is clean for as long as it would have had to be. Streaming
        feature and counter state comes from a warm state taken up before (:meth:`take_warm_state`), or warms up
        again from the next samples. Where a warm state's health says what the store says, the warm record
        stays (its detectors remember why); where they differ the store is newer and wins. ``owns``: whether an
        entity is this shard's (daemon/shards.py; the store is the cluster's). Returns (incidents, entities)
        restored.
        """
        rows = [r for r in store.incidents("open") if owns(r.entity) and r.kind not in CLUSTER_KINDS]
        category_of: dict[str, str] = {}
        for row in rows:
            inc = Incident.from_row(row)
            self.incidents.open[row.fingerprint] = inc
            category_of.setdefault(row.entity, row.category)
        restored = 0
        n = self.config.health.enter_n
        stored = {h.entity: h for h in store.health() if owns(h.entity)}
        for entity, warm in list(self.health.entities.items()):  # flagged when the warm state was saved, no more
            row = stored.get(entity)
            if warm.state >= State.SUSPECT and (row is None or State.parse(row.state) == State.HEALTHY):
                del self.health.entities[entity]
                self.reported.pop(entity, None)
        for h in stored.values():
            state = State.parse(h.state)
            if state in (State.HEALTHY, State.UNKNOWN):
                continue
            self.reported[h.entity] = state
            warm = self.health.entities.get(h.entity)
            if warm is not None and warm.state == state:
                restored += 1
                continue
            top = Evidence(h.entity, state, category_of.get(h.entity, ""), list(h.reasons), "restored", False,
                           h.score)
            self.health.entities[h.entity] = EntityHealth(state=state, since=h.since,
                                                          window=deque([int(state)] * n, maxlen=n), top=top,
                                                          restored=True)
            restored += 1
        # what the store alone says (a warm state's detectors remember their own flags)
        flagged = {e for e, h in self.health.entities.items() if h.state >= State.SUBHEALTHY and h.restored}
        for detector in self.detectors:
            detector.restore(flagged)
        return len(rows), restored

    def forget(self, scope: str) -> None:
        """Parts were replaced: a node's (an operator says it was repaired) or one (a GPU with a new identity in its
        slot). The features and every detector drop what they remember of the entities in ``scope``, so the new
        parts are judged on their own telemetry and their neighbours keep their records. Health follows from the
        next ticks' evidence, through the usual hysteresis."""
        if self.features is not None:
            self.features.forget(scope)
        for detector in self.detectors:
            detector.forget(scope)

    def tick(self, now: float, batch: Batch, collector_state: dict[str, dict] | None = None) -> TickResult:
        """Process the batch of tick ``(now - interval, now]``.

        ``collector_state`` (live mode: where each collector stopped reading) is saved in the same
        transaction as the tick's findings and incidents, so a crash loses or repeats no input.
        """
        samples = batch.samples
        counters, sampled, xid_gauge = self._split(samples)
        events = self.resolver.resolve(batch.events)
        gauge_xids = self.resolver.code_gauge_events(xid_gauge)
        if gauge_xids:
            extra = events_frame(gauge_xids)
            events = extra if events.empty else pd.concat([events, extra], ignore_index=True)
        events = self.resolver.merge_xids(events, now)
        events = self._set_apart_unplaced(now, events)
        for kind in events["kind"]:
            self.events_by_kind[kind] = self.events_by_kind.get(kind, 0) + 1

        seen = self._seen_entities(samples, now)
        self._track_nodes(now, seen, events)
        increases = self.counters.update(counters)
        gauges = self.hold.update(now, sampled, self.cadence)
        self._reboot_evidence(now, events, increases, sampled)
        grace = frozenset(n for n, t in self.grace_until.items() if t >= now)

        models = self.mapper.accelerator_model
        frames = None
        if self.features is not None:  # the streaming features take only this tick's readings
            fresh = gauges[gauges["fresh"].to_numpy(dtype=bool)] if len(gauges) else gauges
            frames = self.features.update(now, increases, fresh, events, models)
        if self.config.features_only:
            return TickResult([], [], len(events), len(samples))
        tick_input = TickInput(now, events, increases, gauges, grace, frames, models, self.mapper.topology.node_rack)
        evidence = []
        for detector in self.detectors:
            evidence += detector.update(tick_input)
            take_unjudged = getattr(detector, "take_unjudged", None)
            if take_unjudged is not None:
                for (catalog, code), n in take_unjudged().items():
                    metrics.FAULT_CODES_UNJUDGED.labels(catalog, str(code)).inc(n)
        evidence += self._unplaced_watches(now)
        if self.switch_ends:
            evidence = self._both_ends(evidence)
        self.health.observe(seen, now)
        self.health.observe(set(events["entity"]), now)
        transitions = self.health.update(now, evidence)
        findings = self._findings(now, transitions)
        for node in sorted(self.node_seen):
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

    def _replaced_parts(self, now: float) -> None:
        """Accelerators whose identity (UUID, serial) changed in their slot were replaced: the detectors forget
        their node's history (the new part is judged on its own telemetry, no inherited baseline), the old
        identity stays in the entity's attributes (and its repair orders keep its history, for the RMA)."""
        seen = self.mapper.take_identities(now)
        if not seen:
            return
        for entity, old, new in self.store.note_identities(seen):
            log.warning("%s was replaced: %s, now %s; its detectors start afresh", entity, old, new)
            metrics.PARTS_REPLACED.inc()
            self.forget(entity)  # that part alone: its neighbours keep their records

    # ------------------------------------------------------------------------------------------
    def _set_apart_unplaced(self, now: float, events: pd.DataFrame) -> pd.DataFrame:
        """Kernel events of a host a topology is given for and does not place are a configuration matter, not a
        failed part (issue 54: a journal's unknown host name became a failed incident): set apart from the detectors
        and held an hour as a watch on the host (:meth:`_unplaced_watches`)."""
        placed = self.mapper.topology.node_rack
        if not placed or not len(events):
            return events
        hosts = events["entity"].astype(str).str.split("/", n=1).str[0]
        stray = ~hosts.isin(placed).to_numpy(dtype=bool)
        if not stray.any():
            return events
        for host, message in zip(hosts[stray], events["message"][stray]):
            self.unplaced_hosts[host] = (now + 3600.0, str(message or "")[:160])
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

    def _split(self, samples: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """Counter samples, per-(entity, metric) gauge last/max/mean over the tick, and the rows of the gauges that
        hold fault codes (``xid_last``, ``npu_error_code_*``; see :meth:`EventResolver.code_gauge_events`)."""
        if samples.empty:
            empty = frame({"entity": [], "metric": [], "last": [], "max": [], "mean": []})
            return samples, empty, frame({"entity": [], "metric": [], "ts": [], "value": []})
        ent, ent_names = name_codes(samples["entity"])
        met, met_names = name_codes(samples["metric"])
        unnamed = (ent < 0) | (met < 0)
        if unnamed.any():  # no reader makes these; never let one index the name tables from the end
            log.warning("tick: %d samples without an entity or metric name dropped", int(unnamed.sum()))
            metrics.INPUT_REJECTED.labels("samples", "no entity or metric name").inc(int(unnamed.sum()))
            samples = samples[~unnamed]
            ent, met = ent[~unnamed], met[~unnamed]
        counter_cat = np.array([is_counter(m) for m in met_names], dtype=bool)
        is_ctr = counter_cat[met]
        ts, value = samples["ts"].to_numpy(), samples["value"].to_numpy()
        entity, metric = samples["entity"], samples["metric"]
        counters = frame({"ts": ts[is_ctr], "entity": name_column(ent[is_ctr], ent_names, entity),
                          "metric": name_column(met[is_ctr], met_names, metric), "value": value[is_ctr]})
        code_cat = np.array([is_code_gauge(m) for m in met_names], dtype=bool)
        is_xid = code_cat[met]
        xid = frame({"entity": name_column(ent[is_xid], ent_names, entity),
                     "metric": name_column(met[is_xid], met_names, metric), "ts": ts[is_xid], "value": value[is_xid]})
        g = ~is_ctr & ~is_xid
        if not g.any():
            return counters, frame({"entity": [], "metric": [], "last": [], "max": [], "mean": []}), xid
        # Rows are in time order within the tick: the last row of an (entity, metric) holds its last value.
        key = ent[g].astype(np.int64) * (len(met_names) + 1) + met[g]
        values = value[g]
        inverse, uniq = group_keys(key, len(ent_names) * (len(met_names) + 1))
        last, peak = last_and_max(inverse, len(uniq), values)
        gauges = frame({"entity": name_column(uniq // (len(met_names) + 1), ent_names, entity),
                        "metric": name_column(uniq % (len(met_names) + 1), met_names, metric),
                        "last": last, "max": peak, "mean": group_mean(inverse, len(uniq), values)})
        return counters, gauges, xid

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

    def _seen_entities(self, samples: pd.DataFrame, now: float) -> list[str]:
        """The entities sampled this tick (switch ends left out); learns their sampling intervals."""
        if samples.empty:
            return []
        codes, names = name_codes(samples["entity"])
        ok = codes >= 0
        last = np.full(len(names), -np.inf)
        np.maximum.at(last, codes[ok], samples["ts"].to_numpy()[ok])
        present = np.flatnonzero(last > -np.inf)
        rows = self.cadence.observe(names[present], last[present])
        self._learn_windows(names[present], rows)
        if self.switch_ends:  # a switch port is the far end of a node's link, not an entity of a node
            present = present[~names_mask(names, self.switch_ends)[present]]
        seen = names[present].tolist()
        for e in sorted(set(seen).difference(self.known_entities)):
            self._register(e, now)
        return seen

    def _learn_windows(self, names: np.ndarray, rows: np.ndarray) -> None:
        """Give health the staleness window each entity's sampling interval implies, where it changed."""
        window = self.cadence.window_of(rows)
        told = self._told_window
        if len(told) < len(self.cadence.last):
            told = self._told_window = np.concatenate((told, np.full(len(self.cadence.last) - len(told), np.nan)))
        changed = np.flatnonzero(~np.isclose(told[rows], window))
        if not len(changed):
            return
        told[rows[changed]] = window[changed]
        stale_after = self.health.stale_after
        for entity, w in zip(names[changed].tolist(), window[changed].tolist()):
            stale_after[entity] = w
            node = node_of(entity)
            if w > self.node_window.get(node, 0.0):
                self.node_window[node] = stale_after[node] = w

    def _register(self, entity: str, now: float) -> None:
        self.known_entities.add(entity)
        kind = entity_kind(entity)
        node = self.node_of_entity[entity] = node_of(entity)
        if kind == "port":
            self.ports_by_node.setdefault(node, set()).add(entity)
        self.new_entities.append({"id": entity, "kind": kind, "node": node,
                                  "rack": self.mapper.topology.rack_of(node), "first_seen": now, "attrs": {}})

    def _track_nodes(self, now: float, seen: list[str], events: pd.DataFrame) -> None:
        """Node freshness: a node is fresh while any of its entities is, stale after its longest window."""
        node_of_entity = self.node_of_entity
        nodes = set(map(node_of_entity.__getitem__, seen))
        default = self.config.health.stale_after_s
        for node in nodes:
            self.node_seen[node] = now
            self.node_stale_since.pop(node, None)
            if node not in self.known_entities:
                self._register(node, now)
        for node, last in self.node_seen.items():
            if now - last > self.node_window.get(node, default) and node not in self.node_stale_since:
                self.node_stale_since[node] = last
        # A node is fresh when any of its entities is: mark the node itself observed.
        self.health.observe(nodes, now)

    def _reboot_evidence(self, now: float, events: pd.DataFrame, increases: pd.DataFrame,
                         gauges: pd.DataFrame) -> None:
        """A reboot grace (port state and link-down rules quiet for ``reboot_grace_s``) from evidence that a node
        restarted, never from a gap in its telemetry (a node sampled every 5 minutes has one between any two
        samples): a ``boot`` event (the kernel's banner, a new journal boot id), a new ``node_boot_time_seconds``,
        or the counters of several of its entities resetting together. One counter cleared by an operator
        (``perfquery -R`` on one port) graces nothing."""
        grace = self.config.reboot_grace_s
        if len(events):
            boots = events[events["kind"].to_numpy(object) == "boot"]
            for entity, ts in zip(boots["entity"], boots["ts"]):
                self._grace(node_of(entity), float(ts) + grace)
        if len(gauges) and names_in(gauges["metric"], ("boot_time_s",)).any():
            part = gauges[names_in(gauges["metric"], ("boot_time_s",))]
            for node, booted in zip(part["entity"].tolist(), part["last"].tolist()):
                before = self.boot_time.get(node)
                self.boot_time[node] = booted
                if before is not None and booted - before > 60.0:
                    self._grace(node, booted + grace)
        if len(increases) and (increases["resets"].to_numpy() > 0).any():
            entity = increases["entity"].to_numpy(object)
            node = np.array([self.node_of_entity.get(e) or node_of(e) for e in entity], dtype=object)
            reset = increases["resets"].to_numpy() > 0
            for n in sorted(set(node[reset])):
                mine = node == n
                reset_entities = len(set(entity[mine & reset]))
                if reset_entities >= 2 and (mine & reset).sum() >= 0.5 * mine.sum():
                    self._grace(n, now + grace)

    def _grace(self, node: str, until: float) -> None:
        if until > self.grace_until.get(node, -math.inf):
            self.grace_until[node] = until

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
            bad_accelerators = Counter(node_of(e) for e, h in self.health.entities.items()
                                       if h.state >= State.SUBHEALTHY and entity_kind(e) == "accelerator")
            for node, r in rolled.items():
                own = self.health.state_of(node)
                bad_children = bad_accelerators[node]
                escalate = own >= State.SUBHEALTHY or bad_children >= 2 or "fabric" in r.category
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
