"""The pipeline's view of nodes between detectors: which entities it has seen (registered in the store once),
each node's sampling window and staleness, reboot evidence (a boot, a new boot time, counters reset at once) and the
grace after it, and parts replaced in their slot (a new identity).

A part of :class:`daemon.judgement.pipeline.Pipeline`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pandas as pd

from daemon import metrics
from detectors.schema import entity_kind, name_codes, names_in, names_mask, node_of

log = logging.getLogger("raswarden.pipeline")
T = TypeVar("T")
_NO_NAMES = np.empty(0, dtype=object)
_NO_CODES = np.empty(0, dtype=np.int64)


def _isclose(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.isclose(a, b)`` (its default tolerances; the same answer) without its per-call checks."""
    with np.errstate(invalid="ignore"):
        return (np.abs(a - b) <= 1e-8 + 1e-5 * np.abs(b)) & np.isfinite(b) | (a == b)


class _NameFacts:
    """Per name of one name array: whether it is a registered entity, and its node (see
    :meth:`NodeTracking._name_facts`)."""

    def __init__(self, names: np.ndarray, known: set[str]):
        self.names, self.known = names, known
        listed = names.tolist()
        self.registered = np.fromiter((n in known for n in listed), dtype=bool, count=len(listed))
        node_names = [node_of(n) for n in listed]
        self.node_list = sorted(set(node_names))
        self.node_array = np.asarray(self.node_list, dtype=object)
        code = {n: i for i, n in enumerate(self.node_list)}
        self.node_code = np.fromiter((code[n] for n in node_names), dtype=np.int64, count=len(listed))

    def nodes_of(self, codes: np.ndarray) -> np.ndarray:
        """The nodes of the names ``codes``, each once, sorted: their codes in :attr:`node_array`."""
        present = np.zeros(len(self.node_list), dtype=bool)
        present[self.node_code[codes]] = True
        return np.flatnonzero(present)


class _WindowPlaces:
    """Where the staleness windows of cadence rows go in one health's :class:`~daemon.judgement.freshness.Freshness`:
    each entity's own row (-1: the entity is a node, whose window is its longest entity's) and its node's."""

    def __init__(self, freshness) -> None:
        self.freshness = freshness
        self.own = np.empty(0, dtype=np.int64)  # per cadence row; -2: not placed yet
        self.node = np.empty(0, dtype=np.int64)  # per cadence row: its node's place in nodes
        self.nodes: list[str] = []
        self.node_row: list[int] = []  # each node's freshness row
        self._node_code: dict[str, int] = {}

    def of(self, rows: np.ndarray, cadence) -> tuple[np.ndarray | None, np.ndarray]:
        """The entity and node places of cadence ``rows`` (None: an entity or node health has no row for yet)."""
        if len(self.own) < len(cadence.last):
            grow = len(cadence.last) - len(self.own)
            self.own = np.concatenate((self.own, np.full(grow, -2, dtype=np.int64)))
            self.node = np.concatenate((self.node, np.zeros(grow, dtype=np.int64)))
        unplaced = rows[self.own[rows] == -2]
        if len(unplaced) and not self._place(np.unique(unplaced), cadence):
            return None, self.node
        return self.own[rows], self.node[rows]

    def _place(self, rows: np.ndarray, cadence) -> bool:
        row_of = self.freshness.row_of
        names = cadence.index.keys[rows].tolist()
        own, node = [], []
        for entity in names:
            name = node_of(entity)
            at = self._node_code.get(name)
            if at is None:
                if name not in row_of:
                    return False
                at = self._node_code[name] = len(self.nodes)
                self.nodes.append(name)
                self.node_row.append(row_of[name])
            if entity != name and entity not in row_of:
                return False
            own.append(-1 if entity == name else row_of[entity])
            node.append(at)
        self.own[rows] = own
        self.node[rows] = node
        return True


