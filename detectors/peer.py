"""Peer deviation: a GPU hotter (or slower) than its neighbours at comparable load is sub-healthy.

Each tick, for every accelerator with fresh temperature and power, the power-corrected temperature
``temp - b * power`` (``b`` fitted across the fleet that tick, so busy and idle GPUs compare) is set
against the median of the other accelerators of its node: a rack-wide coolant swing moves all of them
and cancels out; a half-used node does not look like a fault. The residual is smoothed (EWMA) and scored
as a robust z-score against the fleet's residual spread (MAD). ``subhealthy`` needs both the z-score and
an absolute residual of ``min_excess_c`` (8 °C: a GPU in a warmer slot runs a few degrees above its
peers for ever and is not a fault). HBM temperature is judged the same way, and SM clocks of busy GPUs
against busy peers (fail-slow: a GPU that stays up but runs slower).
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
                 min_peers: int = 3):
        self.z_threshold = z_threshold
        self.min_excess_c = min_excess_c
        self.suspect_excess_c = suspect_excess_c
        self.hbm_min_excess_c = hbm_min_excess_c
        self.slow_ratio = slow_ratio
        self.halflife_s = halflife_s
        self.min_peers = min_peers

    def fit(self, X=None, y=None) -> PeerDeviation:
        """Nothing to learn up front: the state is the smoothed residual per accelerator."""
        self.threshold_ = self.z_threshold
        self._smooth: dict[tuple[str, str], tuple[float, float]] = {}
        self._slow_now: set[str] = set()
        return self

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
        for m, min_excess, words in (("gpu_temp_c", self.min_excess_c, "GPU"), ("hbm_temp_c", self.hbm_min_excess_c,
                                                                                   "HBM")):
            if not np.isnan(columns[m]).all():
                out += self._temperature(tick.now, ids, node_code, columns[m], columns["power_w"], m, min_excess,
                                         words)
        if not np.isnan(columns["sm_clock_mhz"]).all():
            out += self._slow(tick.now, ids, node_code, columns["sm_clock_mhz"], columns["gpu_util_pct"])
        return out

    def _residual(self, codes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each value minus the median of its group (NaN where the group has too few values)."""
        median, count = group_median(codes, values)
        residual = values - median[codes]
        residual[count[codes] < self.min_peers + 1] = np.nan
        return residual, median

    def _temperature(self, now, ids, codes, t, p, metric, min_excess, words) -> list[Evidence]:
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
            smooth = self._ewma((entity, metric), float(residual[i]), now)
            z = smooth / spread
            if smooth >= min_excess and z >= self.z_threshold:
                level = State.SUBHEALTHY
            elif metric == "gpu_temp_c" and smooth >= self.suspect_excess_c and z >= self.z_threshold / 2:
                level = State.SUSPECT
            else:
                continue
            reason = (f"{entity.split('/', 1)[1]} {words} {smooth:+.1f} °C against its node's peers at equal power "
                      f"(z {z:.1f}, fleet spread {spread:.1f} °C)")
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
