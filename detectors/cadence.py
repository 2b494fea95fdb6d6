"""Each entity's sampling interval, learned from its own timestamps, and how long its data stays current.

Fleets sample every 10 s to 5 min, each exporter at its own interval, with jitter and missed scrapes; long-term
storage may hold 5-minute downsamples. A fixed staleness (150 s) makes every entity sampled every 5 minutes
stale between its samples. Here each entity's interval is the median of its last :data:`GAPS` gaps between
the ticks it was seen in (the last sample of each), so a missed scrape or a jittered one does not move it, and
its data stays current for ``factor`` intervals plus a tick (as Prometheus' lookback keeps a sample), never
less than ``floor_s``. An entity not yet seen twice takes the median interval of the entities that have one.

Sampled faster than the tick (10 s against 30 s ticks), an entity's gaps are the tick: its window is the floor,
which is what matters for staleness; rates take each series' own time between samples (detectors.counters).
"""

from __future__ import annotations

import numpy as np

from detectors.contract import TICK_S
from detectors.grouping import PerNameArray, RowIndex

GAPS = 5


class Cadence:
    """Learned sampling interval and staleness window per entity (rows of a :class:`RowIndex`)."""

    def __init__(self, tick_s: float = TICK_S, factor: float = 2.5, floor_s: float = 150.0):
        self.tick_s = tick_s
        self.factor = factor
        self.floor_s = floor_s
        self.index = RowIndex()
        self.last = np.full(0, np.nan)  # time of the entity's last sample
        self.gaps = np.full((0, GAPS), np.nan)  # ring of its last gaps between ticks it was seen in
        self.interval = np.full(0, np.nan)
        self._pos = np.zeros(0, dtype=np.int64)
        self._fleet_interval = np.nan  # (fleet_interval, worked out when asked after the intervals moved)
        self._fleet_moved = False
        self._rows_of = PerNameArray(self.rows)

    def rows(self, names: np.ndarray) -> np.ndarray:
        """Rows of entity ``names``, allocated on first sight."""
        rows, fresh = self.index.lookup(names)
        if len(fresh):
            n = len(fresh)
            self.last = np.concatenate((self.last, np.full(n, np.nan)))
            self.gaps = np.concatenate((self.gaps, np.full((n, GAPS), np.nan)))
            self.interval = np.concatenate((self.interval, np.full(n, np.nan)))
            self._pos = np.concatenate((self._pos, np.zeros(n, dtype=np.int64)))
        return rows

    def rows_of_names(self, names: np.ndarray) -> np.ndarray:
        """:meth:`rows` of a whole name array as :func:`detectors.schema.name_codes` hands them out (the same object
        while the names do not change), kept for the last few arrays: a tick then finds its rows without a lookup."""
        return self._rows_of.get(names)

    def observe(self, names: np.ndarray, last_ts: np.ndarray) -> np.ndarray:
        """Entities ``names`` were sampled this tick, last at ``last_ts``; returns their rows."""
        return self.observe_rows(self.rows(names), last_ts)

    def observe_rows(self, rows: np.ndarray, last_ts: np.ndarray) -> np.ndarray:
        """The entities of ``rows`` were sampled this tick, last at ``last_ts``; returns ``rows``."""
        prev = self.last[rows]
        gap = last_ts - prev
        new = np.isfinite(gap) & (gap > 0)
        if new.any():
            r = rows[new]
            slot = self._pos[r] % GAPS
            # a gap equal to the one it replaces in the ring (steady sampling) changes no median: only the others
            moved = ~(self.gaps[r, slot] == gap[new])
            self.gaps[r, slot] = gap[new]
            self._pos[r] += 1
            if moved.any():
                m = r[moved]
                self.interval[m] = _row_nanmedian(self.gaps[m])
                self._fleet_moved = True
        self.last[rows] = np.fmax(prev, last_ts)
        return rows

    @property
    def fleet_interval(self) -> float:
        """The median of the learned intervals (NaN: none yet), for entities without their own: worked out when
        asked, not every tick the intervals move (in a fleet sampled a while, every entity has its own)."""
        if self._fleet_moved:
            known = self.interval[np.isfinite(self.interval)]
            self._fleet_interval = float(np.median(known)) if len(known) else np.nan
            self._fleet_moved = False
        return self._fleet_interval

    def interval_of(self, rows: np.ndarray) -> np.ndarray:
        """Learned interval of ``rows`` (the fleet's where an entity has none yet; NaN before anything is known)."""
        own = self.interval[rows]
        finite = np.isfinite(own)
        return own if finite.all() else np.where(finite, own, self.fleet_interval)

    def window_of(self, rows: np.ndarray) -> np.ndarray:
        """How long the data of ``rows`` stays current after their last sample."""
        interval = self.interval_of(rows)
        window = self.factor * np.where(np.isnan(interval), 0.0, interval) + self.tick_s  # (finite or NaN)
        return np.maximum(window, self.floor_s)

    def windows(self) -> np.ndarray:
        """:meth:`window_of` every row (computed once for all: a caller with many series per entity gathers from it)."""
        return self.window_of(np.arange(len(self.last)))

    def window(self, entity: str) -> float:
        """The window of one entity (the floor when it was never seen)."""
        row = int(self.index.index.get_indexer([entity])[0])
        return self.floor_s if row < 0 else float(self.window_of(np.array([row]))[0])


def _row_nanmedian(a: np.ndarray) -> np.ndarray:
    """``np.nanmedian(a, axis=1)`` of a narrow 2-D array, equal to it bit for bit without its per-call overhead (it
    runs every tick for every entity sampled): NaN sorts last, so a row's middle is among its first values."""
    s = np.sort(a, axis=1)
    n = (~np.isnan(s)).sum(axis=1)
    r = np.arange(len(s))
    hi = s[r, np.minimum(n // 2, s.shape[1] - 1)]
    lo = s[r, np.maximum((n - 1) // 2, 0)]
    return np.where(n > 0, np.where(n % 2 == 1, hi, (lo + hi) / 2), np.nan)
