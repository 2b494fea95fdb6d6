"""The fleet's healthy rates for the trend detector: a log-normal per counter and part model fitted to every part's
record (less the top ``trim`` share), from a prior while the fleet says little (detectors/trend.py says why).

A part of :class:`detectors.trend.TrendDetector`.
"""

from __future__ import annotations

import math

import numpy as np

from detectors.rate_spread import (
    PRIOR_FLOOR,
    fit_lognormal,
    log_rate_weights,
)
from detectors.trend_counters import COUNTERS, WINDOWS_S, CounterRecord


class FleetRates:
    """What a healthy part of this fleet shows, per counter and part model."""

    def _learn_fleet(self, now: float) -> None:
        """The fleet's spread of healthy rates per counter and part model (every ``learn_every_s``).

        From every part's record without the top ``trim`` share of parts (at least one: a failing part must not
        teach the fleet that its errors are normal): the parts that counted, those that never did (the fleet's
        exposure over the time watched says how many parts there are), each over that time, fitted as a log-normal
        (:func:`fit_lognormal`, from the counter's prior and ``prior_spread`` while the fleet says little)."""
        horizon_h = min((now - self._start) / 3600.0, self.history_halflife_s / 3600.0)
        counts: dict[tuple[str, str], list[float]] = {}
        at = self._series_clock(now)  # (thousands of series a learning: the clock in use asked once)
        for key, s in self._series.items():
            self._fold(s, at(key))
            counts.setdefault(s.group, []).append(s.k_hist + len(s.episodes))
        for s in self._on_wall().values():  # (kept as long as the fleet has not said: their history folded too)
            self._fold(s, now)
        for group, (hours, _, *sampled) in self._exposure.items():
            if horizon_h <= 0 or hours <= 0:
                continue
            prior = self._prior_rate(group[0])
            # exposure over time: how many parts (for a counter on the clock in use, the hours they were sampled,
            # in use or not: each part's exposure is then its share of the hours in use)
            parts = max((sampled[0] if sampled else hours) / horizon_h, 1.0)
            k = np.sort(np.asarray(counts.get(group, []), dtype=float))
            drop = min(len(k), max(1, int(math.ceil(self.trim * parts))))
            k = k[: len(k) - drop]
            zeros = max(parts - drop - len(k), 0.0)
            mu, sigma = fit_lognormal(k, zeros, hours / parts, prior, self.prior_spread, self._fleet.get(group))
            mu = max(mu, math.log(self.min_fleet_rate_per_h) - 2.0 * sigma)
            self._fleet[group] = (mu, sigma)
            self._log_prior[group] = log_rate_weights(mu, sigma, PRIOR_FLOOR)
        self._learned_at = now

    def _fold(self, s: CounterRecord, now: float) -> None:
        """Move episodes older than the longest window into the part's forgotten history."""
        horizon = now - WINDOWS_S[-1]
        if horizon <= s.hist_at:
            return
        decay = 0.5 ** ((horizon - s.hist_at) / self.history_halflife_s)
        start = max(s.first, s.hist_at)
        s.t_hist = s.t_hist * decay + max(0.0, horizon - start) / 3600.0
        s.k_hist *= decay
        while s.episodes and s.episodes[0][0] <= horizon:
            ts, _ = s.retire_oldest()
            s.k_hist += 0.5 ** ((horizon - ts) / self.history_halflife_s)
        s.hist_at = horizon

    def _prior_rate(self, metric: str) -> float:
        """The counter's prior healthy rate (episodes per hour), at least ``min_fleet_rate_per_h``."""
        return max(COUNTERS[metric][0], self.min_fleet_rate_per_h)

    def fleet_rate(self, metric: str, model: str = "") -> float:
        """Healthy episodes per hour of a part of this fleet, the mean of its spread (the counter's prior until the
        fleet says)."""
        mu, sigma = self._fleet.get((metric, model), (math.log(self._prior_rate(metric)), self.prior_spread))
        return max(math.exp(mu + sigma * sigma / 2.0), self.min_fleet_rate_per_h)

    def _fleet_log_prior(self, group: tuple[str, str]) -> np.ndarray:
        """The log mass over rates of a healthy part of ``group`` (the counter's prior until the fleet is fitted)."""
        lp = self._log_prior.get(group)
        if lp is None:
            lp = self._log_prior[group] = log_rate_weights(math.log(self._prior_rate(group[0])), self.prior_spread,
                                                           PRIOR_FLOOR)
        return lp
