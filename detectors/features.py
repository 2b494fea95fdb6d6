"""Streaming features for every accelerator and port at once: one vectorized state, O(entities × features).

Per tick, :meth:`FeatureState.update` folds the tick's counter increases, gauge levels and events into
fixed-size arrays and returns a :class:`FeatureFrame` per entity kind (rows = entities, columns =
:data:`FEATURES`). Nothing grows with run length.

* **counter rates** per hour as EWMAs over three horizons (15 min, 1 h, 6 h half-life); increases come
  from :mod:`detectors.counters`, so resets and wraps are already handled, and each entity's rate uses
  the time since *its* previous sample (an exporter gap does not turn into a spike); a counter that reset
  restarts its rates (its device restarted: a reboot, a GPU reset, a replaced part);
* **gauge level and slope**: a fast (5 min) and a slow (1 h) EWMA of each gauge; the slope per hour is
  their difference over the difference of their mean ages;
* **peer residuals**: an accelerator's temperature and HBM temperature (power-corrected with the
  fleet's slope at that tick) and power against the median of its node's GPUs in the same load state
  (busy, idle or unknown) at the same tick, and its SM clock as a ratio to its node's busy peers; smoothed
  (5 min), and each also as its *change* against its own 6-hour baseline in the same load state, busy
  or idle (a GPU in a warm slot runs a steady few degrees above its peers for ever, more so busy than
  idle; a degrading one moves away from where it was); 0 for ten minutes after a load change;
* **event counts** by class, decaying over 1 h and 24 h (hardware Xid, application Xid, PCIe AER, link).

A feature that was never observed is NaN (the stock exporter profile has no ECC counters): the learned
detectors are trained to handle missing values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from detectors.grouping import RowIndex, group_keys, group_median, peer_group
from detectors.schema import entity_kind, name_codes

RATE_HORIZONS = (("15m", 900.0), ("1h", 3600.0), ("6h", 21600.0))
LEVEL_HALFLIFE_S = 300.0
SLOW_HALFLIFE_S = 3600.0
BASELINE_HALFLIFE_S = 6 * 3600.0
EVENT_HORIZONS = (("1h", 3600.0), ("24h", 86400.0))
STALE_S = 900.0  # a row not observed for this long is left out of the frame

COUNTERS = {
    "accelerator": ("ecc_sbe_total", "ecc_dbe_total", "pcie_replay_total", "nvlink_crc_flit_total",
                    "row_remap_correctable_total", "row_remap_uncorrectable_total"),
    "port": ("symbol_error_total", "link_error_recovery_total", "link_downed_total", "rcv_errors_total"),
}
# Other vendors' counters of the same thing feed the same column, so one model serves every vendor: the
# scale-up link's CRC errors are NVLink's, AMD's XGMI (WAFL correctable) or Ascend's HCCS lanes (summed).
COUNTER_ALIASES = {"xgmi_ce_total": "nvlink_crc_flit_total",
                   **{f"hccs_crc_lane{n}_total": "nvlink_crc_flit_total" for n in range(1, 8)}}
GAUGES = {
    "accelerator": ("gpu_temp_c", "hbm_temp_c", "power_w", "sm_clock_mhz", "gpu_util_pct", "throttle_thermal"),
    "port": ("port_state",),
}
PEERS = ("gpu_temp_c", "hbm_temp_c", "power_w")  # residual against the node's median
EVENT_CLASSES = {
    "accelerator": ("xid_hardware", "xid_application", "aer"),
    "port": ("link",),
}
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})


def _short(metric: str) -> str:
    return metric.removesuffix("_total")


def feature_names(kind: str) -> tuple[str, ...]:
    """The columns of a kind's feature frame, in order."""
    names = [f"{_short(c)}_per_h_{h}" for c in COUNTERS[kind] for h, _ in RATE_HORIZONS]
    names += [f"{g}_level" for g in GAUGES[kind]]
    names += [f"{g}_slope_per_h" for g in GAUGES[kind]]
    if kind == "accelerator":
        peers = [f"{p}_peer_residual" for p in PEERS] + ["sm_clock_peer_ratio"]
        names += peers + [f"{p}_change" for p in peers]
    names += [f"{e}_events_{h}" for e in EVENT_CLASSES[kind] for h, _ in EVENT_HORIZONS]
    return tuple(names)


