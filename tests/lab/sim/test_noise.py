"""Healthy parts' background errors (lab/sim/noise.py): the bursty preset's touched cables cross a limit's hourly
count now and then, and asking for them leaves the other presets' draws as they were."""

import numpy as np

from lab.sim.noise import BURSTY, REALISTIC, PartNoise
from lab.sim.streams import StepStreams


def draws(spec, seed=11, parts=512, days=14, dt=300.0):
    rng = np.random.default_rng(seed)
    noise = PartNoise(spec, parts, rng, name="c")
    return noise.increments(StepStreams(seed), int(days * 86400 / dt), dt)


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


def test_loaded_parts_err_ten_times_less_while_idle_and_links_the_same_either_way():
    from lab.sim.noise import LOADED, NOISY

    parts, steps, dt = 512, 2016, 300.0  # a week at 5 minutes
    spec = LOADED["pcie_replay_total"]
    assert spec.idle_share == 0.1 and LOADED["symbol_error_total"] is NOISY["symbol_error_total"]
    # the same parts (one rate draw) idle the first half of the week and busy the second
    rng = np.random.default_rng(3)
    noise = PartNoise(spec, parts, rng)
    load = np.zeros((parts, steps))
    load[:, steps // 2:] = 1.0
    x = noise.increments(StepStreams(3), steps, dt, load)
    idle, busy = x[:, : steps // 2].sum(), x[:, steps // 2:].sum()
    assert 5.0 < busy / idle < 20.0, (idle, busy)  # bursts do not follow the load: a little under 10
    # a rate that does not follow the load draws what it drew without one
    links = NOISY["symbol_error_total"]
    a = PartNoise(links, parts, np.random.default_rng(5))
    b = PartNoise(links, parts, np.random.default_rng(5))
    assert np.array_equal(a.increments(StepStreams(6), steps, dt, load), b.increments(StepStreams(6), steps, dt))
