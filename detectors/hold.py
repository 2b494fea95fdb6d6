"""Gauge readings held while they are current, so a level rule sees a port DOWN between two 5-minute samples.

A tick's samples hold each gauge only where it was sampled in that tick. Sampled every 5 minutes, a port's
DOWN state would be there one tick in ten, and the health hysteresis (2 of 3 ticks) would never see it twice.
A reading stays what the entity's telemetry says until the next sample or until its data is no longer current
(:class:`~detectors.cadence.Cadence`), as Prometheus' lookback holds a sample. :meth:`GaugeHold.update` returns
every current reading each tick, marked ``fresh`` where it was sampled in this tick: level rules read them all,
while the streaming features take only fresh ones (an EWMA must not count one reading ten times).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from detectors.cadence import Cadence
from detectors.grouping import SeriesSlots
from detectors.schema import name_codes
from detectors.table import NO_NAMES, Names, Table, keeps_layout, read_only

COLUMNS = ("entity", "metric", "last", "max", "mean", "fresh")
_EMPTY = Table({"entity": NO_NAMES, "metric": NO_NAMES, "last": np.empty(0), "max": np.empty(0), "mean": np.empty(0),
                "fresh": np.empty(0, dtype=bool)})


class GaugeHold:
    """The last reading of every gauge series and the tick it came in."""

    def __init__(self) -> None:
        self._slots = SeriesSlots()
        self.last = np.empty(0)
        self.at = np.empty(0)  # the tick a slot was last sampled in
        self.entity_row = np.empty(0, dtype=np.int64)  # the slot's entity in the cadence
        self.entity_code = np.empty(0, dtype=np.int64)
        self.metric_code = np.empty(0, dtype=np.int64)
        self._entities: list[str] = []
        self._entity_of: dict[str, int] = {}
        self._metrics: list[str] = []
        self._metric_of: dict[str, int] = {}
        self._cats: tuple[np.ndarray, np.ndarray] | None = None
        self._now = -np.inf  # the last update's time

    def __getstate__(self) -> dict:
        """Without the code columns handed out (a cache: a warm state need not carry it)."""
        state = dict(self.__dict__)
        state.pop("_all_codes", None)
        return state

    def update(self, now: float, gauges: pd.DataFrame | Table, cadence: Cadence) -> Table:
        """Fold in the tick's gauge readings (``entity, metric, last, max`` and ``mean`` where given) and return every
        current one (a held reading's max and mean are its last: they were judged in the tick it came in)."""
        fresh_slots = np.empty(0, dtype=np.int64)
        peak_of_fresh = mean_of_fresh = np.empty(0)
        if len(gauges):
            ent_codes, ent_names = name_codes(gauges["entity"])
            met_codes, met_names = name_codes(gauges["metric"])
            width = len(met_names) + 1
            slots, grow = self._slots.lookup(ent_codes.astype(np.int64) * width + met_codes, ent_names, met_names)
            if grow:
                self._grow(slots, ent_names[ent_codes], met_names[met_codes], cadence)
            self.last[slots] = np.asarray(gauges["last"], dtype=float)
            self.at[slots] = now
            fresh_slots, peak_of_fresh = slots, np.asarray(gauges["max"], dtype=float)
            mean_of_fresh = np.asarray(gauges["mean" if "mean" in gauges else "last"], dtype=float)
        self._now = now
        if not len(self.last):
            return _EMPTY
        current = (now - self.at) <= cadence.windows()[self.entity_row]  # (per entity, then each of its series)
        current[fresh_slots] = True
        # every series current (all sampled each tick, say): every slot in order, its arrays copied whole
        pick = None if current.all() else np.flatnonzero(current)

        def take(a: np.ndarray) -> np.ndarray:
            return a.copy() if pick is None else a[pick]

        peak = take(self.last)  # a held reading's peak was judged when it came
        mean = peak.copy()
        fresh = (self.at if pick is None else self.at[pick]) == now
        if len(fresh_slots):
            # each fresh slot's place among those returned (linear, no search)
            where = fresh_slots if pick is None else (np.cumsum(current) - 1)[fresh_slots]
            peak[where] = peak_of_fresh
            mean[where] = mean_of_fresh
        entities, metrics = self._names()
        ent_codes, met_codes = self._every_slot_codes() if pick is None else (self.entity_code[pick],
                                                                                 self.metric_code[pick])
        return Table({"entity": Names(ent_codes, entities), "metric": Names(met_codes, metrics),
                      "last": take(self.last), "max": peak, "mean": mean, "fresh": fresh})

    def _every_slot_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """The entity and metric codes of every slot, read-only and the same objects while no slot is added: a
        detector may keep what it works out from a table's rows (which are which accelerator's which metric) for as
        long as the tables it is given carry the same code arrays."""
        cached = getattr(self, "_all_codes", None)
        if cached is None or len(cached[0]) != len(self.entity_code):
            cached = (read_only(self.entity_code.copy()), read_only(self.metric_code.copy()))
            self._all_codes = cached if keeps_layout(len(self.entity_code)) else None
        return cached

    def held_until(self, cadence: Cadence) -> float:
        """Until when (inclusive) an update without new readings returns what the last one did: the first time a
        reading current then stops being current (``inf``: none will)."""
        if not len(self.at):
            return np.inf
        window = cadence.windows()[self.entity_row]
        current = (self._now - self.at) <= window
        # (a millisecond to spare for the rounding of at + window against now - at: a tick that close runs in full)
        return float((self.at[current] + window[current]).min()) - 1e-3 if current.any() else np.inf

    def _grow(self, slots: np.ndarray, entities: np.ndarray, metrics: np.ndarray, cadence: Cadence) -> None:
        n = len(self._slots)
        old = len(self.last)
        new_slots = np.arange(old, n)
        first = {int(s): i for i, s in reversed(list(enumerate(slots.tolist()))) if s >= old}
        ent = [entities[first[int(s)]] for s in new_slots]
        met = [metrics[first[int(s)]] for s in new_slots]
        self.last = np.concatenate((self.last, np.full(n - old, np.nan)))
        self.at = np.concatenate((self.at, np.full(n - old, -np.inf)))
        self.entity_row = np.concatenate((self.entity_row, cadence.rows(np.asarray(ent, dtype=object))))
        codes = [self._code(e, self._entity_of, self._entities) for e in ent]
        self.entity_code = np.concatenate((self.entity_code, np.asarray(codes, dtype=np.int64)))
        codes = [self._code(m, self._metric_of, self._metrics) for m in met]
        self.metric_code = np.concatenate((self.metric_code, np.asarray(codes, dtype=np.int64)))

    def _code(self, name: str, of: dict[str, int], names: list[str]) -> int:
        code = of.get(name)
        if code is None:
            code = of[name] = len(names)
            names.append(name)
            self._cats = None
        return code

    def _names(self) -> tuple[np.ndarray, np.ndarray]:
        """The name arrays of the returned tables, the same objects while no name is added (the detectors'
        per-name caches key on them)."""
        if self._cats is None:
            self._cats = (_frozen(self._entities), _frozen(self._metrics))
        return self._cats


def _frozen(names: list[str]) -> np.ndarray:
    out = np.asarray(names, dtype=object)
    out.flags.writeable = False
    return out
