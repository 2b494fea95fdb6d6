"""A part's unknown healthy rate of error episodes, as a mass on a grid of rates.

A fleet's healthy parts differ: most alike, a few a hundred times noisier. Their rates are taken as log-normal
(:func:`fit_lognormal` finds the spread from every part's count), a part's own record narrows that mass
(:func:`record_log_weights`), and :func:`episodes_tail` gives the chance of a count over an exposure, the
Poisson tail averaged over the mass. The trend detector (:mod:`detectors.trend`) judges counters with it.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import betainc, gammainc, gammaln

GRID_PER_H = np.logspace(-6.0, 2.0, 129)
"""The rates a part may have, episodes per hour (5-minute episodes can show at most 12 an hour)."""
LOG_GRID = np.log(GRID_PER_H)


def log_rate_weights(mu: float, sigma: float, floor: float = -np.inf) -> np.ndarray:
    """The log of the log-normal's mass on :data:`GRID_PER_H` (log rate ~ Normal(``mu``, ``sigma``)), summing to 1,
    no lower than ``floor``."""
    lw = -0.5 * ((LOG_GRID - mu) / sigma) ** 2
    top = lw.max()
    return np.maximum(lw - (top + np.log(np.exp(lw - top).sum())), floor)


PRIOR_FLOOR = math.log(1e-300)
"""The least log mass a rate keeps in a part's prior (a record can still move it)."""


def episodes_tail(k: np.ndarray, exposure_h: np.ndarray, log_weights: np.ndarray,
                  span_h: float | None = None, reuse: bool = False) -> np.ndarray:
    """P(K >= k) for K Poisson over ``exposure_h`` hours at a rate drawn from ``log_weights`` (``[..., grid]``, the
    log of a mass on :data:`GRID_PER_H`, normalised here). ``k`` <= 0 gives 1.

    With ``span_h``, K counts episodes, at most one a span: the chance is also at most the binomial tail of ``k`` of
    the exposure's spans (one more for a window that begins inside one) having errors, each with the chance
    ``1 - exp(-rate * span_h)``; the smaller of the two, each a bound on the chance of that many episodes of a part
    whose errors come at that rate (a span with errors is one episode however many it holds: the Poisson tail of
    errors overstates a run of episodes many times near one a span).

    With ``reuse``, each (``k``, exposure)'s tail over the grid is kept for the next call (the counts of fixed windows
    come back tick after tick; a record's exposure does not): the same figures, worked out once."""
    k = np.asarray(k, dtype=float)
    exposure = np.broadcast_to(np.asarray(exposure_h, dtype=float), k.shape)
    tail = (_TAIL_ROWS.rows if reuse else _tail_grid)(k.ravel(), exposure.ravel(), span_h)
    tail = tail.reshape(k.shape + (len(GRID_PER_H),))
    return np.where(k > 0, (_weights(log_weights) * tail).sum(axis=-1), 1.0)


def episodes_tail_at_most(k: np.ndarray, exposure_h: np.ndarray, log_weights: np.ndarray, alpha: float,
                          span_h: float | None = None) -> np.ndarray:
    """``episodes_tail(k, exposure_h, log_weights, span_h) <= alpha``, the same answer, for 1-D ``k`` and
    ``exposure_h`` (``k`` > 0, ``exposure_h`` > 0) and 2-D ``log_weights``: the tails are worked out only where a
    lower bound on them, cheap to reach, does not already stand above ``alpha`` (most of a fleet's records are
    nothing like so unlikely).

    The bound is first the half of the mass at rates that give at least the count (:func:`_half_mass`: a noisy
    part's record inside the fleet's spread), then for the records it leaves :func:`_log_tail_floor`'s at each
    rate. A bound within a thousandth over ``alpha`` is not trusted."""
    k = np.asarray(k, dtype=float)
    exposure = np.asarray(exposure_h, dtype=float)
    w = _weights(log_weights)
    undecided = np.zeros(len(k), dtype=bool)
    rows = np.flatnonzero(_half_mass(k, exposure, w, span_h) <= alpha * 1.001)
    if len(rows):
        low = _log_tail_floor(k[rows], exposure[rows], span_h)
        undecided[rows] = (w[rows] * np.exp(low)).sum(axis=-1) <= alpha * 1.001
    out = np.zeros(len(k), dtype=bool)
    if undecided.any():
        out[undecided] = episodes_tail(k[undecided], exposure[undecided], log_weights[undecided], span_h) <= alpha
    return out


_LOG_HALF = math.log(0.5)


