import numpy as np
import pandas as pd

from detectors.counters import CounterTracker, DecayingCount, counter_increases


def test_reset_and_wraps():
    prev = np.array([np.nan, 10, 4294967290, 2.0**64 - 8192, 100])  # float64 steps by 4096 up there
    cur = np.array([5, 15, 10, 3, 7])
    inc, reset = counter_increases(prev, cur)
    assert list(inc) == [0, 5, 16, 8195, 7]
    assert list(reset) == [False, False, False, False, True]


def test_increases_without_a_reset_or_a_new_series_are_the_differences_to_the_bit():
    """The common tick (no series new, none gone down) is answered by the differences alone: the same values, signed
    zeros and NaN included, as the full case analysis gives them."""
    rng = np.random.default_rng(3)
    prev = np.floor(rng.uniform(0, 1e6, 1000))
    cur = prev + np.floor(rng.exponential(3.0, 1000))
    cur[::97] = np.nan  # a NaN reading
    inc, reset = counter_increases(prev, cur)
    prev2 = prev.copy()
    prev2[0] = np.nan  # the full path: one series new
    full, full_reset = counter_increases(prev2, cur)
    assert np.array_equal(inc[1:], full[1:], equal_nan=True) and not reset.any() and not full_reset.any()
    assert np.array_equal(np.signbit(inc[1:]), np.signbit(full[1:]))


def test_tracker_chains_across_ticks_and_series():
    tr = CounterTracker()
    f = pd.DataFrame({"ts": [1.0, 2, 1, 2], "entity": pd.Categorical(["a", "a", "b", "b"]),
                      "metric": pd.Categorical(["x_total"] * 4), "value": [10.0, 12, 5, 6]})
    out = tr.update(f).to_frame().set_index("entity")
    assert out.loc["a", "increase"] == 2 and out.loc["b", "increase"] == 1
    g = pd.DataFrame({"ts": [3.0, 3], "entity": pd.Categorical(["a", "b"]), "metric": pd.Categorical(["x_total"] * 2),
                      "value": [1.0, 9]})
    out = tr.update(g).to_frame().set_index("entity")
    assert out.loc["a", "increase"] == 1 and out.loc["a", "resets"] == 1  # reboot: counts since reset
    assert out.loc["b", "increase"] == 3 and out.loc["b", "resets"] == 0


def test_decaying_count():
    d = DecayingCount(3600)
    d.add("k", 0, 10)
    assert abs(d.value("k", 3600) - 10 / np.e) < 1e-9
    d.prune(10**6)
    assert d.value("k", 10**6) == 0.0


def test_one_sample_a_series_gives_what_the_chained_walk_gives_to_the_bit():
    """The tick of one sample per series skips the walk by series (issue 56); a tick with a series sampled twice
    takes the walk. Both on the same counters, edge values included, must agree bit for bit."""
    rng = np.random.default_rng(7)
    values = np.array([-0.0, 0.0, 3.0, 5.0, 2.0**32 - 5, 1.0, 2.0**64 - 8192, np.nan, np.inf])
    names = [f"n1/gpu{i}" for i in range(12)]
    single, chained = CounterTracker(), CounterTracker()
    for step in range(30):
        order = rng.permutation(12)
        f = pd.DataFrame({"ts": np.full(12, float(step)), "value": rng.choice(values, 12),
                          "entity": pd.Categorical([names[i] for i in order], categories=names + ["x/gpu0"]),
                          "metric": pd.Categorical(["ecc_sbe_total"] * 12)})
        twice = pd.DataFrame({"ts": [step - 0.5, float(step)], "value": [1.0, 2.0 + step],
                              "entity": pd.Categorical(["x/gpu0"] * 2, categories=names + ["x/gpu0"]),
                              "metric": pd.Categorical(["ecc_sbe_total"] * 2)})
        with np.errstate(invalid="ignore"):  # (inf - inf: the edge values are meant)
            a = single.update(f).to_frame()
            b = chained.update(pd.concat([twice, f], ignore_index=True)).to_frame()
        b = b[b["entity"] != "x/gpu0"].reset_index(drop=True)
        for column in ("increase", "resets", "last", "dt"):
            assert a[column].to_numpy().tobytes() == b[column].to_numpy().tobytes(), (step, column)
        assert a["entity"].tolist() == b["entity"].tolist()
