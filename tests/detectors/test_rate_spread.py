import math

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.stats import poisson

from detectors.rate_spread import GRID_PER_H, LOG_SIGMA, episodes_tail, fit_lognormal, log_rate_weights


def test_the_tail_is_the_poisson_averaged_over_the_rates():
    """Known answers: a rate known exactly gives the Poisson tail; a log-normal spread of rates gives the Poisson
    tail integrated over it (scipy's quad); no episodes asked for is certain."""
    from scipy.integrate import quad
    from scipy.stats import norm

    point = np.full(len(GRID_PER_H), -np.inf)
    point[64] = 0.0  # all mass on one rate
    r = GRID_PER_H[64]
    assert episodes_tail(np.array([4.0]), np.array([2.0]), point[None, :])[0] == pytest.approx(poisson.sf(3, 2 * r))
    mu, sigma = np.log(0.05), 1.5

    def integrand(x, k, t):
        return poisson.sf(k - 1, np.exp(x) * t) * norm.pdf(x, mu, sigma)

    lw = log_rate_weights(mu, sigma)
    for k, t in ((3.0, 1.0), (6.0, 3.0), (1.0, 12.0)):
        expected = quad(integrand, np.log(GRID_PER_H[0]), np.log(GRID_PER_H[-1]), args=(k, t), limit=200)[0]
        assert episodes_tail(np.array([k]), np.array([t]), lw[None, :])[0] == pytest.approx(expected, rel=0.02)
    assert episodes_tail(np.array([0.0]), np.array([1.0]), lw[None, :])[0] == 1.0


def test_the_fleets_spread_is_found_from_its_parts_counts():
    """Counts of 5,000 parts over a day, their rates log-normal (median 0.02/h, sigma 1.5), as the realistic noise
    draws them: the fit finds the median and the spread; a fleet of alike parts is found narrow."""
    rng = np.random.default_rng(7)
    rates = 0.02 * np.exp(rng.normal(0.0, 1.5, 5000))
    k = rng.poisson(rates * 24.0).astype(float)
    mu, sigma = fit_lognormal(k[k > 0], float((k == 0).sum()), 24.0, prior_rate=0.2, prior_spread=1.5)
    assert np.exp(mu) == pytest.approx(0.02, rel=0.35) and sigma == pytest.approx(1.5, abs=0.3)
    alike = rng.poisson(np.full(5000, 0.02) * 48.0).astype(float)
    mu, sigma = fit_lognormal(alike[alike > 0], float((alike == 0).sum()), 48.0, prior_rate=0.2, prior_spread=1.5)
    assert np.exp(mu + sigma ** 2 / 2) == pytest.approx(0.02, rel=0.2) and sigma < 0.5


def _cost(counts, zeros, exposure_h, prior_rate, prior_spread):
    """The fit's cost written out plainly (log rate weights from :func:`log_rate_weights`, log sigma clipped)."""
    from scipy.special import gammaln, logsumexp
    values, mult = np.unique(np.round(counts), return_counts=True)
    values, mult = np.concatenate(([0.0], values)), np.concatenate(([zeros], mult.astype(float)))
    mean = exposure_h * GRID_PER_H
    log_pois = values[:, None] * np.log(mean) - mean - gammaln(values + 1.0)[:, None]

    def cost(x):
        mu, ls = x[0], float(np.clip(x[1], *LOG_SIGMA))
        ll = logsumexp(log_pois + log_rate_weights(mu, math.exp(ls)), axis=1)
        return -(mult * ll).sum() + 0.5 * ((mu - math.log(prior_rate)) / 3.0) ** 2 + \
            0.5 * (ls - math.log(prior_spread)) ** 2
    return cost


