"""Counters whose healthy errors come with use, judged on their part's clock in use (detectors/trend_use.py)."""

import numpy as np
import pandas as pd
import pytest

from detectors.contract import TickInput
from detectors.schema import events_frame
from detectors.trend import TrendDetector
from detectors.trend_use import InUseClock

STEP = 300.0


def gauges(util: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame({"entity": list(util), "metric": ["gpu_util_pct"] * len(util),
                         "last": list(util.values()), "max": list(util.values())})


def test_idle_time_is_counted_per_accelerator_and_per_node_for_its_ports():
    clock = InUseClock()
    # node a: both accelerators idle; node b: one of two busy (not idle: half its accelerators busy)
    for _ in range(4):
        clock.observe(gauges({"a/gpu0": 0.0, "a/gpu1": 10.0, "b/gpu0": 95.0, "b/gpu1": 0.0}), 30.0)
    assert clock.lag_s("a/gpu0") == 120.0 and clock.lag_s("b/gpu0") == 0.0 and clock.lag_s("b/gpu1") == 120.0
    assert clock.lag_s("a/mlx5_0:1") == 120.0 and clock.lag_s("b/mlx5_0:1") == 0.0
    # no utilisation known (a fleet that does not export it, a lost scrape): nothing is idle
    clock.observe(gauges({}), 30.0)
    clock.observe(gauges({"a/gpu0": float("nan")}), 30.0)
    assert clock.lag_s("a/gpu0") == 120.0 and clock.lag_s("a/mlx5_0:1") == 120.0
    names = np.array(["a/gpu0", "b/gpu0", "a/mlx5_0:1", "a"], dtype=object)
    clock.observe(gauges({"a/gpu0": 0.0, "a/gpu1": 0.0}), 30.0)
    kind, idle, lag = clock.rows(np.arange(4), names)
    assert idle.tolist() == [True, False, True, False] and lag.tolist() == [150.0, 0.0, 150.0, 0.0]
    assert clock.idle_counts(kind).tolist() == [False] * 4  # (not yet known whether errors follow use)


@pytest.mark.parametrize("idle_rate, follows", [(0.1, True), (1.0, False)])
def test_the_fleet_says_whether_its_errors_follow_use(idle_rate, follows):
    """Samples with errors idle against busy, pooled: a tenth as often idle is use; as often is not, and the
    accelerators' clocks then stop lagging and their idle samples count."""
    rng = np.random.default_rng(1)
    clock = InUseClock()
    hours = np.full(200, 1 / 12)  # 200 accelerators' 5-minute samples, half of them idle
    idle = np.arange(200) % 2 == 0
    kind = np.ones(200, dtype=np.int8)
    for _ in range(60):
        erred = rng.random(200) < np.where(idle, 0.05 * idle_rate, 0.05)
        clock.learn(kind, idle, erred, hours)
    assert clock.said() == {"accelerator": follows, "port": None}
    assert clock.idle_counts(kind).all() == (not follows)
    clock.observe(gauges({"a/gpu0": 0.0}), 30.0)
    assert clock.lag_s("a/gpu0") == (30.0 if follows else 0.0)


def _fleet_week(det, hours, busy_of, rate_busy, idle_share, metric, seed=5, n=100, rising=None):
    """``hours`` of a fleet of ``n`` GPUs (utilisation by ``busy_of(hour, gpu)``), each erring at its own rate (a
    log-normal around ``rate_busy`` an hour) while busy and ``idle_share`` of it idle; ``rising``: (gpu, from hour,
    factor) a part whose rate rises. Returns the flags' (hour, entity)."""
    rng = np.random.default_rng(seed)
    rate = np.minimum(rate_busy * np.exp(rng.normal(0.0, 1.5, n)), 90.0)
    entities = [f"n{g // 8}/gpu{g % 8}" for g in range(n)]
    flags = []
    for k in range(int(hours * 3600 / STEP)):
        hour = k * STEP / 3600.0
        busy = np.array([busy_of(hour, g) for g in range(n)])
        lam = rate * np.where(busy, 1.0, idle_share) * STEP / 3600.0
        if rising is not None and hour >= rising[1]:
            lam[rising[0]] *= rising[2]
        inc = pd.DataFrame({"entity": entities, "metric": [metric] * n, "increase": rng.poisson(lam).astype(float),
                            "resets": [0] * n, "dt": [STEP] * n})
        util = dict(zip(entities, np.where(busy, 95.0, 0.0)))
        for ev in det.update(TickInput(k * STEP, events_frame([]), inc, gauges(util))):
            if ev.level.name in ("SUBHEALTHY", "FAILED"):
                flags.append((hour, ev.entity))
    return flags


def _idle_then_busy(hour, gpu):
    """Half the fleet idle for its first 6 hours and again from hour 30 to 40; busy otherwise."""
    return not (gpu % 2 == 0 and (hour < 6 or 30 <= hour < 40))


def test_a_healthy_gpu_whose_replays_follow_its_jobs_is_not_flagged_when_a_job_starts():
    """Replays at a tenth of the busy rate while idle: judged on wall time, the jobs' starts read as rises."""
    flags = _fleet_week(TrendDetector().fit(), 48, _idle_then_busy, 0.5, 0.1, "pcie_replay_total")
    assert flags == []


def test_a_rise_while_in_use_is_still_flagged_and_symbol_errors_run_on_wall_time():
    # a GPU whose replays rise twentyfold at hour 20, busy throughout: flagged within a few hours
    flags = _fleet_week(TrendDetector().fit(), 30, _idle_then_busy, 0.5, 0.1, "pcie_replay_total",
                        rising=(3, 20.0, 20.0))
    assert flags and {e for _, e in flags} == {"n0/gpu3"} and 20.0 <= flags[0][0] <= 23.0, flags
    # symbol errors do not follow use: a port's clock is the wall clock whatever its node does
    det = TrendDetector().fit()
    _fleet_week(det, 1, _idle_then_busy, 0.5, 1.0, "pcie_replay_total")
    assert det._series_time(("n0/mlx5_0:1", "symbol_error_total"), 3600.0) == 3600.0
    assert det._series_time(("n0/gpu0", "pcie_replay_total"), 3600.0) < 3600.0  # idle its first hour


def test_once_the_fleet_says_its_errors_do_not_follow_use_its_records_are_the_wall_clock_s():
    """While the fleet has not said, records on the wall clock are kept beside those judged: when it says its errors
    do not follow use, a part's record is every sample it sent, idle ones too, as if utilisation were not read."""
    rng = np.random.default_rng(2)
    n = 200
    rate = np.minimum(0.5 * np.exp(rng.normal(0.0, 1.5, n)), 90.0)
    entities = [f"n{g // 8}/gpu{g % 8}" for g in range(n)]
    with_use, wall = TrendDetector().fit(), TrendDetector().fit()
    no_util = gauges({})
    for k in range(int(12 * 3600 / STEP)):
        hour = k * STEP / 3600.0
        busy = np.array([_idle_then_busy(hour, g) for g in range(n)])
        inc = pd.DataFrame({"entity": entities, "metric": ["pcie_replay_total"] * n,
                            "increase": rng.poisson(rate * STEP / 3600.0).astype(float), "resets": [0] * n,
                            "dt": [STEP] * n})
        util = gauges(dict(zip(entities, np.where(busy, 95.0, 0.0))))
        with_use.update(TickInput(k * STEP, events_frame([]), inc, util))
        wall.update(TickInput(k * STEP, events_frame([]), inc, no_util))
    assert with_use._in_use().said()["accelerator"] is False and not with_use._on_wall()
    episodes = {k: [e[:2] for e in s.episodes] for k, s in with_use._series.items()}
    assert episodes == {k: [e[:2] for e in s.episodes] for k, s in wall._series.items()}
    assert with_use._series_time(("n0/gpu0", "pcie_replay_total"), 3600.0) == 3600.0  # (idle its first 6 h)