def _log_tail_floor(k: np.ndarray, exposure_h: np.ndarray, span_h: float | None) -> np.ndarray:
    """The log of a lower bound on :func:`_tail_grid` at each rate of the grid, ``[len(k), grid]`` (1-D ``k`` > 0
    and ``exposure_h`` > 0), cheap to reach.

    Each tail's first term, ``mean^k e^-mean / k!`` for the Poisson one and ``x^k (1-x)^(n-k+1) / (k B(k, n-k+1))``
    for the binomial one (``x`` a span's chance of errors, ``n`` the spans): the rest of either series is positive.
    And one half where the count is at most what the rate gives: the Poisson tail is a gamma's distribution function
    at the mean, at least a half where the mean is at least ``k`` (a gamma's median is under its mean); the binomial
    one a beta's at ``x``, at least a half where ``x`` is at least the beta's mean and its mode (between which its
    median lies, both shapes at least 1). Without that half, a noisy part's record near the fleet's top was never
    settled by the bound: its first term is the chance of exactly its count, a few hundredths of its tail."""
    kk, t = k[:, None], exposure_h[:, None]
    mean = t * GRID_PER_H
    low = kk * np.log(mean) - mean - gammaln(kk + 1.0)
    low = np.where(mean >= kk, np.maximum(low, _LOG_HALF), low)
    if span_h is not None:
        trials = t / span_h + 1.0
        b = np.maximum(trials - kk + 1.0, 1e-300)
        spans = (kk * (_span_hit(span_h) + math.log(span_h)) - b * (GRID_PER_H * span_h) - np.log(kk)
                 - (gammaln(kk) + gammaln(b) - gammaln(kk + b)))
        x = -np.expm1(-GRID_PER_H * span_h)
        halfway = (kk >= 1.0) & (x >= _beta_half_at(kk, trials))
        spans = np.where(halfway, np.maximum(spans, _LOG_HALF), spans)
        low = np.where(kk <= trials, np.minimum(low, spans), low)
    return low


def _beta_half_at(k: np.ndarray, trials: np.ndarray) -> np.ndarray:
    """A span's chance of errors from which the binomial tail of ``k`` of ``trials`` spans is at least a half: the
    beta's mean and mode, between which its median lies (``k`` at least 1, ``trials - k + 1`` at least 1)."""
    return np.maximum(k / (trials + 1.0), (k - 1.0) / (trials - 1.0))


def _half_mass(k: np.ndarray, exposure_h: np.ndarray, w: np.ndarray, span_h: float | None) -> np.ndarray:
    """A lower bound on :func:`episodes_tail` of each record (1-D ``k`` > 0 and ``exposure_h`` > 0, ``w`` the mass on
    the grid): half the mass of the rates above those where :func:`_log_tail_floor` stands at a half (the rates giving
    at least the count; with spans, also a span's chance at least the beta's mean and mode), found by bisection, one
    rate further up for rounding. A record with ``k`` under 1 within the spans gets none (no half is claimed there)."""
    edge = np.searchsorted(GRID_PER_H, k / exposure_h) + 1
    if span_h is not None:
        trials = exposure_h / span_h + 1.0
        within = k <= trials
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = -np.log1p(-np.minimum(_beta_half_at(k, trials), 1.0)) / span_h
        edge = np.where(within, np.maximum(edge, np.searchsorted(GRID_PER_H, rate) + 1), edge)
        edge = np.where(within & (k < 1.0), len(GRID_PER_H), edge)
    above = np.cumsum(w[:, ::-1], axis=1)[:, ::-1]  # the mass at each rate and above it
    above = np.concatenate((above, np.zeros((len(k), 1))), axis=1)
    return 0.5 * np.take_along_axis(above, np.minimum(edge, len(GRID_PER_H))[:, None], axis=1)[:, 0]


def _weights(log_weights: np.ndarray) -> np.ndarray:
    """The mass on the grid from its log (``[..., grid]``), summing to 1."""
    lw = np.asarray(log_weights, dtype=float)
    w = np.exp(lw - lw.max(axis=-1, keepdims=True))
    w /= w.sum(axis=-1, keepdims=True)
    return w


def _tail_grid(k: np.ndarray, exposure_h: np.ndarray, span_h: float | None) -> np.ndarray:
    """The tail of :func:`episodes_tail` at each rate of the grid, ``[len(k), grid]`` (1-D ``k`` and ``exposure_h``;
    what ``k`` <= 0 gives here is not used)."""
    kk = np.maximum(k, 1e-300)[:, None]
    exposure = exposure_h[:, None]
    tail = gammainc(kk, exposure * GRID_PER_H)  # P(Poisson(mean) >= k), continuous in k
    if span_h is not None:
        trials = exposure / span_h + 1.0
        with np.errstate(invalid="ignore"):
            spans = betainc(kk, np.maximum(trials - kk + 1.0, 1e-300), -np.expm1(-GRID_PER_H * span_h))
        tail = np.where(kk <= trials, np.minimum(tail, spans), tail)
    return tail


