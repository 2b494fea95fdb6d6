import numpy as np
import pytest

from detectors.trend_counters import WINDOWS_S, CounterRecord


@pytest.mark.parametrize("seed", range(20))
def test_window_counts_are_the_episodes_begun_inside_each_window(seed):
    """Counted back from the newest, as a mask over every episode's time counts them (ties at a window's edge,
    several episodes in one tick, episodes older than the longest window not yet folded away)."""
    rng = np.random.default_rng(seed)
    now = 1.0e6
    times = np.sort(now - rng.choice([0.0, 30.0, 3600.0, 10800.0, 43200.0, 50000.0], size=int(rng.integers(0, 40)))
                    - rng.integers(0, 3, size=1) * rng.random() * 7200.0)
    s = CounterRecord(0.0, ("symbol_error_total", ""))
    s.episodes.extend([float(t), 1.0, float(t)] for t in times)
    assert s.window_counts(now) == [int(np.count_nonzero(times > now - w)) for w in WINDOWS_S]
