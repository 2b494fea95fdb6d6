"""Peer deviation: a GPU hotter (or slower) than its neighbours at comparable load is sub-healthy.

Each tick, for every accelerator with fresh temperature and power, the power-corrected temperature
``temp - b * power`` (``b`` fitted across the fleet that tick, so busy and idle GPUs compare) is set against the median
of the accelerators of its node at comparable load (busy with busy, idle with idle): a rack-wide coolant swing
moves all of them and cancels out; a half-used node does not look like a fault. The residual is smoothed
(EWMA) and scored as a robust z-score against the fleet's residual spread (MAD). ``subhealthy`` needs the
z-score, an absolute residual of ``min_excess_c`` (8 °C) *and* a rise of ``min_rise_c`` over the GPU's own
baseline (its residual smoothed over ``baseline_halflife_s``, 24 h, per load state, busy or idle, frozen while
it is flagged; none for ten minutes after a load change): a GPU in a warmer slot runs several degrees above
its peers for ever and is not a fault, while a degrading one moves away from where it was. Above
``absolute_excess_c`` (15 °C) the rise is not needed (a GPU that was already degrading when raswarden
started). Once flagged, it clears only ``clear_margin_c`` below the entry levels. HBM temperature is judged
the same way, and SM clocks of busy GPUs against busy peers (fail-slow: a GPU that stays up but runs slower).
"""

from __future__ import annotations

import numpy as np

from detectors.rules import Evidence, TickInput
from detectors.schema import State

_MAD_TO_SIGMA = 1.4826