FEATURES = {kind: feature_names(kind) for kind in COUNTERS}


def _alpha(dt: np.ndarray | float, halflife: float) -> np.ndarray:
    return 1.0 - np.power(0.5, np.asarray(dt, dtype=float) / halflife)


def _ewma_into(arr: np.ndarray, index, value: np.ndarray, dt: np.ndarray | float, halflife: float,
               restart: np.ndarray | bool = False) -> None:
    """``arr[index]`` moves toward ``value`` by the EWMA weight of ``dt``; it takes ``value`` where it is
    unset or ``restart``, and keeps its own where ``value`` is NaN."""
    old = arr[index]
    blended = old + _alpha(dt, halflife) * (value - old)
    arr[index] = np.where(np.isnan(old) | restart, value, np.where(np.isnan(value), old, blended))


@dataclass
class FeatureFrame:
    """Features of one entity kind at one tick: ``X[i]`` belongs to ``entities[i]``."""

    kind: str
    now: float
    entities: np.ndarray  # object
    X: np.ndarray  # float64, len(entities) × len(names)
    names: tuple[str, ...]
    rows: np.ndarray | None = None  # the entities' rows in the feature state (stable across ticks)
    load_age_s: np.ndarray | None = None  # accelerators: seconds since the load state (busy/idle) last changed

    def __post_init__(self) -> None:
        if self.rows is None:
            self.rows = np.arange(len(self.entities))

    def column(self, name: str) -> np.ndarray:
        return self.X[:, self.names.index(name)]

    def frame(self) -> pd.DataFrame:
        """As a DataFrame indexed by entity (for reading and tests; the detectors use ``X``)."""
        return pd.DataFrame(self.X, index=pd.Index(self.entities, name="entity"), columns=list(self.names))


class _KindState:
    """The arrays of one entity kind; rows are entities, allocated on first sight."""

    def __init__(self, kind: str):
        self.kind = kind
        self.index = RowIndex()
        nc, ng, ne = len(COUNTERS[kind]), len(GAUGES[kind]), len(EVENT_CLASSES[kind])
        self.col_counter = {m: i for i, m in enumerate(COUNTERS[kind])}
        self.col_counter |= {a: self.col_counter[m] for a, m in COUNTER_ALIASES.items() if m in self.col_counter}
        self.col_gauge = {m: i for i, m in enumerate(GAUGES[kind])}
        self.rates = np.full((0, nc, len(RATE_HORIZONS)), np.nan)
        self.counter_seen = np.full((0, nc), np.nan)  # ts of the last counter sample per row and counter
        self.fast = np.full((0, ng), np.nan)
        self.slow = np.full((0, ng), np.nan)
        self.gauge_seen = np.full((0, ng), np.nan)
        self.peer = np.full((0, len(PEERS) + 1), np.nan)
        # The entity's own baseline of each peer residual, per load state (busy, idle, unknown): a GPU's own
        # thermal resistance puts it further from its peers busy than idle, which is no change.
        self.peer_base = np.full((0, 3, len(PEERS) + 1), np.nan)
        self.load = np.full(0, -1, dtype=np.int64)  # 0 busy, 1 idle, 2 unknown; -1 never seen
        self.load_since = np.full(0, np.nan)
        self.events = np.zeros((0, ne, len(EVENT_HORIZONS)))
        self.seen = np.full(0, -np.inf)
        self.node = np.zeros(0, dtype=np.int64)

    @property
    def ids(self) -> np.ndarray:
        return self.index.keys

    def rows(self, names: np.ndarray, nodes: dict[str, int], models: Mapping[str, str] | None = None) -> np.ndarray:
        """The rows of entity ``names``, allocated on first sight (with their peer group, see ``peer_group``)."""
        out, fresh = self.index.lookup(names)
        if len(fresh):
            self._grow(fresh, nodes, models)
        return out

    def _grow(self, fresh: np.ndarray, nodes: dict[str, int], models: Mapping[str, str] | None) -> None:
        new = len(fresh)

        def grow(a: np.ndarray, fill: float) -> np.ndarray:
            return np.concatenate((a, np.full((new,) + a.shape[1:], fill)))

        self.rates, self.counter_seen = grow(self.rates, np.nan), grow(self.counter_seen, np.nan)
        self.fast, self.slow, self.gauge_seen = grow(self.fast, np.nan), grow(self.slow, np.nan), grow(
            self.gauge_seen, np.nan)
        self.peer, self.peer_base = grow(self.peer, np.nan), grow(self.peer_base, np.nan)
        self.load = np.concatenate((self.load, np.full(new, -1, dtype=np.int64)))
        self.load_since = grow(self.load_since, np.nan)
        self.events, self.seen = grow(self.events, 0.0), grow(self.seen, -np.inf)
        codes = [nodes.setdefault(peer_group(e, models), len(nodes)) for e in fresh]
        self.node = np.concatenate((self.node, np.asarray(codes, dtype=np.int64)))


