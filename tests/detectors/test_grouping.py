import numpy as np
import pandas as pd
import pytest

from detectors import grouping
from detectors.grouping import RowIndex, group_keys, group_median, last_and_max, stable_order
from detectors.schema import name_codes, name_column, names_in


def test_group_median():
    codes = np.array([0, 0, 0, 1, 1, 2])
    values = np.array([3.0, 1.0, 2.0, 10.0, np.nan, 5.0])
    median, count = group_median(codes, values)
    assert list(median) == [2.0, 10.0, 5.0] and list(count) == [3, 1, 1]


def _two_key_median(codes: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """The medians by one sort on (code, value), as group_median made them for every input before its fast path."""
    ok = np.isfinite(values)
    c, v = codes[ok], values[ok]
    v = v[np.lexsort((v, c))]
    count = np.bincount(c, minlength=n_groups)
    start = np.concatenate(([0], np.cumsum(count)[:-1]))
    out = np.full(n_groups, np.nan)
    has = count > 0
    out[has] = (v[start[has] + (count[has] - 1) // 2] + v[start[has] + count[has] // 2]) / 2.0
    return out


@pytest.mark.parametrize("seed", range(16))
def test_group_median_of_groups_in_order_is_the_two_key_sorts_to_the_bit(seed):
    """Groups in order (the rows' sort) give the medians of the two-key sort, bit for bit (ties, negative zeros, NaN,
    groups without values), and each is the group's np.median; shuffled rows (the two-key sort) give the same
    values."""
    rng = np.random.default_rng(seed)
    n_groups = int(rng.integers(1, 60))
    # one size (a node's eight), a few (whole and half nodes) or many (the two-key sort's path)
    size = rng.choice(rng.integers(1, 9, size=int(rng.choice([1, 2, 3, 12]))), size=n_groups)
    codes = np.repeat(np.arange(n_groups), size)
    values = np.round(rng.normal(0.0, 2.0, len(codes)), int(rng.integers(0, 3)))  # rounding makes ties
    values[rng.random(len(values)) < 0.1] = -0.0
    values[rng.random(len(values)) < 0.05] = np.nan
    values[np.repeat(rng.random(n_groups) < 0.2, size)] = np.nan  # whole groups without a value
    median, count = group_median(codes, values)
    assert median.tobytes() == _two_key_median(codes, values, n_groups).tobytes()
    shuffle = rng.permutation(len(codes))
    shuffled, shuffled_count = group_median(codes[shuffle], values[shuffle])
    assert np.array_equal(median, shuffled, equal_nan=True) and np.array_equal(count, shuffled_count)
    for g in range(n_groups):
        mine = values[codes == g]
        mine = mine[~np.isnan(mine)]
        assert count[g] == len(mine)
        assert np.isnan(median[g]) if not len(mine) else median[g] == np.median(mine)


@pytest.mark.parametrize("dense_limit", [1 << 25, 4])  # the dense table and the hashing path
def test_group_keys_matches_unique(monkeypatch, dense_limit):
    monkeypatch.setattr(grouping, "DENSE_LIMIT", dense_limit)
    key = np.array([7, 3, 7, 0, 3, 9, 7])
    inverse, uniq = group_keys(key, 10)
    want_uniq, want_inverse = np.unique(key, return_inverse=True)
    assert list(uniq) == list(want_uniq) and list(inverse) == list(want_inverse)


@pytest.mark.parametrize("n_keys", [1, 300, 2**16, 2**16 + 1, 10**6])
def test_stable_order_is_numpys_stable_argsort(n_keys):
    rng = np.random.default_rng(n_keys)
    key = rng.integers(0, n_keys, 5000)
    assert np.array_equal(stable_order(key, n_keys), np.argsort(key, kind="stable"))
    key[:] = n_keys - 1  # all ties: the rows in order
    assert np.array_equal(stable_order(key, n_keys), np.arange(len(key)))


def test_last_and_max_take_the_last_row_in_time_order():
    inverse = np.array([0, 1, 0, 1, 0])
    last, peak = last_and_max(inverse, 2, np.array([5.0, 1.0, 9.0, 3.0, 2.0]))
    assert list(last) == [2.0, 3.0] and list(peak) == [9.0, 3.0]


def test_row_index_keeps_rows_and_answers_a_repeat_from_the_last_lookup():
    index = RowIndex()
    rows, fresh = index.lookup(np.array(["a", "b"], dtype=object))
    assert list(rows) == [0, 1] and list(fresh) == ["a", "b"]
    rows, fresh = index.lookup(np.array(["b", "c", "a"], dtype=object))
    assert list(rows) == [1, 2, 0] and list(fresh) == ["c"]
    rows[:] = -5  # the caller's copy: the cached answer stays intact
    rows, fresh = index.lookup(np.array(["b", "c", "a"], dtype=object))
    assert list(rows) == [1, 2, 0] and len(fresh) == 0 and len(index) == 3


def test_name_columns_compare_on_codes_and_share_the_source_dtype():
    source = pd.Series(pd.Categorical(["x", "y", "x", "z"]))
    codes, names = name_codes(source)
    assert list(names[codes]) == ["x", "y", "x", "z"]
    assert list(names_in(source, {"x", "z"})) == [True, False, True, True]
    column = name_column(codes[:2], names, like=source)
    assert column.dtype is source.dtype and list(column) == ["x", "y"]
    plain = pd.Series(["y", None, "y"], dtype=object)
    assert list(names_in(plain, {"y"})) == [True, False, True]  # a missing name is never wanted


def test_series_slots_last_across_name_arrays_and_are_numbered_by_first_sight():
    from detectors.grouping import SeriesSlots

    slots = SeriesSlots()
    ents, mets = np.array(["a", "b"], dtype=object), np.array(["x", "y"], dtype=object)
    w = len(mets) + 1
    out, new = slots.lookup(np.array([1 * w + 0, 0 * w + 1, 1 * w + 0]), ents, mets)  # (b,x) (a,y) (b,x)
    assert out.tolist() == [0, 1, 0] and new == 2 and len(slots) == 2
    # the next bucket names the entities in another order and brings a metric: the same series keep their slots
    ents2, mets2 = np.array(["c", "b", "a"], dtype=object), np.array(["z", "y", "x"], dtype=object)
    w2 = len(mets2) + 1
    out, new = slots.lookup(np.array([2 * w2 + 1, 1 * w2 + 2, 0 * w2 + 0, 1 * w2 + 0, 0 * w2 + 0]), ents2, mets2)
    assert out.tolist() == [1, 0, 2, 3, 2] and new == 2 and len(slots) == 4  # (a,y) (b,x) (c,z) (b,z) (c,z)
    out, new = slots.lookup(np.array([1 * w2 + 2]), ents2, mets2)  # steady: from the table
    assert out.tolist() == [0] and new == 0


def test_names_in_answers_each_wanted_set_for_the_same_names():
    source = pd.Series(pd.Categorical(["x", "y", "x", "z"]))
    wanted_x, wanted_y = ("x",), ("y",)
    assert list(names_in(source, wanted_x)) == [True, False, True, False]
    assert list(names_in(source, wanted_y)) == [False, True, False, False]  # not the first set's answer again
    assert list(names_in(source, wanted_x)) == [True, False, True, False]
    other = pd.Series(pd.Categorical(["z", "x"]))
    assert list(names_in(other, wanted_x)) == [False, True]  # other names: answered for them


def test_nanmedian_is_numpys_bit_for_bit():
    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 599, 600, 640, 2001):  # both sides of numpy's small-array path
        values = rng.normal(size=n) * 10 ** rng.uniform(-3, 3, size=n)
        values[rng.random(n) < 0.2] = np.nan
        values[0] = 1.5  # at least one number
        assert grouping.nanmedian(values) == float(np.nanmedian(values))
        ties = np.round(values)  # equal middle values, and infinities in the middle of a few
        assert grouping.nanmedian(ties) == float(np.nanmedian(ties))
    for values in ([np.inf, -np.inf], [np.inf, 1.0], [np.nan, np.inf, np.inf, 2.0], [-0.0, 0.0], [3.0, -0.0]):
        with np.errstate(invalid="ignore"):  # (inf - inf: both say so)
            got, want = grouping.nanmedian(np.array(values)), float(np.nanmedian(np.array(values)))
        assert (got == want or np.isnan(got) and np.isnan(want)) and np.signbit(got) == np.signbit(want), values


def test_frame_is_the_frame_pandas_builds():
    from detectors.schema import frame

    cats = pd.Categorical.from_codes(np.array([1, 0, 1]), categories=pd.Index(["a", "b"], dtype=object))
    cases = [
        {"ts": np.array([1.0, 2.0, 3.0]), "entity": cats, "n": np.array([1, 2, 3]),
         "ok": np.array([True, False, True])},
        {"entity": [], "metric": [], "last": []},  # lists: pandas' own inference
        {"kind": np.array(["xid", "aer"], dtype=object), "ts": np.array([0.0, 1.0])},  # object: inferred as pandas does
        {"a": np.array([1.0, 2.0]), "b": np.array([1.0])[:1].repeat(2)},
    ]
    for data in cases:
        got, want = frame(data), pd.DataFrame(data)
        pd.testing.assert_frame_equal(got, want, check_column_type=False)
        assert got.columns.dtype == object and list(got.columns) == list(data)
    source = np.array([1.0, 2.0])
    built = frame({"x": source})
    source[0] = 9.0  # the caller's array changes after: the frame does not (pandas copies too)
    assert built["x"].tolist() == [1.0, 2.0]
    assert frame({"x": np.zeros(2)}).columns is frame({"x": np.ones(3)}).columns  # one index, one lookup table
