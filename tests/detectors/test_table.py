import numpy as np
import pandas as pd
import pytest

from detectors.schema import name_codes, names_in
from detectors.table import NO_NAMES, Names, Table, TableLayout, read_only


def _table() -> Table:
    names = np.array(["n1/gpu0", "n1/gpu1", "n2/gpu0"], dtype=object)
    return Table({"entity": Names(np.array([2, 0, 1, 0]), names), "last": np.array([1.0, 2.0, 3.0, 4.0])})


def test_columns_rows_and_the_frame_they_make():
    t = _table()
    assert len(t) == 4 and not t.empty and t.columns == ["entity", "last"] and "last" in t and "max" not in t
    part = t[np.array([True, False, True, False])]
    assert part["entity"].tolist() == ["n2/gpu0", "n1/gpu1"] and part["last"].tolist() == [1.0, 3.0]
    assert list(t[np.array([3, 1])]["entity"]) == ["n1/gpu0", "n1/gpu0"]
    df = t.to_frame()
    assert isinstance(df["entity"].dtype, pd.CategoricalDtype) and df["entity"].tolist() == t["entity"].tolist()
    assert len(t[np.zeros(4, dtype=bool)]) == 0 and t[np.zeros(4, dtype=bool)].empty


def test_name_columns_keep_their_codes_and_names_for_the_caches():
    t = _table()
    codes, names = name_codes(t["entity"])
    assert codes is t["entity"].codes and names is t["entity"].names  # the same arrays: the caches key on them
    assert names_in(t["entity"], ("n1/gpu0",)).tolist() == [False, True, False, True]
    assert np.asarray(t["entity"], dtype=object).tolist() == ["n2/gpu0", "n1/gpu0", "n1/gpu1", "n1/gpu0"]
    assert t["entity"][0] == "n2/gpu0"


def test_a_missing_name_reads_as_none_and_unequal_columns_are_refused():
    names = np.array(["a"], dtype=object)
    assert Names(np.array([0, -1]), names).tolist() == ["a", None]
    assert NO_NAMES.tolist() == [] and Table({"entity": NO_NAMES}).empty
    with pytest.raises(ValueError, match="unequal length"):
        Table({"a": np.zeros(2), "b": np.zeros(3)})


def test_a_layout_is_kept_only_for_the_same_read_only_columns(monkeypatch):
    """A detector's layout is given back for the very code arrays it was kept for, read-only (they cannot have
    changed); an equal copy, a writable array or other names get nothing; a table too large is not kept; pickled, it
    is empty."""
    import pickle

    import detectors.table as table

    ent, met = read_only(np.array([0, 1, 2])), read_only(np.array([1, 1, 0]))
    ent_names, met_names = np.array(["a", "b", "c"], dtype=object), np.array(["x", "y"], dtype=object)
    kept = TableLayout()
    kept.keep(ent, ent_names, met, met_names, "layout")
    assert kept.get(ent, ent_names, met, met_names) == "layout"
    assert kept.get(read_only(ent.copy()), ent_names, met, met_names) is None
    assert kept.get(ent, ent_names.copy(), met, met_names) is None
    writable = np.array([1, 1, 0])
    kept.keep(ent, ent_names, writable, met_names, "layout")
    assert kept.get(ent, ent_names, writable, met_names) is None
    assert pickle.loads(pickle.dumps(kept)).get(ent, ent_names, met, met_names) is None
    monkeypatch.setattr(table, "KEEP_LAYOUT_ROWS", 2)
    kept.keep(ent, ent_names, met, met_names, "layout")
    assert kept.get(ent, ent_names, met, met_names) is None
