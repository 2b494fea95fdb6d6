"""Streaming counter state: per-series increases with resets and wraps handled, and decaying counts.

Counters stay counters in the samples (docs/architecture.md §4); this module turns them into increases.
A decrease is a 32- or 64-bit wrap when the previous value sat near the top of that range and the
new one near the bottom, and otherwise a reset (reboot, driver reload, counter clear), in which
case the increase is the new value itself (what was counted since the reset). Neither ever turns
into a huge rate. Memory is one slot per series, whatever the run length.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from detectors.grouping import SeriesSlots, group_keys, stable_order
from detectors.schema import name_codes
from detectors.table import NO_NAMES, Names, Table, TableLayout, read_only

WRAP32 = float(2**32)
WRAP64 = float(2**64)


def counter_increases(prev: np.ndarray, cur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Increase from ``prev`` to ``cur`` elementwise, and a mask of resets.

    NaN ``prev`` (first sight of a series) gives an increase of 0.
    """
    delta = cur - prev
    first = np.isnan(prev)
    down = delta < 0
    if not down.any() and not first.any():  # (most ticks of a fleet: no series new, none gone down)
        return delta, down
    wrap32 = down & (prev >= 0.75 * WRAP32) & (prev < WRAP32) & (cur < 0.25 * WRAP32)
    wrap64 = down & ~wrap32 & (prev >= 0.75 * WRAP64) & (cur < 0.25 * WRAP64)
    reset = down & ~wrap32 & ~wrap64
    out = np.where(wrap32, (WRAP32 - prev) + cur, delta)
    out = np.where(wrap64, (WRAP64 - prev) + cur, out)  # float64 resolves 4096 up there
    out = np.where(reset, cur, out)
    out = np.where(first, 0.0, out)
    return out, reset


class CounterTracker:
    """Keeps the last value and time of every counter series and reports increases tick by tick."""

    def __init__(self) -> None:
        self._slots = SeriesSlots()
        self._last = np.empty(0, dtype=np.float64)
        self._ts = np.empty(0, dtype=np.float64)
        self._layout = TableLayout()  # a single-sample tick's series: their slots and the increases' name columns

    def __len__(self) -> int:
        return len(self._slots)

    def update(self, samples: pd.DataFrame | Table) -> Table:
        """Increases per (entity, metric) over this batch of counter samples (sorted by time).

        Returns columns ``entity, metric, increase, resets, last, dt``: ``dt`` is the time the increase was counted
        over, from the series' previous sample to its last one (NaN at its first sight), so a rate is
        ``increase / dt`` whatever the sampling interval.
        """
        if samples.empty:
            return Table({"entity": NO_NAMES, "metric": NO_NAMES, "increase": np.empty(0),
                          "resets": np.empty(0, dtype=np.int64), "last": np.empty(0), "dt": np.empty(0)})
        ent_codes, ent_names = name_codes(samples["entity"])
        met_codes, met_names = name_codes(samples["metric"])
        width = len(met_names) + 1
        val = np.asarray(samples["value"], dtype=np.float64)
        ts = np.asarray(samples["ts"], dtype=np.float64)
        kept = self._layout.get(ent_codes, ent_names, met_codes, met_names)
        if kept is not None:
            inverse, keys, slots, names = kept  # the same series as the last tick's: their slots are there
        else:
            inverse, keys = group_keys(ent_codes.astype(np.int64) * width + met_codes, len(ent_names) * width)
            slots, grow = self._slots.lookup(keys, ent_names, met_names)
            if grow:
                self._last = np.concatenate((self._last, np.full(grow, np.nan)))
                self._ts = np.concatenate((self._ts, np.full(grow, np.nan)))
            names = None
            if len(keys) == len(inverse):
                names = (Names(read_only(keys // width), ent_names), Names(read_only(keys % width), met_names))
                self._layout.keep(ent_codes, ent_names, met_codes, met_names, (inverse, keys, slots, names))
            else:
                self._layout.forget()
        if names is not None:  # one sample of each series (most ticks): no chain to walk
            return self._single(inverse, keys, slots, val, ts, names)
        # Walk rows in order; consecutive rows of a series chain their increases.
        order = stable_order(inverse, len(keys))
        g = inverse[order]
        v = val[order]
        prev = np.empty_like(v)
        starts = np.ones(len(g), dtype=bool)
        starts[1:] = g[1:] != g[:-1]
        prev[1:] = v[:-1]
        prev[starts] = self._last[slots[g[starts]]]
        inc, reset = counter_increases(prev, v)
        total = np.bincount(g, weights=inc, minlength=len(keys))
        resets = np.bincount(g, weights=reset.astype(np.float64), minlength=len(keys))
        ends = np.ones(len(g), dtype=bool)
        ends[:-1] = g[1:] != g[:-1]
        last = np.empty(len(keys))
        last[g[ends]] = v[ends]
        last_ts = np.empty(len(keys))
        last_ts[g[ends]] = ts[order][ends]
        dt = last_ts - self._ts[slots]
        self._last[slots] = last
        self._ts[slots] = last_ts
        return Table({"entity": Names(keys // width, ent_names), "metric": Names(keys % width, met_names),
                      "increase": total, "resets": resets.astype(np.int64), "last": last, "dt": dt})

    def _single(self, inverse: np.ndarray, keys: np.ndarray, slots: np.ndarray, val: np.ndarray, ts: np.ndarray,
                names: tuple[Names, Names]) -> Table:
        """:meth:`update` where each series has one row: the same figures, without sorting the rows by series."""
        v = np.empty(len(keys))
        v[inverse] = val
        last_ts = np.empty(len(keys))
        last_ts[inverse] = ts
        inc, reset = counter_increases(self._last[slots], v)
        dt = last_ts - self._ts[slots]
        self._last[slots] = v
        self._ts[slots] = last_ts
        # (0.0 + x, as the sums by series would make it: a -0.0 comes out 0.0)
        return Table({"entity": names[0], "metric": names[1],
                      "increase": 0.0 + inc, "resets": reset.astype(np.int64), "last": v, "dt": dt})


class DecayingCount:
    """Exponentially decaying event counts per key: about "how many in the last ``horizon`` seconds"."""

    def __init__(self, horizon: float):
        self.horizon = horizon
        self._values: dict[str, float] = {}
        self._stamp: dict[str, float] = {}

    def add(self, key: str, now: float, count: float) -> float:
        """Decay ``key`` to ``now``, add ``count``, and return the new value."""
        value = self.value(key, now) + count
        self._values[key] = value
        self._stamp[key] = now
        return value

    def value(self, key: str, now: float) -> float:
        """The decayed count of ``key`` at ``now`` (0 when unseen)."""
        old = self._values.get(key)
        if old is None:
            return 0.0
        return old * float(np.exp(-(now - self._stamp[key]) / self.horizon))

    def drop(self, matches) -> None:
        """Forget the keys for which ``matches(key)`` is true."""
        for key in [k for k in self._values if matches(k)]:
            del self._values[key]
            del self._stamp[key]

    def prune(self, now: float, floor: float = 0.01) -> None:
        """Forget keys whose count decayed below ``floor`` (keeps memory bounded)."""
        for key in [k for k in self._values if self.value(k, now) < floor]:
            del self._values[key]
            del self._stamp[key]