class PeerDeviation:
    """Robust peer residuals of temperature, HBM temperature and clocks; parameters in ``__init__``."""

    name = "peer"

    def __init__(self, z_threshold: float = 6.0, min_excess_c: float = 8.0, suspect_excess_c: float = 6.0,
                 hbm_min_excess_c: float = 10.0, slow_ratio: float = 0.85, halflife_s: float = 300.0,
                 min_peers: int = 3, min_rise_c: float = 4.0, absolute_excess_c: float = 15.0,
                 baseline_halflife_s: float = 86400.0, clear_margin_c: float = 2.0):
        self.z_threshold = z_threshold
        self.min_excess_c = min_excess_c
        self.suspect_excess_c = suspect_excess_c
        self.hbm_min_excess_c = hbm_min_excess_c
        self.slow_ratio = slow_ratio
        self.halflife_s = halflife_s
        self.min_peers = min_peers
        self.min_rise_c = min_rise_c
        self.absolute_excess_c = absolute_excess_c
        self.baseline_halflife_s = baseline_halflife_s
        self.clear_margin_c = clear_margin_c

    def fit(self, X=None, y=None) -> PeerDeviation:
        """Nothing to learn up front: the state is the smoothed residual per accelerator."""
        self.threshold_ = self.z_threshold
        self._smooth: dict[tuple[str, str], tuple[float, float]] = {}
        self._slow_now: set[str] = set()
        self._own: dict[tuple, tuple[float, float]] = {}
        self._load: dict[str, tuple[str, float]] = {}
        self._hot_now: set[tuple[str, str]] = set()
        return self

    def _baseline(self, key: tuple, value: float, now: float, frozen: bool = False) -> float:
        """The entity's own long-run residual in one load state, not learned while it is flagged."""
        prev = self._own.get(key)
        if prev is None:
            self._own[key] = (value, now)
            return value
        if frozen:
            return prev[0]
        alpha = 1.0 - 0.5 ** ((now - prev[1]) / self.baseline_halflife_s)
        out = prev[0] + alpha * (value - prev[0])
        self._own[key] = (out, now)
        return out

    def _ewma(self, key: tuple[str, str], value: float, now: float) -> float:
        prev = self._smooth.get(key)
        if prev is None or now - prev[1] > 4 * self.halflife_s:
            out = value
        else:
            alpha = 1.0 - 0.5 ** ((now - prev[1]) / self.halflife_s)
            out = prev[0] + alpha * (value - prev[0])
        self._smooth[key] = (out, now)
        return out

    def update(self, tick: TickInput) -> list[Evidence]:
        if not hasattr(self, "_smooth"):
            self.fit()
        g = tick.gauges
        if g.empty:
            return []
        entity = g["entity"].to_numpy()
        metric = g["metric"].to_numpy()
        last = g["last"].to_numpy(dtype=float)
        accel = np.fromiter(("/gpu" in e for e in entity), dtype=bool, count=len(entity))
        if not accel.any():
            return []
        ids, row = np.unique(entity[accel], return_inverse=True)
        columns = {}
        for m in ("gpu_temp_c", "hbm_temp_c", "power_w", "sm_clock_mhz", "gpu_util_pct"):
            col = np.full(len(ids), np.nan)
            pick = metric[accel] == m
            col[row[pick]] = last[accel][pick]
            columns[m] = col
        if np.isnan(columns["power_w"]).all():
            return []
        nodes, node_code = np.unique([e.split("/", 1)[0] for e in ids], return_inverse=True)
        out: list[Evidence] = []
        loads = [self._load_settled(e, float(u), tick.now) for e, u in zip(ids, columns["gpu_util_pct"])]
        # Peers at comparable load: busy GPUs against the node's busy ones, idle against idle (a half-used
        # node's median otherwise moves with its job mix); all together where utilisation is unknown.
        util = columns["gpu_util_pct"]
        load_code = np.where(np.isnan(util), 0, np.where(util >= 50, 1, 2))
        peer_code = node_code * 3 + load_code
        for m, min_excess, words in (("gpu_temp_c", self.min_excess_c, "GPU"), ("hbm_temp_c", self.hbm_min_excess_c,
                                                                                   "HBM")):
            if not np.isnan(columns[m]).all():
                out += self._temperature(tick.now, ids, peer_code, columns[m], columns["power_w"], m, min_excess,
                                         words, loads)
        if not np.isnan(columns["sm_clock_mhz"]).all():
            out += self._slow(tick.now, ids, node_code, columns["sm_clock_mhz"], columns["gpu_util_pct"])
        return out

    def _residual(self, codes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each value minus the median of its group (NaN where the group has too few values)."""
        median, count = group_median(codes, values)
        residual = values - median[codes]
        residual[count[codes] < self.min_peers + 1] = np.nan
        return residual, median

    def _load_settled(self, entity: str, util: float, now: float) -> str | None:
        """The GPU's load state (busy/idle) once it has held it for two smoothing half-lives, else None."""
        state = "busy" if util >= 50 else ("idle" if util == util else "any")
        prev = self._load.get(entity)
        if prev is None or prev[0] != state:
            self._load[entity] = (state, now)
            return None
        return state if now - prev[1] >= 2 * self.halflife_s else None

    def _temperature(self, now, ids, codes, t, p, metric, min_excess, words, loads) -> list[Evidence]:
        ok = np.isfinite(t) & np.isfinite(p)
        if ok.sum() < 4:
            return []
        slope = np.polyfit(p[ok], t[ok], 1)[0] if np.ptp(p[ok]) > 50 else 0.0
        # The node's median includes the GPU itself: with eight peers one hot GPU cannot move it.
        residual, _ = self._residual(codes, np.where(ok, t - slope * p, np.nan))
        spread = max(float(np.nanmedian(np.abs(residual))) * _MAD_TO_SIGMA if np.isfinite(residual).any() else 0.5,
                     0.5)
        out = []
        for i in np.flatnonzero(np.isfinite(residual)):
            entity = ids[i]
            key = (entity, metric)
            smooth = self._ewma(key, float(residual[i]), now)
            # The own baseline is kept per load state: a GPU's own thermal resistance puts it a few degrees
            # further from its peers busy than idle, which is no rise. Right after a load change there is
            # no comparison (and a flagged GPU stays flagged).
            load = loads[i]
            margin = self.clear_margin_c if key in self._hot_now else 0.0
            if load is None:
                rise = float("nan")
                rising = key in self._hot_now
            else:
                rise = smooth - self._baseline((entity, metric, load), smooth, now, frozen=key in self._hot_now)
                rising = rise >= self.min_rise_c - margin
            z = smooth / spread
            hot = smooth >= min_excess - margin and z >= self.z_threshold - margin / spread and (
                rising or smooth >= self.absolute_excess_c - margin)
            if hot:
                self._hot_now.add(key)
                level = State.SUBHEALTHY
            else:
                self._hot_now.discard(key)
                if (metric == "gpu_temp_c" and smooth >= self.suspect_excess_c and z >= self.z_threshold / 2
                        and rise >= self.min_rise_c / 2):  # NaN (no comparison yet) is never above
                    level = State.SUSPECT
                else:
                    continue
            reason = (f"{entity.split('/', 1)[1]} {words} {smooth:+.1f} °C against its node's peers at equal power "
                      f"(z {z:.1f}, fleet spread {spread:.1f} °C), {rise:+.1f} °C over its own baseline")
            out.append(Evidence(entity, level, "gpu_thermal", [reason], detector=self.name,
                                score=min(1.0, 0.5 + z / 40)))
        return out

    def _slow(self, now, ids, codes, clock, util) -> list[Evidence]:
        busy_clock = np.where(util >= 50, clock, np.nan)
        median, count = group_median(codes, busy_clock)
        ratio = busy_clock / median[codes]
        ratio[count[codes] < self.min_peers + 1] = np.nan
        out = []
        for i in np.flatnonzero(np.isfinite(ratio)):
            entity = ids[i]
            smooth = self._ewma((entity, "clock_ratio"), float(ratio[i]), now)
            # Hysteresis: enter at slow_ratio, leave only above slow_ratio + 0.05.
            limit = self.slow_ratio + (0.05 if entity in self._slow_now else 0.0)
            if smooth > limit:
                self._slow_now.discard(entity)
            else:
                self._slow_now.add(entity)
                reason = (f"{entity.split('/', 1)[1]} SM clock at {smooth:.0%} of its busy peers' "
                          f"({median[codes[i]]:.0f} MHz)")
                out.append(Evidence(entity, State.SUBHEALTHY, "gpu_compute", [reason], detector=self.name,
                                    score=min(1.0, 0.5 + (1 - smooth))))
        return out


def group_median(codes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and count of the finite values per group code (vectorized: one sort)."""
    n_groups = int(codes.max()) + 1 if len(codes) else 0
    ok = np.isfinite(values)
    c, v = codes[ok], values[ok]
    order = np.lexsort((v, c))
    c, v = c[order], v[order]
    count = np.bincount(c, minlength=n_groups)
    start = np.concatenate(([0], np.cumsum(count)[:-1]))
    median = np.full(n_groups, np.nan)
    has = count > 0
    lo = start[has] + (count[has] - 1) // 2
    hi = start[has] + count[has] // 2
    median[has] = (v[lo] + v[hi]) / 2.0
    return median, count
