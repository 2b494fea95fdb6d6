"""Trend: rising error-counter rates, found with a one-sided Poisson CUSUM per entity and counter.

For each counter (correctable ECC, PCIe replays, symbol errors, link error recoveries, NVLink CRC) the
detector accumulates the log-likelihood ratio of an elevated rate ``λ1`` against the entity's baseline
``λ0`` tick by tick: ``S = max(0, S + x·ln(λ1/λ0) − (λ1 − λ0)·dt)``. One isolated error lifts ``S`` by
``ln(λ1/λ0)`` and decays away; a rate that keeps rising crosses ``h`` long before a static threshold
would. ``S`` is capped at ``cap × h``: after a burst of any length the alarm clears within
``(cap − 1)·h / (λ1 − λ0)`` plus ``hold_s`` of the errors stopping (a GPU that threw millions of replays
before it fell off the bus would otherwise stay "rising" for weeks after its repair). ``λ0`` starts at the
counter's prior (what healthy hardware shows) and is learned slowly from quiet periods; ``λ1`` is
``rise_factor × λ0``, at least the counter's floor. Resets are already removed
from the increases (detectors/counters.py).
"""

from __future__ import annotations

import math

import numpy as np

from detectors.rules import Evidence, TickInput
from detectors.schema import State, names_in, node_of

# counter -> (prior per hour, elevated floor per hour, category, words)
COUNTERS = {
    "ecc_sbe_total": (1 / 500, 6.0, "gpu_memory", "correctable ECC errors"),
    "pcie_replay_total": (0.1, 60.0, "gpu_bus", "PCIe replays"),
    "symbol_error_total": (1 / 50, 12.0, "fabric_link", "symbol errors"),
    "link_error_recovery_total": (1 / 500, 3.0, "fabric_link", "link error recoveries"),
    "rcv_errors_total": (1 / 100, 20.0, "fabric_link", "receive errors"),
    "nvlink_crc_flit_total": (1.0, 300.0, "scaleup_link", "NVLink CRC errors"),
    "xgmi_ce_total": (1.0, 300.0, "scaleup_link", "XGMI correctable errors"),
    # The kernel's per-device AER counters (sysfs aer_dev_correctable): any vendor's PCIe link, and for an
    # NPU whose exporter has no replay counter the only early sign of a link going bad.
    "aer_correctable_total": (0.1, 20.0, "gpu_bus", "PCIe AER corrected errors"),
    **{f"hccs_crc_lane{n}_total": (1.0, 300.0, "scaleup_link", f"HCCS lane {n} CRC errors") for n in range(1, 8)},
}


class TrendDetector:
    """Per-entity Poisson CUSUM on counter increases; parameters in ``__init__``."""

    name = "trend"

    def __init__(self, h: float = 25.0, rise_factor: float = 100.0, learn_halflife_s: float = 7 * 86400.0,
                 hold_s: float = 3600.0, cap: float = 2.0):
        self.h = h
        self.cap = cap
        self.rise_factor = rise_factor
        self.learn_halflife_s = learn_halflife_s
        self.hold_s = hold_s

    def fit(self, X=None, y=None) -> TrendDetector:
        self.threshold_ = self.h
        self._s: dict[tuple[str, str], float] = {}
        self._lam0: dict[tuple[str, str], float] = {}
        self._alarm: dict[tuple[str, str], tuple[float, float, float]] = {}  # until, rate, lam0
        self._last_now: float | None = None
        return self

    def forget(self, node: str) -> None:
        """Drop the node's sums, baselines and alarms (its parts were replaced)."""
        if not hasattr(self, "_s"):
            return
        for d in (self._s, self._lam0, self._alarm):
            for key in [k for k in d if node_of(k[0]) == node]:
                del d[key]

    def update(self, tick: TickInput) -> list[Evidence]:
        if not hasattr(self, "_s"):
            self.fit()
        now = tick.now
        dt_h = 0.0 if self._last_now is None else (now - self._last_now) / 3600.0
        self._last_now = now
        inc = tick.increases
        counts: dict[tuple[str, str], float] = {}
        if not inc.empty:
            # Only counters that moved: a zero increase only decays S, which the loop below does for the
            # entities that have any.
            part = inc[names_in(inc["metric"], COUNTERS) & (inc["increase"].to_numpy() > 0)]
            for entity, metric, x in zip(part["entity"].to_numpy(object), part["metric"].to_numpy(object),
                                         part["increase"].to_numpy()):
                counts[(entity, metric)] = float(x)
        keys = set(counts) | set(self._s)
        for key in keys:
            entity, metric = key
            prior, floor, _, _ = COUNTERS[metric]
            lam0 = self._lam0.get(key, prior)
            lam1 = max(floor, self.rise_factor * lam0)
            x = counts.get(key, 0.0)
            s = min(self.cap * self.h,
                    max(0.0, self._s.get(key, 0.0) + x * math.log(lam1 / lam0) - (lam1 - lam0) * dt_h))
            if s > 0:
                self._s[key] = s
            else:
                self._s.pop(key, None)
                if x == 0 and dt_h > 0:  # quiet: learn the baseline slowly
                    w = 1.0 - 0.5 ** (dt_h * 3600.0 / self.learn_halflife_s)
                    self._lam0[key] = max(prior, lam0 + w * (x / dt_h - lam0))
            if s >= self.h:
                rate = x / dt_h if dt_h else 0.0
                old = self._alarm.get(key)
                self._alarm[key] = (now + self.hold_s, max(rate, old[1] if old else 0.0), lam0)
        out = []
        for key, (until, rate, lam0) in list(self._alarm.items()):
            if until < now:
                del self._alarm[key]
                continue
            entity, metric = key
            _, _, category, words = COUNTERS[metric]
            reason = (f"{words} rising: up to {rate:.0f}/h against a baseline of "
                      f"{lam0:.3g}/h (CUSUM {self._s.get(key, 0.0):.0f} over {self.h:.0f})")
            out.append(Evidence(entity, State.SUBHEALTHY, category, [reason], detector=self.name,
                                score=min(1.0, 0.6 + np.log10(max(rate, 1.0)) / 10)))
        return out
