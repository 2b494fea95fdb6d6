"""What the pipeline carries across ticks, restarts, failovers and reloads: its warm state (the detectors' and its own
streaming memory, saved by daemon/judgement/warmstate.py), what it restores from the store (open incidents, the
states last reported), and forgetting a node an operator repaired.

A part of :class:`daemon.judgement.pipeline.Pipeline`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from daemon.judgement.health import EntityHealth
from daemon.judgement.incidents import CLUSTER_KINDS, Incident
from daemon.store import Store
from detectors import registry
from detectors.contract import Evidence
from detectors.rules import RuleDetector
from detectors.schema import State

log = logging.getLogger("raswarden.pipeline")

# The pipeline's own streaming memory in a warm state (Pipeline.warm_state): not the resolver's two-minute merge
# window (it holds the mapper) nor the incidents (the store's).
_WARM = ("counters", "cadence", "_told_window", "hold", "features", "grace_until", "boot_time", "node_seen",
         "node_window", "node_stale_since", "ports_by_node", "events_by_kind", "known_entities", "node_of_entity",
         "reported")
_WARM_HEALTH = ("entities", "freshness")  # not its config: the running daemon's


class PipelineMemory:
    """The pipeline's memory: saved, taken up, restored, forgotten."""

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
        newer). A detector this pipeline does not run is left out; returns the names of the detectors taken up. A
        pipeline judging side by side with others (:meth:`Pipeline.share`) stops: its state is no longer theirs."""
        self.shared_ingest, self._shares_cadence = None, False
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
        self.idle.forget()
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
        self.idle.forget()
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
        self.idle.forget()