class FeatureState:
    """The streaming feature state of all accelerators and ports (see the module docstring)."""

    def __init__(self) -> None:
        self.kinds = {kind: _KindState(kind) for kind in COUNTERS}
        self.nodes: dict[str, int] = {}  # peer group -> integer code (the accelerators' peer groups)
        self.models: Mapping[str, str] | None = None  # accelerator -> model (see ``update``)
        self._kind_of: dict[str, str] = {}  # entity -> kind, so the id regexes run once per entity
        self._kinds_cache: tuple[np.ndarray, np.ndarray] | None = None
        self._last_now: float | None = None
        self._dt = 0.0
        self.frames: dict[str, FeatureFrame] = {}

    def update(self, now: float, increases: pd.DataFrame, gauges: pd.DataFrame,
               events: pd.DataFrame | None = None, models: Mapping[str, str] | None = None) -> dict[str, FeatureFrame]:
        """Fold one tick in and return the frames of entities observed within :data:`STALE_S`.

        ``models`` (accelerator -> model, from the telemetry's labels) keeps peer groups to one model.
        """
        if models is not None:
            self.models = models
        dt = 0.0 if self._last_now is None else max(0.0, now - self._last_now)
        self._last_now = now
        self._dt = dt
        for st in self.kinds.values():
            if dt and len(st.ids):
                for j, (_, horizon) in enumerate(EVENT_HORIZONS):
                    st.events[:, :, j] *= math.exp(-dt / horizon)
        self._counters(now, increases)
        self._gauges(now, gauges)
        if events is not None and not events.empty:
            self._events(events)
        self.frames = {kind: self._frame(now, st) for kind, st in self.kinds.items()}
        return self.frames

    def forget(self, scope: str) -> None:
        """Drop what the state remembers of the entities in ``scope`` (a node's or one part's: replaced): their
        rates, levels, baselines and event counts start again from their next samples."""
        for st in self.kinds.values():
            rows = st.index.rows_within(scope)
            if not len(rows):
                continue
            for a in (st.rates, st.counter_seen, st.fast, st.slow, st.gauge_seen, st.peer, st.peer_base,
                      st.load_since):
                a[rows] = np.nan
            st.load[rows] = -1
            st.events[rows] = 0.0

    # -- folding ---------------------------------------------------------------------------------
    def _split(self, frame: pd.DataFrame, kind_cols: dict[str, dict[str, int]]):
        """Per kind: rows, columns and positions of the frame's entries that a kind tracks."""
        if frame.empty:
            return {}
        mcodes, mnames = name_codes(frame["metric"])
        ecodes, enames = name_codes(frame["entity"])
        ekind = self._kinds_of(enames)
        out = {}
        for kind, cols in kind_cols.items():
            col_of_m = np.array([cols.get(m, -1) for m in mnames] + [-1], dtype=np.int64)
            col = col_of_m[mcodes]
            is_kind = (ekind == kind)[ecodes]
            pick = np.flatnonzero((col >= 0) & is_kind)
            if not len(pick):
                continue
            st = self.kinds[kind]
            inv, uniq = group_keys(ecodes[pick], len(enames))
            rows = st.rows(enames[uniq], self.nodes, self.models)[inv]
            out[kind] = (pick, rows, col[pick])
        return out

    def _kinds_of(self, names: np.ndarray) -> np.ndarray:
        """Entity kind of each name, plus a last "" standing for code -1 (a missing name); reused while the
        tick's names are the same array."""
        if self._kinds_cache is not None and self._kinds_cache[0] is names:
            return self._kinds_cache[1]
        kind_of = self._kind_of
        kinds = np.array([kind_of.get(e) or kind_of.setdefault(e, entity_kind(e)) for e in names] + [""],
                         dtype=object)
        self._kinds_cache = (names, kinds)
        return kinds

    def _counters(self, now: float, inc: pd.DataFrame) -> None:
        parts = self._split(inc, {k: st.col_counter for k, st in self.kinds.items()})
        if not parts:
            return
        increase = np.asarray(inc["increase"], dtype=float)
        resets = (np.asarray(inc["resets"]) > 0) if "resets" in inc else np.zeros(len(inc), dtype=bool)
        for kind, (pick, rows, cols) in parts.items():
            st = self.kinds[kind]
            inc_k, reset_k = increase[pick], resets[pick]
            key = rows * st.rates.shape[1] + cols
            if np.bincount(key).max(initial=0) > 1:  # several series of one column (aliases): their sum
                uniq, inv = np.unique(key, return_inverse=True)
                inc_k = np.bincount(inv, weights=inc_k, minlength=len(uniq))
                reset_k = np.bincount(inv, weights=reset_k, minlength=len(uniq)) > 0
                rows, cols = uniq // st.rates.shape[1], uniq % st.rates.shape[1]
            prev = st.counter_seen[rows, cols]
            dt = now - prev
            first = ~np.isfinite(dt)
            rate = np.where(first, 0.0, inc_k * 3600.0 / np.where(first, 1.0, np.maximum(dt, 1.0)))
            for j, (_, horizon) in enumerate(RATE_HORIZONS):
                # A counter that reset restarted with its device (a reboot, a GPU reset, a replaced part): its
                # rates start again from what the new counter says, not from the device before it.
                _ewma_into(st.rates, (rows, cols, j), rate, np.where(first, 1.0, dt), horizon, restart=reset_k)
            st.counter_seen[rows, cols] = now
            st.seen[rows] = now

    def _gauges(self, now: float, g: pd.DataFrame) -> None:
        parts = self._split(g, {k: st.col_gauge for k, st in self.kinds.items()})
        if not parts:
            return
        last = np.asarray(g["last"], dtype=float)
        for kind, (pick, rows, cols) in parts.items():
            st = self.kinds[kind]
            v = last[pick]
            ok = np.isfinite(v)
            rows, cols, v = rows[ok], cols[ok], v[ok]
            dt = now - st.gauge_seen[rows, cols]
            fresh = ~np.isfinite(dt) | (dt > 4 * SLOW_HALFLIFE_S)
            for arr, halflife in ((st.fast, LEVEL_HALFLIFE_S), (st.slow, SLOW_HALFLIFE_S)):
                _ewma_into(arr, (rows, cols), v, np.where(fresh, 1.0, dt), halflife, restart=fresh)
            st.gauge_seen[rows, cols] = now
            st.seen[rows] = now
            if kind == "accelerator":
                self._peers(now, st, rows, cols, v)

    def _peers(self, now: float, st: _KindState, rows: np.ndarray, cols: np.ndarray, v: np.ndarray) -> None:
        """Residuals against the node's median at this tick, smoothed like a level."""
        n = len(st.ids)
        raw = np.full((n, len(PEERS) + 1), np.nan)
        current = {}
        for m in PEERS + ("sm_clock_mhz", "gpu_util_pct"):
            col = np.full(n, np.nan)
            pick = cols == st.col_gauge[m]
            col[rows[pick]] = v[pick]
            current[m] = col
        touched = np.flatnonzero(np.bincount(rows, minlength=n))
        power = current["power_w"]
        util = current["gpu_util_pct"]
        now_load = np.where(util >= 50, 0, np.where(np.isfinite(util), 1, 2))
        # Peers at comparable load: busy GPUs against their node's busy ones, idle against idle, unknown
        # against unknown. A node half used by a job otherwise reads its busy GPUs as hot and power-hungry.
        peer_code = st.node * 3 + now_load
        for j, m in enumerate(PEERS):
            value = current[m]
            if m != "power_w":  # and power-corrected within the load state (fleet slope at this tick)
                ok = np.isfinite(value) & np.isfinite(power)
                if ok.sum() >= 4 and np.ptp(power[ok]) > 50:
                    value = value - np.polyfit(power[ok], value[ok], 1)[0] * power
            median, count = group_median(peer_code, value)
            res = value - median[peer_code]
            res[count[peer_code] < 3] = np.nan
            raw[:, j] = res
        busy = np.where(current["gpu_util_pct"] >= 50, current["sm_clock_mhz"], np.nan)
        median, count = group_median(st.node, busy)
        ratio = busy / median[st.node]
        ratio[count[st.node] < 3] = np.nan
        raw[:, len(PEERS)] = ratio
        _ewma_into(st.peer, touched, raw[touched], self._dt or LEVEL_HALFLIFE_S, LEVEL_HALFLIFE_S)
        load = now_load[touched]
        changed = st.load[touched] != load
        st.load[touched] = load
        st.load_since[touched] = np.where(changed, now, st.load_since[touched])
        age = now - st.load_since[touched]
        settled = touched[age >= 2 * LEVEL_HALFLIFE_S]
        # A load state's own baseline starts from the smoothed residual once it has converged (five half-lives
        # after the load change), not from one tick's raw value, which can sit tens of watts off: a held-out
        # mixed-vendor trace's busy baseline began 37 W below the GPU's steady residual and read as a 28 W rise
        # three hours later. Once started it follows the raw ticks.
        unset = np.isnan(st.peer_base[settled, st.load[settled]])
        ready = now - st.load_since[settled] >= 5 * LEVEL_HALFLIFE_S
        go = ~unset.all(axis=1) | ready
        settled, unset = settled[go], unset[go]
        value = np.where(unset, st.peer[settled], raw[settled])
        _ewma_into(st.peer_base, (settled, st.load[settled]), value, self._dt or BASELINE_HALFLIFE_S,
                   BASELINE_HALFLIFE_S)

    def _events(self, events: pd.DataFrame) -> None:
        for entity, kind, code in zip(events["entity"].to_numpy(object), events["kind"].to_numpy(object),
                                      events["code"].to_numpy(object)):
            if not isinstance(entity, str):
                continue
            ekind = entity_kind(entity)
            if ekind not in self.kinds:
                continue
            cls = _event_class(kind, code)
            st = self.kinds[ekind]
            if cls not in EVENT_CLASSES[ekind]:
                continue
            row = st.rows(np.array([entity], dtype=object), self.nodes, self.models)[0]
            st.events[row, EVENT_CLASSES[ekind].index(cls), :] += 1.0

    # -- output ----------------------------------------------------------------------------------
    @staticmethod
    def _change(now: float, st: _KindState, live: np.ndarray) -> np.ndarray:
        """Peer residuals against the entity's own baseline in its current load state; 0 (no evidence of a
        change) for ten minutes after a load change, while the smoothed residual still moves, and until the
        state's baseline has started."""
        load = st.load[live]
        settled = (load >= 0) & (now - st.load_since[live] >= 2 * LEVEL_HALFLIFE_S)
        base = st.peer_base[live, np.maximum(load, 0)]
        return np.where(settled[:, None] & np.isfinite(base), st.peer[live] - base, 0.0)
    def _frame(self, now: float, st: _KindState) -> FeatureFrame:
        names = FEATURES[st.kind]
        live = np.flatnonzero(now - st.seen <= STALE_S)
        if not len(live):
            return FeatureFrame(st.kind, now, np.empty(0, dtype=object), np.empty((0, len(names))), names, live)
        parts = [st.rates[live].reshape(len(live), -1), st.fast[live]]
        mean_age_gap = (SLOW_HALFLIFE_S - LEVEL_HALFLIFE_S) / math.log(2) / 3600.0
        parts.append((st.fast[live] - st.slow[live]) / mean_age_gap)
        if st.kind == "accelerator":
            parts += [st.peer[live], self._change(now, st, live)]
        parts.append(st.events[live].reshape(len(live), -1))
        X = np.concatenate(parts, axis=1)
        age = now - st.load_since[live] if st.kind == "accelerator" else None
        return FeatureFrame(st.kind, now, st.ids[live], X, names, live, age)


def _event_class(kind: str, code) -> str | None:
    if kind == "xid":
        try:
            return "xid_application" if int(code) in APPLICATION_XIDS else "xid_hardware"
        except (TypeError, ValueError):
            return "xid_hardware"
    if kind == "aer":
        return "aer"
    if kind == "link":
        return "link"
    return None