class NodeTracking:
    """Nodes and entities as the pipeline tracks them tick by tick."""

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

    def _seen_entities(self, samples: pd.DataFrame, now: float) -> tuple[np.ndarray, np.ndarray]:
        """The entities sampled this tick (switch ends left out), as a name array and the codes of the sampled ones
        in it; learns their sampling intervals and registers the new ones."""
        if samples.empty:
            return _NO_NAMES, _NO_CODES
        # (one observation a tick of a cadence shared with pipelines side by side)
        names, present, rows = self._alike("sampled", now, len(samples), lambda: self._observe_sampling(samples))
        self._learn_windows(names[present], rows)
        if self.switch_ends:  # a switch port is the far end of a node's link, not an entity of a node
            present = present[~names_mask(names, self.switch_ends)[present]]
        facts = self._name_facts(names)
        new = present[~facts.registered[present]]
        if len(new):
            for e in sorted(set(names[new].tolist()).difference(self.known_entities)):
                self._register(e, now)
            facts.registered[new] = True
        return names, present

    def _alike(self, part: str, now: float, rows: int, work: Callable[[], T]) -> T:
        """``work()``, or what a pipeline judging side by side with this one worked out for the tick when they share
        the cadence and gauge hold it depends on (:class:`~daemon.judgement.pipeline.SharedIngest`)."""
        return self.shared_ingest.once(part, now, rows, work) if self._shares_cadence else work()

    def _observe_sampling(self, samples: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The tick's entity names, the codes of those sampled in it and their cadence rows, each sampling observed
        (its last stamp) by the cadence."""
        codes, names = name_codes(samples["entity"])
        ok = codes >= 0
        last = np.full(len(names), -np.inf)
        np.maximum.at(last, codes[ok], np.asarray(samples["ts"])[ok])
        present = np.flatnonzero(last > -np.inf)
        rows = self.cadence.observe_rows(self.cadence.rows_of_names(names)[present], last[present])
        return names, present, rows

    def _name_facts(self, names: np.ndarray) -> _NameFacts:
        """What is known of each name of a name array, kept while the same array comes (see ``name_codes``) and
        the pipeline's set of known entities is the same object (a warm state taken up replaces it)."""
        facts = self._facts.get(names)  # (made by _new_facts)
        if facts.known is not self.known_entities:
            self._facts.clear()
            facts = self._facts.get(names)
        return facts

    def _new_facts(self, names: np.ndarray) -> _NameFacts:
        return _NameFacts(names, self.known_entities)

    def _learn_windows(self, names: np.ndarray, rows: np.ndarray) -> None:
        """Give health the staleness window each entity's sampling interval implies, where it changed."""
        window = self.cadence.window_of(rows)
        told = self._told_window
        if len(told) < len(self.cadence.last):
            told = self._told_window = np.concatenate((told, np.full(len(self.cadence.last) - len(told), np.nan)))
        changed = np.flatnonzero(~_isclose(told[rows], window))
        if not len(changed):
            return
        told[rows[changed]] = window[changed]
        # (a node's own series, node_exporter's, are one of its entities: the node's window stays its longest,
        # or a node whose GPUs are sampled every 5 minutes went unknown between their samples once its own
        # series' learned interval moved after theirs)
        if not self._tell_windows(rows[changed], window[changed]):
            self._tell_windows_one_by_one(names[changed], window[changed])

    def _tell_windows_one_by_one(self, names: np.ndarray, window: np.ndarray) -> None:
        freshness, node_window = self.health.freshness, self.node_window
        for entity, w in zip(names.tolist(), window.tolist()):
            node = node_of(entity)
            if w > node_window.get(node, 0.0):
                node_window[node] = w
                freshness.set_window(node, w)
            if entity != node:
                freshness.set_window(entity, w)

    def _tell_windows(self, rows: np.ndarray, window: np.ndarray) -> bool:
        """:meth:`_tell_windows_one_by_one` as arrays (jittered scrapes move hundreds of windows a tick), when health
        already has a row for each entity and node (else False: its rows are then made one by one, in that order)."""
        places = self._window_places
        if places is None or places.freshness is not self.health.freshness:
            places = self._window_places = _WindowPlaces(self.health.freshness)
        own, node = places.of(rows, self.cadence)
        if own is None:
            return False
        mine = own >= 0  # (-1: the node's own series)
        places.freshness.window[own[mine]] = window[mine]
        longest = np.full(len(places.nodes), -np.inf)
        np.maximum.at(longest, node, window)
        node_window = self.node_window
        for k in np.flatnonzero(longest > -np.inf).tolist():
            name, w = places.nodes[k], float(longest[k])
            if w > node_window.get(name, 0.0):
                node_window[name] = w
                places.freshness.window[places.node_row[k]] = w
        return True

    def _register(self, entity: str, now: float) -> None:
        self.known_entities.add(entity)
        kind = entity_kind(entity)
        node = self.node_of_entity[entity] = node_of(entity)
        if kind == "port":
            self.ports_by_node.setdefault(node, set()).add(entity)
        self.new_entities.append({"id": entity, "kind": kind, "node": node,
                                  "rack": self.mapper.topology.rack_of(node), "first_seen": now, "attrs": {}})

    def _track_nodes(self, now: float, names: np.ndarray, seen: np.ndarray) -> None:
        """Node freshness: a node is fresh while any of its entities (``names[seen]``) is, stale after its longest
        window."""
        if len(seen):
            facts = self._name_facts(names)
            node_codes = facts.nodes_of(seen)
            nodes = facts.node_array[node_codes].tolist()
        else:
            nodes = []
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
        if nodes:
            self.health.observe_names(facts.node_array, node_codes, now)

    def _staleness_to_tell(self) -> list[str]:
        """The nodes whose telemetry incident may open or close now, sorted: those without telemetry for a while and
        those with one open (for any other node ``IncidentBook.on_stale`` does nothing; a pass over every node each
        tick was a twentieth of a 100,000-accelerator tick)."""
        suffix = "|telemetry"
        told = set(self.node_stale_since)
        told.update(fp[:-len(suffix)] for fp in self.incidents.open if fp.endswith(suffix))
        return sorted(n for n in told if n in self.node_seen)

    def _reboot_evidence(self, now: float, events: pd.DataFrame, increases: pd.DataFrame,
                         gauges: pd.DataFrame) -> None:
        """A reboot grace (port state and link-down rules quiet for ``reboot_grace_s``) from evidence that a node
        restarted, never from a gap in its telemetry (a node sampled every 5 minutes has one between any two
        samples): a ``boot`` event (the kernel's banner, a new journal boot id), a new ``node_boot_time_seconds``,
        or the counters of several of its entities resetting together. One counter cleared by an operator
        (``perfquery -R`` on one port) graces nothing."""
        grace = self.config.reboot_grace_s
        if len(events):
            boot = events["kind"].to_numpy(object) == "boot"
            if boot.any():  # (rare: the frame is cut only then)
                boots = events[boot]
                for entity, ts in zip(boots["entity"], boots["ts"]):
                    self._grace(node_of(entity), float(ts) + grace)
        if len(gauges) and names_in(gauges["metric"], ("boot_time_s",)).any():
            part = gauges[names_in(gauges["metric"], ("boot_time_s",))]
            for node, booted in zip(part["entity"].tolist(), part["last"].tolist()):
                before = self.boot_time.get(node)
                self.boot_time[node] = booted
                if before is not None and booted - before > 60.0:
                    self._grace(node, booted + grace)
        if len(increases) and (np.asarray(increases["resets"]) > 0).any():
            entity = np.asarray(increases["entity"], dtype=object)
            node = np.array([self.node_of_entity.get(e) or node_of(e) for e in entity], dtype=object)
            reset = np.asarray(increases["resets"]) > 0
            for n in sorted(set(node[reset])):
                mine = node == n
                reset_entities = len(set(entity[mine & reset]))
                if reset_entities >= 2 and (mine & reset).sum() >= 0.5 * mine.sum():
                    self._grace(n, now + grace)

    def _grace(self, node: str, until: float) -> None:
        if until > self.grace_until.get(node, -math.inf):
            self.grace_until[node] = until
