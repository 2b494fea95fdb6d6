import numpy as np
import pandas as pd

from daemon.ingest.batch import Batch
from daemon.ingest.timeorder import TimeSpill, tick_index
from detectors.schema import events_frame


def samples(rows):
    ts, ent, met, val = zip(*rows)
    return pd.DataFrame({"ts": np.array(ts, float), "entity": pd.Categorical(ent), "metric": pd.Categorical(met),
                         "value": np.array(val, float)})


def collect(spill):
    out = []
    for now, b in spill.ticks():
        out.append((now, [tuple(r) for r in b.samples.astype({"entity": str, "metric": str}).itertuples(index=False)],
                    list(b.events["message"])))
    return out


def test_tick_boundaries_are_right_closed():
    assert list(tick_index(np.array([0.0, 0.1, 30.0, 30.5, 60.0]), 30.0)) == [0, 1, 1, 2, 2]


def test_any_order_gives_the_same_ticks(tmp_path):
    rows = [(t, e, m, float(i)) for i, (t, e, m) in enumerate(
        (t, e, m) for t in range(0, 3600 * 5, 15) for e in ("a/gpu0", "b/gpu1") for m in ("x", "y"))]
    series_major = sorted(rows, key=lambda r: (r[1], r[2], r[0]))
    shuffled = list(rows)
    np.random.default_rng(1).shuffle(shuffled)
    results = []
    for order, chunk in ((rows, 1000), (series_major, 333), (shuffled, 5000)):
        spill = TimeSpill(interval=30.0, bucket_ticks=50, directory=tmp_path / f"s{chunk}")
        for i in range(0, len(order), chunk):
            spill.add(Batch(samples=samples(order[i:i + chunk])))
        spill.add(Batch(events=events_frame([(95.0, "a", "xid", 79, "error", "m1", "k", None, None),
                                             (31.0, "b", "aer", None, "corrected", "m0", "k", None, None)])))
        results.append(collect(spill))
        spill.close()
    assert results[0] == results[1] == results[2]
    ticks = results[0]
    assert ticks[0][0] == 0.0 and all(b[0] - a[0] == 30.0 for a, b in zip(ticks, ticks[1:]))
    assert sum(len(t[1]) for t in ticks) == len(rows)
    by_time = {t[0]: t[2] for t in ticks}
    assert by_time[60.0] == ["m0"] and by_time[120.0] == ["m1"]


def test_duplicates_are_dropped_and_gaps_still_tick(tmp_path):
    spill = TimeSpill(interval=30.0, directory=tmp_path)
    dup = samples([(10.0, "a", "x", 1.0), (10.0, "a", "x", 1.0), (300.0, "a", "x", 2.0)])
    spill.add(Batch(samples=dup))
    spill.add(Batch(samples=dup))
    ticks = collect(spill)
    assert [t[0] for t in ticks] == [30.0 * k for k in range(1, 11)]
    assert sum(len(t[1]) for t in ticks) == 2 and spill.duplicates == 4


def test_the_bucket_order_is_the_four_key_sort_with_and_without_repeats():
    from daemon.ingest.timeorder import _row_order

    rng = np.random.default_rng(3)
    for trial in range(200):
        n = int(rng.integers(0, 400))
        ts = np.round(rng.uniform(0, 60, n), 0 if trial % 2 else 3)
        if trial % 3 == 0:
            ts = np.sort(ts)  # the usual time order, ranked without a sort
        ent, met = rng.integers(-1, 9, n), rng.integers(-1, 4, n)  # -1: a missing name
        value = rng.integers(0, 3, n).astype(float)
        order, repeats = _row_order(ts, ent, met, value)
        assert np.array_equal(order, np.lexsort((value, met, ent, ts)))
        assert repeats == (len({(t, e, m) for t, e, m in zip(ts, ent, met)}) < n)


def test_buckets_are_loaded_no_further_ahead_than_the_next(tmp_path, monkeypatch):
    """While a bucket ticks, the next one may be loading (in a thread) and no other: two buckets in memory at most."""
    spill = TimeSpill(interval=30.0, bucket_ticks=10, directory=tmp_path / "s")
    spill.add(Batch(samples=samples([(float(t), "a/gpu0", "x", 1.0) for t in range(15, 3000, 15)])))
    loaded: list[int] = []
    load = TimeSpill._load_samples

    def recording(self, bucket):
        loaded.append(bucket)
        return load(self, bucket)

    monkeypatch.setattr(TimeSpill, "_load_samples", recording)
    buckets_ticked = []
    for now, _batch in spill.ticks():
        bucket = int(tick_index(np.array([now]), 30.0)[0]) // 10
        if not buckets_ticked or buckets_ticked[-1] != bucket:
            buckets_ticked.append(bucket)
        assert max(loaded) <= bucket + 1
    assert loaded == buckets_ticked == list(range(0, 11))