class _TailRows:
    """:func:`_tail_grid`'s rows kept by (k, exposure, span), at most ``size`` of them (then begun again)."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._rows: dict[tuple[float, float, float | None], np.ndarray] = {}

    def rows(self, k: np.ndarray, exposure_h: np.ndarray, span_h: float | None) -> np.ndarray:
        """The rows of ``k`` and ``exposure_h`` (1-D), worked out where not kept."""
        keys = [(a, b, span_h) for a, b in zip(k.tolist(), exposure_h.tolist())]
        missing = [i for i, key in enumerate(keys) if key not in self._rows]
        if missing and len(self._rows) + len(missing) > self.size:
            self._rows.clear()
            missing = list(range(len(keys)))
        if missing:
            fresh = _tail_grid(k[missing], exposure_h[missing], span_h)
            for i, row in zip(missing, fresh):
                row.flags.writeable = False
                self._rows[keys[i]] = row
        if not keys:
            return np.empty((0, len(GRID_PER_H)))
        return np.stack([self._rows[key] for key in keys])


_TAIL_ROWS = _TailRows()


def record_log_weights(log_prior: np.ndarray, k_before: np.ndarray, t_before_h: np.ndarray,
                       span_h: float | None = None) -> np.ndarray:
    """The log mass over rates after a record of ``k_before`` episodes in ``t_before_h`` hours (unnormalised).

    With ``span_h``, episodes at most one a span (:func:`episodes_tail`): the likelihood of ``k_before`` spans with
    errors and the rest of the record's spans without, so a record with errors in nearly every span says "at least
    so many", not "about so many"."""
    k = np.asarray(k_before, dtype=float)[..., None]
    t = np.asarray(t_before_h, dtype=float)[..., None]
    if span_h is None:
        return log_prior + k * LOG_GRID - t * GRID_PER_H
    return log_prior + k * _span_hit(span_h) - np.maximum(t - k * span_h, 0.0) * GRID_PER_H


@functools.lru_cache(maxsize=8)
def _span_hit(span_h: float) -> np.ndarray:
    """log(1 - exp(-rate * span)) - log(span) on the grid: a span's log chance of errors, in the units of a log rate
    (the log rate itself where the span is short). Read-only: shared by every call."""
    with np.errstate(divide="ignore"):
        hit = np.log(-np.expm1(-GRID_PER_H * span_h)) - math.log(span_h)
    hit.flags.writeable = False
    return hit


LOG_SIGMA = (-3.0, 1.5)
"""The bounds of the fitted spread's log sigma (0.05 to 4.5 in log rate)."""


def fit_lognormal(counts: np.ndarray, zeros: float, exposure_h: float, prior_rate: float,
                  prior_spread: float, start: tuple[float, float] | None = None) -> tuple[float, float]:
    """The fleet's log-normal spread of rates, (mu, sigma) of the log rate, from its parts' episode counts over
    ``exposure_h`` hours each (``counts`` of the parts that had any, ``zeros`` parts without): Poisson counts of a
    log-normal rate, the maximum a posteriori with log rate ~ Normal(log ``prior_rate``, 3) and log sigma ~
    Normal(log ``prior_spread``, 1) (log sigma within [-3, 1.5]), so a fleet that has said little is taken as
    spread as the prior says.

    Found by Newton's method on the exact gradient and Hessian from ``start`` (the last fit: two or three steps
    a fit), with a backtracking line search; where that does not converge (a start far off, a flat posterior),
    by Nelder-Mead from ``start``."""
    posterior = _NegLogPosterior(counts, zeros, exposure_h, prior_rate, prior_spread)
    x0 = (start[0], math.log(start[1])) if start is not None else (posterior.mu0, posterior.ls0)
    found = _newton(posterior, x0[0], min(max(x0[1], LOG_SIGMA[0]), LOG_SIGMA[1]))
    if found is None:
        from scipy.optimize import minimize  # (here: rarely needed, and importing it costs a process 0.3 s)

        best = minimize(lambda x: posterior(float(x[0]), float(np.clip(x[1], *LOG_SIGMA)))[0], np.array(x0),
                        method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-3, "maxiter": 400})
        found = float(best.x[0]), float(np.clip(best.x[1], *LOG_SIGMA))
    return found[0], math.exp(found[1])