def test_the_fit_is_the_posteriors_mode_from_near_and_far():
    """Fleets of every kind (0-400 parts, median rates over eight decades, spreads 0.05-4, exposures of minutes to
    months), from the prior, from a start nearby (the last fit) and from one far off: the fit's cost is no higher
    than Nelder-Mead's from the same start, nor than Nelder-Mead's from the fit's own answer."""
    rng = np.random.default_rng(11)
    for case in range(25):
        n = int(rng.integers(0, 400))
        exposure_h = float(rng.uniform(0.05, 2000.0))
        rates = np.exp(rng.normal(rng.normal(-4.0, 3.0), rng.uniform(0.05, 4.0), n))
        k = rng.poisson(np.minimum(rates * exposure_h, 1e6)).astype(float)
        args = (k[k > 0], float((k == 0).sum()) + float(rng.uniform(0.0, 5.0)), exposure_h,
                float(math.exp(rng.uniform(-7.0, 0.0))), float(rng.uniform(0.5, 3.0)))
        cost = _cost(*args)
        truth = fit_lognormal(*args)
        for start in (None, (truth[0] + 0.1, truth[1] * 1.1), (float(rng.normal(-5.0, 3.0)), 3.0)):
            mu, sigma = fit_lognormal(*args, start=start)
            x0 = np.array((mu, math.log(sigma)))
            nm_start = np.array((math.log(args[3]), math.log(args[4])) if start is None else
                                (start[0], math.log(start[1])))
            for x in (nm_start, x0):
                other = minimize(cost, x, method="Nelder-Mead", options={"xatol": 1e-5, "fatol": 1e-7}).x
                assert cost(x0) <= cost(other) + 1e-7 * max(1.0, abs(cost(other))), (case, start)


def test_episodes_bounded_by_their_spans_take_the_smaller_of_two_tails():
    """At a known rate, with spans: the binomial tail of k of the exposure's spans (and one more) each with errors at
    chance 1 - exp(-rate * span), where that is under the Poisson tail (a run of episodes near one a span), the
    Poisson tail where not (a few episodes in a long window), and the Poisson tail past the spans' count. A record's
    weights with spans match the Poisson record's for a quiet part, and favour higher rates for one with errors in
    nearly every span."""
    from scipy.stats import binom

    from detectors.rate_spread import LOG_GRID, record_log_weights

    point = np.full(len(GRID_PER_H), -np.inf)
    point[100] = 0.0
    r, span = GRID_PER_H[100], 225.0 / 3600.0  # 1.8 an hour
    p = -math.expm1(-r * span)
    for k, t in ((12.0, 1.0), (10.0, 1.0), (2.0, 12.0)):
        got = episodes_tail(np.array([k]), np.array([t]), point[None, :], span)[0]
        spans = binom.sf(k - 1, t / span + 1, p)
        assert got == pytest.approx(min(spans, poisson.sf(k - 1, r * t)), rel=1e-6)
    assert episodes_tail(np.array([12.0]), np.array([1.0]), point[None, :], span)[0] < \
        0.02 * episodes_tail(np.array([12.0]), np.array([1.0]), point[None, :])[0]
    assert episodes_tail(np.array([40.0]), np.array([1.0]), point[None, :], span)[0] == pytest.approx(
        poisson.sf(39, r), rel=1e-6)  # (more than the spans hold: the Poisson tail)
    flat = np.zeros(len(GRID_PER_H))
    quiet = record_log_weights(flat, np.array([1.0]), np.array([10.0]), span)[0]
    plain = record_log_weights(flat, np.array([1.0]), np.array([10.0]))[0]
    low = GRID_PER_H < 1.0
    assert np.allclose(quiet[low] - quiet[low].max(), plain[low] - plain[low].max(), atol=0.05)
    busy = record_log_weights(flat, np.array([15.0]), np.array([1.0]), span)[0]
    assert GRID_PER_H[np.argmax(busy)] > 2 * GRID_PER_H[np.argmax(record_log_weights(flat, np.array([15.0]),
                                                                                       np.array([1.0]))[0])]
    assert np.isfinite(busy).all() and LOG_GRID.shape == busy.shape


def test_the_cheap_test_of_a_records_chance_gives_the_tails_own_answer():
    """``episodes_tail_at_most`` answers as the tail itself does, with spans and without, on records from quiet to
    one error a span, against fleets narrow and wide, including records whose chance stands just at the bar (where
    the bound cannot settle it and the tail is worked out)."""
    from detectors.rate_spread import episodes_tail_at_most, log_rate_weights

    rng = np.random.default_rng(11)
    n = 4000
    t = rng.uniform(0.05, 200.0, n)
    k = np.maximum(1.0, np.round(t * np.exp(rng.uniform(np.log(1e-3), np.log(16.0), n))))
    lw = np.stack([log_rate_weights(m, s) for m, s in zip(rng.uniform(-8.0, 1.0, n), rng.uniform(0.2, 3.0, n))])
    for span in (None, 225.0 / 3600.0):
        exact = episodes_tail(k, t, lw, span)
        for alpha in (1e-4, float(np.median(exact)), float(np.quantile(exact, 0.1))):
            assert np.array_equal(episodes_tail_at_most(k, t, lw, alpha, span), exact <= alpha)
        at_bar = exact[(exact > 0) & (exact < 1)][:50]  # a chance exactly at the bar is at most it
        rows = np.isin(exact, at_bar)
        for alpha in at_bar:
            assert np.array_equal(episodes_tail_at_most(k[rows], t[rows], lw[rows], alpha, span),
                                  exact[rows] <= alpha)


