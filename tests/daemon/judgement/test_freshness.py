import pickle

import numpy as np

from daemon.judgement.freshness import Freshness


def test_stale_after_each_entitys_window_or_the_default():
    f = Freshness(default_s=150.0)
    names = np.array([f"n1/gpu{i}" for i in range(100)], dtype=object)  # past the first growth of the arrays
    f.observe_rows(f.rows(names)[np.arange(0, 100, 2)], 1000.0)
    f.observe(["n1", "n2/gpu0"], 1000.0)
    f.set_window("n1/gpu2", 600.0)
    f.set_window("n9/gpu0", 30.0)  # a window for an entity never observed: never stale
    assert f.stale(1150.0) == []  # (150 s is not past the default)
    assert set(f.stale(1151.0)) == {f"n1/gpu{i}" for i in range(0, 100, 2) if i != 2} | {"n1", "n2/gpu0"}
    assert f.is_fresh("n1/gpu2", 1500.0) and not f.is_fresh("n1/gpu4", 1500.0) and not f.is_fresh("n1/gpu1", 1000.0)
    assert f.last("n1/gpu1") is None and f.last("n1/gpu0") == 1000.0 and f.window_of("n1/gpu3") == 150.0


def test_rows_are_kept_per_name_array_and_left_out_of_a_pickle():
    f = Freshness(default_s=150.0)
    names = np.array(["a", "b"], dtype=object)
    rows = f.rows(names)
    assert f.rows(names) is rows and f.rows(np.array(["b", "c"], dtype=object)).tolist() == [1, 2]
    f.observe_rows(rows, 10.0)
    back = pickle.loads(pickle.dumps(f))
    assert back._rows._entries == {} and back.items() == [("a", 10.0), ("b", 10.0)] and back.stale(500.0) == ["a", "b"]