class _NegLogPosterior:
    """The fit's cost at (mu, log sigma), with its gradient and Hessian.

    With ``a`` = -z²/2 (z = (log rate - mu) / sigma) on the grid and ``p`` its normalised mass, a count's log
    likelihood is logsumexp(log Poisson + a - logsumexp a); its derivatives are moments of the count's posterior
    ``q`` over the grid against ``p``: summed over the counts, the gradient is ``r @ ∂a`` and the Hessian
    ``r @ (∂²a + c cᵀ) - Σ n g gᵀ``, where ``r`` = Σ n q - (Σ n) p, ``c`` = ∂a - p @ ∂a and ``g`` = q @ c."""

    def __init__(self, counts: np.ndarray, zeros: float, exposure_h: float, prior_rate: float, prior_spread: float):
        values, mult = np.unique(np.round(np.asarray(counts, dtype=float)), return_counts=True)
        mult = mult.astype(float)
        if zeros > 0:
            values, mult = np.concatenate(([0.0], values)), np.concatenate(([float(zeros)], mult))
        mean = exposure_h * GRID_PER_H
        self.log_pois = values[:, None] * np.log(mean)[None, :] - mean[None, :] - gammaln(values + 1.0)[:, None]
        self.mult = mult
        self.mu0, self.ls0 = math.log(prior_rate), math.log(prior_spread)

    def __call__(self, mu: float, ls: float, derivatives: bool = False) -> tuple:
        """(cost,) or (cost, gradient, Hessian) at log-rate mean ``mu`` and log sigma ``ls``."""
        s = math.exp(ls)
        z = (LOG_GRID - mu) / s
        a = -0.5 * z * z
        top = a.max()
        e = np.exp(a - top)
        se = e.sum()
        m = self.log_pois + (a - (top + math.log(se)))
        mt = m.max(axis=1)
        em = np.exp(m - mt[:, None])
        sm = em.sum(axis=1)
        mult = self.mult
        cost = -float(mult @ (mt + np.log(sm))) + 0.5 * ((mu - self.mu0) / 3.0) ** 2 + 0.5 * (ls - self.ls0) ** 2
        if not derivatives:
            return (cost,)
        p = e / se
        q = em / sm[:, None]
        r = mult @ q - mult.sum() * p
        d_mu, d_ls = z / s, z * z  # ∂a; ∂²a: -1/s² (falls out: r sums to 0), -2z/s, -2z²
        c_mu, c_ls = d_mu - p @ d_mu, d_ls - p @ d_ls
        g_mu, g_ls = q @ c_mu, q @ c_ls
        grad = (-float(r @ d_mu) + (mu - self.mu0) / 9.0, -float(r @ d_ls) + (ls - self.ls0))
        h_mumu = float(r @ (c_mu * c_mu) - mult @ (g_mu * g_mu))
        h_muls = float(r @ (c_mu * c_ls - 2.0 * z / s) - mult @ (g_mu * g_ls))
        h_lsls = float(r @ (c_ls * c_ls - 2.0 * z * z) - mult @ (g_ls * g_ls))
        return cost, grad, (1.0 / 9.0 - h_mumu, -h_muls, 1.0 - h_lsls)


def _newton(posterior: _NegLogPosterior, mu: float, ls: float, steps: int = 60) -> tuple[float, float] | None:
    """The posterior's mode from (``mu``, ``ls``) by Newton's method (the Hessian shifted where it is not positive
    definite, log sigma held at a bound it presses on, a step halved until the cost falls enough), or None."""
    lo, hi = LOG_SIGMA
    f, g, (a, b, c) = posterior(mu, ls, True)
    for _ in range(steps):
        trace, det = a + c, a * c - b * b
        least = 0.5 * trace - math.sqrt(max(0.25 * trace * trace - det, 0.0))
        if least <= 1e-9:
            shift = 1e-9 - least + 1e-3 * max(1.0, abs(trace))
            a, c = a + shift, c + shift
            det = a * c - b * b
        s_mu, s_ls = -(c * g[0] - b * g[1]) / det, -(a * g[1] - b * g[0]) / det
        if (ls <= lo and s_ls < 0.0) or (ls >= hi and s_ls > 0.0):
            s_mu, s_ls = -g[0] / a, 0.0
        if max(abs(s_mu), abs(s_ls)) < 1e-6:
            return mu, ls
        t = 1.0
        while t > 1e-6:
            mu_t, ls_t = mu + t * s_mu, min(max(ls + t * s_ls, lo), hi)
            f_t, g_t, h_t = posterior(mu_t, ls_t, True)
            if f_t <= f + 1e-4 * (g[0] * (mu_t - mu) + g[1] * (ls_t - ls)) + 1e-12 * abs(f):
                break
            t *= 0.5
        else:
            return None
        mu, ls, f, g, (a, b, c) = mu_t, ls_t, f_t, g_t, h_t
    return None