def test_a_windows_tail_kept_for_the_next_call_is_the_same_figure():
    """The tails kept by (count, exposure) give the figures worked out afresh, bit for bit, through a cache that
    fills and begins again."""
    import detectors.rate_spread as rate_spread

    rng = np.random.default_rng(3)
    kept = rate_spread._TailRows(size=64)
    lw = np.stack([_log_rate_weights_of(rng) for _ in range(40)])
    for _ in range(20):
        k = rng.integers(0, 30, 40).astype(float)
        t = rng.choice([1.0, 3.0, 12.0, 0.75], 40)
        w = rate_spread._weights(lw)
        for span in (None, 225.0 / 3600.0):
            afresh = episodes_tail(k, t, lw, span)
            got = np.where(k > 0, (w * kept.rows(k, t, span)).sum(axis=-1), 1.0)
            assert np.array_equal(got, afresh)
            assert np.array_equal(episodes_tail(k, t, lw, span, reuse=True), afresh)
    assert len(kept._rows) <= 64 + 40


def _log_rate_weights_of(rng: np.random.Generator) -> np.ndarray:
    from detectors.rate_spread import log_rate_weights

    return log_rate_weights(rng.uniform(-6.0, 0.0), rng.uniform(0.3, 2.5))


@pytest.mark.parametrize("span", [None, 225.0 / 3600.0])
def test_the_cheap_floor_under_a_records_chance_is_under_its_tail_at_every_rate(span):
    """The floor ``episodes_tail_at_most`` settles records by is at most the tail at every rate of the grid, for
    whole counts and the decayed (fractional) ones of a part's history, from a fraction of an episode to thousands;
    and it is a half wherever the rate gives at least the count (a noisy part's record inside the fleet's spread is
    settled without its tail)."""
    from detectors.rate_spread import _log_tail_floor, _tail_grid

    rng = np.random.default_rng(23)
    n = 3000
    t = np.exp(rng.uniform(np.log(0.05), np.log(300.0), n))
    k = np.where(rng.random(n) < 0.5, np.round(np.exp(rng.uniform(0.0, 7.0, n))), np.exp(rng.uniform(-3.0, 7.0, n)))
    floor, tail = np.exp(_log_tail_floor(k, t, span)), _tail_grid(k, t, span)
    resolved = tail > 1e-250  # (the exact tail itself underflows further out)
    assert (floor[resolved] <= tail[resolved] * (1.0 + 1e-9)).all()
    if span is None:
        assert (floor[(t[:, None] * GRID_PER_H >= k[:, None])] >= 0.5).all()
    assert (floor >= 0.5).mean() > 0.1
    # the half of the mass above where the floor stands at a half: under each record's tail, and over it nowhere
    from detectors.rate_spread import _half_mass

    lw = np.stack([log_rate_weights(m, sd) for m, sd in zip(rng.uniform(-8.0, 2.0, n), rng.uniform(0.2, 3.0, n))])
    w = np.exp(lw - lw.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    half = _half_mass(k, t, w, span)
    assert (half <= episodes_tail(k, t, lw, span) * (1.0 + 1e-9)).all()
    assert (half <= (w * floor).sum(axis=1) * (1.0 + 1e-9)).all() and (half > 1e-3).mean() > 0.2


def test_a_noisy_record_inside_the_fleets_spread_is_settled_without_its_tail(monkeypatch):
    """A part whose record is at the fleet's upper edge but well inside its spread (a chance of a few hundredths) is
    answered by the floor alone: its tail over the grid is never worked out."""
    import detectors.rate_spread as rate_spread

    lw = np.stack([log_rate_weights(np.log(0.05), 1.5)] * 3)
    k, t = np.array([80.0, 200.5, 30.0]), np.array([40.0, 100.0, 12.0])  # 2, 2 and 2.5 an hour
    exact = episodes_tail(k, t, lw, 225.0 / 3600.0)
    assert (exact > 1e-3).all()
    monkeypatch.setattr(rate_spread, "episodes_tail", lambda *a, **kw: pytest.fail("tail worked out"))
    assert not rate_spread.episodes_tail_at_most(k, t, lw, 1e-4, 225.0 / 3600.0).any()
