"""Per-row smoothing shared by the thermal detectors: a time-aware EWMA per entity row, and a GPU's load state.

Both the peer detector and the shared-heat judgment keep baselines per accelerator and per load state (busy, idle,
or unknown where utilisation is not exported): a GPU's temperature busy and idle differ by tens of degrees, which is
no change of its health.
"""

from __future__ import annotations

import numpy as np

LOAD_ANY, LOAD_BUSY, LOAD_IDLE = 0, 1, 2
LOAD_STATES = (LOAD_ANY, LOAD_BUSY, LOAD_IDLE)
BUSY_UTIL_PCT = 50.0


def load_state(util: np.ndarray) -> np.ndarray:
    """Each accelerator's load state from its utilisation: busy at 50 % or more, idle under, any where unknown."""
    return np.where(np.isnan(util), LOAD_ANY, np.where(util >= BUSY_UTIL_PCT, LOAD_BUSY, LOAD_IDLE))


class RowEwma:
    """Per-row EWMA with its own last time; a gap of more than ``restart_after`` half-lives restarts it.

    With ``mean_first``, a row's first half-lives are a plain running mean (each reading's weight its interval over
    the time since the row's first one) until the EWMA's own weight is larger: a long baseline does not keep its
    first reading's noise for hours. ``since`` is each row's first reading (its restart's)."""

    def __init__(self, halflife_s: float, restart_after: float | None = 4.0, mean_first: bool = False):
        self.halflife_s = halflife_s
        self.restart_after = restart_after
        self.mean_first = mean_first
        self.value = np.full(0, np.nan)
        self.at = np.full(0, np.nan)
        self.since = np.full(0, np.nan)

    def grow(self, n: int) -> None:
        if n > len(self.value):
            extra = n - len(self.value)
            self.value = np.concatenate([self.value, np.full(extra, np.nan)])
            self.at = np.concatenate([self.at, np.full(extra, np.nan)])
            self.since = np.concatenate([self.since, np.full(extra, np.nan)])

    def forget(self, rows: np.ndarray) -> None:
        """Drop these rows' values: their next reading starts them afresh."""
        self.value[rows], self.at[rows], self.since[rows] = np.nan, np.nan, np.nan

    def update(self, rows: np.ndarray, x: np.ndarray, now: float, frozen: np.ndarray | None = None) -> np.ndarray:
        """Fold ``x`` into ``rows`` (not where ``frozen``: they keep value and time) and return the values."""
        if frozen is not None and not frozen.any():  # (none frozen, as in a fleet sampled every tick: no masking)
            frozen = None
        prev, at = self.value[rows], self.at[rows]
        gap = now - at  # (NaN for a row never read)
        unread = np.isnan(at)
        fresh = unread | (gap > self.restart_after * self.halflife_s) if self.restart_after is not None else unread
        since = np.where(fresh, now, self.since[rows])
        with np.errstate(invalid="ignore"):
            alpha = 1.0 - 0.5 ** (gap / self.halflife_s)
            if self.mean_first:
                alpha = np.maximum(alpha, gap / (now - since + gap))
        out = np.where(fresh, x, prev + alpha * (x - prev))
        if frozen is not None:
            keep_time = frozen & ~unread
            out = np.where(keep_time, prev, out)
            self.at[rows] = np.where(keep_time, at, now)
        else:
            self.at[rows] = now
        self.since[rows] = since
        self.value[rows] = out
        return out
