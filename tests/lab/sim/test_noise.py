"""Healthy parts' background errors (lab/sim/noise.py): the bursty preset's touched cables cross a limit's hourly
count now and then, and asking for them leaves the other presets' draws as they were."""

import numpy as np

from lab.sim.noise import BURSTY, REALISTIC, PartNoise


def draws(spec, seed=11, parts=512, days=14, dt=300.0):
    rng = np.random.default_rng(seed)
    noise = PartNoise(spec, parts, rng)
    return noise.increments(rng, int(days * 86400 / dt), dt)


def test_touched_cables_cross_the_symbol_error_limit_in_one_sample_now_and_then():
    bursty = draws(BURSTY["symbol_error_total"])
    over = int((bursty >= 120).sum())
    # 512 ports x 14 days x 0.05 touches a day = 358 touches, about a third over 120 errors in one sample
    assert 60 <= over <= 200, over
    assert (draws(REALISTIC["symbol_error_total"]) >= 120).sum() == 0


def test_realistic_draws_are_the_same_whether_or_not_another_counter_is_bursty():
    spec = REALISTIC["ecc_sbe_total"]
    assert BURSTY["ecc_sbe_total"] is spec
    assert np.array_equal(draws(spec), draws(spec))
    no_touch = draws(REALISTIC["symbol_error_total"])
    with_field = draws(BURSTY["symbol_error_total"].__class__(**{**BURSTY["symbol_error_total"].__dict__,
                                                                  "touches_per_day": 0.0}))
    assert np.array_equal(no_touch, with_field)  # the touch process draws nothing when off
