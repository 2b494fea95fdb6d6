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


@pytest.mark.parametrize("sizes", ["whole", "fractions"])
def test_a_records_size_sums_are_its_episodes_and_past_sizes_through_every_change(sizes):
    """Episodes opened, grown and retired (past the past sizes' length, where the oldest fall out): the record's
    sums are those of what it holds, exact for whole numbers of errors (as kept), and summed afresh for others."""
    from detectors.trend_counters import SIZE_RECORD

    rng = np.random.default_rng(4)
    s = CounterRecord(0.0, ("symbol_error_total", ""))
    for step in range(3 * SIZE_RECORD):
        errors = float(rng.integers(1, 10 ** 6)) if sizes == "whole" else float(rng.pareto(1.2) + 0.1)
        if s.episodes and rng.random() < 0.3:
            s.grow_last(errors)
        else:
            s.open_episode([float(step), errors, float(step)])
        if len(s.episodes) > 40:
            ts, retired = s.retire_oldest()
            assert s.past_sizes[-1] == retired and ts < step
        kept, past = s.size_sums()
        if sizes == "whole":
            assert (kept, past) == (sum(e[1] for e in s.episodes), sum(s.past_sizes))
        else:
            assert kept == sum(e[1] for e in s.episodes) and past == sum(s.past_sizes)
    assert len(s.past_sizes) == SIZE_RECORD and s.whole == (sizes == "whole")
