"""Shared heat: whether a GPU at its temperature limit got there with its rack (the coolant), not on its own.

A GPU in a warm slot runs a few degrees above its peers for ever; when the rack's coolant swings up (a CDU's setpoint,
a chiller cycling) every GPU of the rack warms by the same few degrees, and the warm one can touch its slowdown limit.
That is the rack's cooling, told as a cooling watch; draining the blade would take a healthy GPU out and leave the
coolant as it was (seed 2009 of the 30-day closed loop did exactly that, docs/playbooks.md).

Each accelerator's temperature and power are followed against its own baselines per load state (busy, idle,
unknown; EWMAs of ``halflife_s``, six hours, a running mean at first, a fresh reading every ``update_every_s`` at
most, frozen while the GPU is at its limit; the rises are worked out only when a limit asks): its
*rise* is its temperature over its baseline less what its own change of power explains at the fleet's slope
(temperature per watt fitted across the fleet each tick, smoothed). The rack's rise is the median rise of its
accelerators (``min_peers`` with a settled baseline at least). A GPU's heat is the rack's when the rack rose at least
``min_rack_rise_c`` and the GPU rose no more than ``margin_c`` beyond it. Anything else, a GPU heating on its own, a
rack that did not move, a GPU without a settled baseline (a load change, the first hour) or a rack too small to
say, is not shared: the limit keeps its verdict. Racks come from the topology; without one, all accelerators of the
tick are one group (a shard's median moves only when most of it warms, so then fewer limits are excused, never more).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from detectors.grouping import RowIndex, group_median
from detectors.schema import name_code, name_codes, node_of
from detectors.table import TableLayout, keeps_layout
from detectors.smoothing import LOAD_STATES, RowEwma, load_state

_METRICS = ("gpu_temp_c", "power_w", "gpu_util_pct")


@dataclass(frozen=True)
class Heat:
    """One GPU's rise and its rack's (°C over their own baselines), when its heat is shared."""

    rise_c: float
    rack_rise_c: float
    rack: str

    def reason(self) -> str:
        where = f"its rack {self.rack}" if self.rack else "the whole fleet"
        return (f"{where} warmed with it ({self.rack_rise_c:+.1f} °C over the GPUs' baselines, this GPU "
                f"{self.rise_c:+.1f} °C): the coolant, not this GPU")


class SharedHeat:
    """Per-accelerator rises against own baselines, and per rack the median of them; see the module doc."""

    def __init__(self, halflife_s: float = 6 * 3600.0, min_rack_rise_c: float = 2.0, margin_c: float = 3.0,
                 min_peers: int = 8, warmup_s: float = 3600.0, limit_c: float = 87.0,
                 slope_halflife_s: float = 3600.0, update_every_s: float = 120.0):
        self.halflife_s = halflife_s
        self.min_rack_rise_c = min_rack_rise_c
        self.margin_c = margin_c
        self.min_peers = min_peers
        self.warmup_s = warmup_s
        self.limit_c = limit_c
        self.slope_halflife_s = slope_halflife_s
        self.update_every_s = update_every_s
        self._rows = RowIndex()
        # Each accelerator's own temperature and power per load state (a running mean for the first hours)
        self._temp = {state: RowEwma(halflife_s, restart_after=None, mean_first=True) for state in LOAD_STATES}
        self._power = {state: RowEwma(halflife_s, restart_after=None, mean_first=True) for state in LOAD_STATES}
        self._rise = np.empty(0)
        self._rack_rise = np.empty(0)
        self._group = np.empty(0, dtype=np.int64)
        self._groups: dict[str, int] = {}
        self._group_names: list[str] = []
        self._seen = np.empty(0)
        self._updated = np.empty(0)  # when each row's baselines last took a reading
        self._slope = np.nan
        self._slope_at = np.nan
        self._now = np.nan
        self._tick: tuple | None = None  # the last tick's rows, temperatures, power and load states
        self._judged_at = np.nan
        self._racks: Mapping[str, str] | None = None  # the topology's node -> rack the groups were made from

    def forget(self, scope: str) -> None:
        """Drop the baselines of the accelerators in ``scope`` (a node's, or one GPU replaced in its slot)."""
        rows = self._rows.rows_within(scope)
        for ewma in (*self._temp.values(), *self._power.values()):
            ewma.forget(rows)
        self._rise[rows] = np.nan
        self._updated[rows] = -np.inf

    def _grow(self, n: int, ids: np.ndarray, rows: np.ndarray, racks: Mapping[str, str] | None) -> None:
        extra = n - len(self._rise)
        if extra > 0:
            for ewma in (*self._temp.values(), *self._power.values()):
                ewma.grow(n)
            self._rise = np.concatenate([self._rise, np.full(extra, np.nan)])
            self._rack_rise = np.concatenate([self._rack_rise, np.full(extra, np.nan)])
            self._seen = np.concatenate([self._seen, np.full(extra, np.nan)])
            self._updated = np.concatenate([self._updated, np.full(extra, -np.inf)])
            self._group = np.concatenate([self._group, np.full(extra, -1, dtype=np.int64)])
        if racks is not self._racks:  # another topology (a reload): every GPU's rack is looked up again
            self._racks = racks
            self._group[:] = -1
            self._groups, self._group_names = {}, []
        new = self._group[rows] < 0
        for j in np.flatnonzero(new):
            rack = (racks or {}).get(node_of(ids[j]), "")
            self._group[rows[j]] = self._groups.setdefault(rack, len(self._groups))
            if len(self._group_names) < len(self._groups):
                self._group_names.append(rack)

    def observe(self, now: float, gauges: pd.DataFrame, racks: Mapping[str, str] | None = None) -> None:
        """Fold in a tick's current gauge readings (``entity, metric, last, fresh``): every accelerator's rise and
        its rack's. Only fresh readings move a baseline; held ones are judged as they stand."""
        if gauges.empty:
            return
        names, layout = self._layout(gauges)
        last = np.asarray(gauges["last"], dtype=float)
        cols = {m: np.full(len(names), np.nan) for m in _METRICS}
        fresh = np.zeros(len(names), dtype=bool)
        for m, (sel, ent) in layout.items():
            cols[m][ent] = last[sel]
            if m == "gpu_temp_c":
                fresh[ent] = np.asarray(gauges["fresh"], dtype=bool)[sel] if "fresh" in gauges else True
        has_temp = np.isfinite(cols["gpu_temp_c"])
        if not has_temp.any():
            return
        t, p = cols["gpu_temp_c"][has_temp], cols["power_w"][has_temp]
        util, fresh = cols["gpu_util_pct"][has_temp], fresh[has_temp]
        ids, rows = self._rows_of(names, has_temp)
        self._grow(len(self._rows), ids, rows, racks)
        load = load_state(util)
        # A six-hour baseline needs no reading every tick: each row takes one every ``update_every_s`` at most
        due = fresh & (now - self._updated[rows] >= self.update_every_s)
        if due.any():
            self._fleet_slope(now, t, p)
            at_limit = t >= self.limit_c
            for state in LOAD_STATES:
                upd = np.flatnonzero(due & (load == state))
                if len(upd):
                    self._temp[state].update(rows[upd], t[upd], now, frozen=at_limit[upd])
                    has_p = upd[np.isfinite(p[upd])]
                    self._power[state].update(rows[has_p], p[has_p], now, frozen=at_limit[has_p])
            self._updated[rows[due]] = now
        self._seen[rows] = now
        self._now = now
        self._tick = (rows, t, p, load)

    def __getstate__(self) -> dict:
        """Without the layouts kept for the last tick's table (caches: a warm state need not carry them)."""
        state = dict(self.__dict__)
        state.pop("_layout_kept", None)
        state.pop("_rows_memo", None)
        return state

    def _layout(self, gauges) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]:
        """The entity names and, per metric read, the table rows holding it and their entities' codes: kept while
        the table's code arrays are the same read-only objects (GaugeHold hands out the same ones while its series
        are the same)."""
        ent_codes, names = name_codes(gauges["entity"])
        met_codes, met_names = name_codes(gauges["metric"])
        kept = getattr(self, "_layout_kept", None)
        if kept is None:
            kept = self._layout_kept = TableLayout()
        layout = kept.get(ent_codes, names, met_codes, met_names)
        if layout is not None:
            return names, layout
        layout = {}
        for m in _METRICS:
            code = name_code(met_names, m)
            if code < 0:
                continue
            sel = np.flatnonzero((met_codes == code) & (ent_codes >= 0))
            layout[m] = (sel, ent_codes[sel])
        kept.keep(ent_codes, names, met_codes, met_names, layout)
        return names, layout

    def _rows_of(self, names: np.ndarray, has_temp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The names of the GPUs with a temperature and their rows (read-only), kept while the same ones have."""
        memo = getattr(self, "_rows_memo", None)
        if memo is not None and memo[0] is names and memo[1] is self._rows.keys and np.array_equal(memo[2], has_temp):
            return memo[3], memo[4]
        ids = names[has_temp]
        rows, _ = self._rows.lookup(ids)
        rows.flags.writeable = False
        self._rows_memo = (names, self._rows.keys, has_temp, ids, rows) if keeps_layout(len(names)) else None
        return ids, rows

    def _judge(self) -> None:
        """Every accelerator's rise and its rack's, for the last tick observed (once, when first asked)."""
        rows, t, p, load = self._tick
        slope = 0.0 if np.isnan(self._slope) else self._slope
        rise = np.full(len(rows), np.nan)
        for state in LOAD_STATES:
            k = np.flatnonzero(load == state)
            if not len(k):
                continue
            temp, power = self._temp[state], self._power[state]
            r = rows[k]
            # The rise in temperature less what the GPU's own change of power explains (at the fleet's slope)
            power_part = slope * (p[k] - power.value[r])
            own = t[k] - temp.value[r] - np.where(np.isfinite(power_part), power_part, 0.0)
            rise[k] = np.where(self._now - temp.since[r] >= self.warmup_s, own, np.nan)
        group = self._group[rows]
        rack_rise, count = group_median(group, rise)
        rack_rise = np.where(count >= self.min_peers, rack_rise, np.nan)
        self._rise[rows] = rise
        self._rack_rise[rows] = rack_rise[group]
        self._judged_at = self._now

    def _fleet_slope(self, now: float, t: np.ndarray, p: np.ndarray) -> None:
        """The fleet's temperature per watt (a least-squares fit of the tick, smoothed over ``slope_halflife_s``;
        0 where power is not exported or too even to fit)."""
        ok = np.isfinite(t) & np.isfinite(p)
        if ok.sum() >= 4 and np.ptp(p[ok]) > 50:
            dp = p[ok] - p[ok].mean()
            b = float(dp @ (t[ok] - t[ok].mean()) / (dp @ dp))  # the least-squares slope
            if np.isnan(self._slope):
                self._slope = b
            else:
                alpha = 1.0 - 0.5 ** (max(now - self._slope_at, 0.0) / self.slope_halflife_s)
                self._slope += alpha * (b - self._slope)
            self._slope_at = now

    def shared(self, entity: str) -> Heat | None:
        """The GPU's and its rack's rise when the GPU's heat is its rack's (seen in the last tick observed)."""
        row = self._rows.index.get_indexer([entity])[0]
        if row < 0 or self._seen[row] != self._now:
            return None
        if self._judged_at != self._now:
            self._judge()
        rise, rack_rise = self._rise[row], self._rack_rise[row]
        if not (np.isfinite(rise) and np.isfinite(rack_rise)):
            return None
        if rack_rise >= self.min_rack_rise_c and rise <= rack_rise + self.margin_c:
            return Heat(float(rise), float(rack_rise), self._group_names[self._group[row]])
        return None
