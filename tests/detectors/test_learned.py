"""Training rows' labels, the scoring cadence and persistence, reasons in operator words."""

import numpy as np
import pandas as pd

from detectors.evaluation import Fault
from detectors.features import FEATURES, FeatureFrame
from detectors.learned import Persistence, TrainingSet, describe, label_rows, transform
from detectors.multivariate import MultivariateDetector
from detectors.contract import Evidence
from detectors.schema import State


def test_training_set_keeps_labelled_rows_and_a_uniform_reweighted_sample_of_the_fleet():
    """A month of a supernode offers millions of fleet rows: the reservoir keeps ``sample_cap`` of them, drawn
    uniformly from all ticks (not the first ones), weighted to stand for all offered."""
    width = len(FEATURES["port"])
    ts_set = TrainingSet("port", sample_cap=1000, seed=3)
    offered = 0
    for tick in range(200):  # 200 ticks x 50 fleet rows, the value = the tick
        frame = FeatureFrame("port", float(tick), np.array([f"n{i}/ib{i}" for i in range(50)], dtype=object),
                             np.full((50, width), float(tick)), FEATURES["port"])
        ts_set.sample(frame, np.arange(50), 10.0, trace=0)
        offered += 50
        if tick == 100:
            ts_set.add(frame, np.array([7]), 1.0, trace=0)  # a labelled row, kept whatever the cap
    X, ents, ts, w, trace = ts_set.arrays()
    assert ts_set.offered_rows == offered and len(X) == 1000 + 1
    assert X.dtype == np.float32 and X[0, 0] == 100.0 and w[0] == 1.0  # the labelled row first, as given
    fleet_w = w[1:]
    assert np.isclose(fleet_w.sum(), 10.0 * offered)  # the sample stands for every offered row
    assert abs(X[1:, 0].mean() - 99.5) < 5.0 and X[1:, 0].min() < 10 and X[1:, 0].max() > 190  # all ticks
    assert np.unique(np.stack([ts[1:], [int(e[1:].split("/")[0]) for e in ents[1:]]]), axis=1).shape[1] == 1000
    # a part of the traces collected elsewhere: its reservoir joins this one, still sample_cap rows for all
    other = TrainingSet("port", sample_cap=1000, seed=4)
    for tick in range(200, 400):
        frame = FeatureFrame("port", float(tick), np.array([f"n{i}/ib{i}" for i in range(50)], dtype=object),
                             np.full((50, width), float(tick)), FEATURES["port"])
        other.sample(frame, np.arange(50), 10.0, trace=1)
    ts_set.merge(other)
    X, _, _, w, trace = ts_set.arrays()
    assert ts_set.offered_rows == 2 * offered and len(X) == 1000 + 1 and np.isclose(w[1:].sum(), 20.0 * offered)
    assert 0.4 < (trace[1:] == 1).mean() < 0.6 and abs(X[1:, 0].mean() - 199.5) < 10.0


def test_label_rows_known_answers():
    faults = [Fault("n1/gpu0", "hbm_degradation", onset=100.0, failure=1000.0),
              Fault("n2", "thermal_degradation", onset=0.0, failure=40_500.0),
              Fault("n3/gpu1", "benign_warm_slot", onset=0.0, failure=1e9)]
    ents = np.array(["n1/gpu0", "n1/gpu0", "n1/gpu0", "n1/gpu0", "n1/gpu1", "n2/gpu4", "n2/gpu4", "n3/gpu1"],
                    dtype=object)
    ts = np.array([50.0, 300.0, 900.0, 1000.0, 900.0, 100.0, 40_000.0, 500.0])
    positive, healthy = label_rows(ents, ts, faults, horizon_s=800.0)
    # before onset / in the window / in the window / at failure (gone); a peer; node fault early / late; benign
    assert list(positive) == [False, True, True, False, False, False, True, False]
    assert list(healthy) == [False, False, False, False, True, False, False, True]


def test_label_rows_horizon_leaves_early_rows_out():
    faults = [Fault("n1/gpu0", "hbm_degradation", onset=0.0, failure=10_000.0)]
    positive, healthy = label_rows(np.array(["n1/gpu0"] * 2, dtype=object), np.array([100.0, 9_000.0]), faults,
                                   horizon_s=3600.0)
    assert list(positive) == [False, True] and not healthy.any()


def frame(ents, rows):
    X = np.zeros((len(ents), len(FEATURES["port"])))
    return FeatureFrame("port", 0.0, np.array(ents, dtype=object), X, FEATURES["port"], np.array(rows))


def test_persistence_scores_in_slices_of_at_least_min_batch_rows():
    f = frame([f"e{i}" for i in range(10)], list(range(10)))
    small = Persistence(every=4, k=1, min_batch=100)  # all ten in one call every fourth tick
    per_tick = []
    for _ in range(8):
        per_tick.append(len(small.slice(f)))
        small.advance()
    assert per_tick == [10, 0, 0, 0, 10, 0, 0, 0]
    large = Persistence(every=4, k=1, min_batch=3)  # four slices of at most three: each row once per 4 ticks
    seen = []
    for _ in range(4):
        seen += list(large.slice(f))
        large.advance()
    assert sorted(seen) == list(range(10))


def test_persistence_round_robin_and_k_in_a_row():
    p = Persistence(every=2, k=2, min_batch=1)
    f = frame(["a", "b", "c"], [0, 1, 2])
    assert list(p.slice(f)) == [0, 2]  # tick 0 scores rows 0 and 2
    make = lambda i: Evidence(f.entities[i], State.SUSPECT, "fabric_link", ["r"])
    p.record(np.array(["a", "c"], dtype=object), np.array([True, False]), make)
    assert p.advance() == []  # one scoring above is not enough
    assert list(p.slice(f)) == [1]
    p.advance()
    p.record(np.array(["a", "c"], dtype=object), np.array([True, False]), make)
    assert [e.entity for e in p.advance()] == ["a"]
    p.record(np.array(["a"], dtype=object), np.array([False]), make)
    assert p.advance() == [] and p.above == {}


def test_persistence_forgets_entities_no_longer_scored():
    p = Persistence(every=1, k=1)
    p.record(np.array(["gone"], dtype=object), np.array([True]),
             lambda i: Evidence("gone", State.SUBHEALTHY, "gpu_bus", ["r"]))
    assert len(p.advance()) == 1
    p.advance()
    p.advance()
    assert p.advance() == [] and p.above == {}


def test_describe_and_transform():
    assert describe("ecc_sbe_per_h_1h") == ("gpu_memory", "HBM correctable ECC rate over 1h")
    assert describe("hbm_temp_c_peer_residual") == ("gpu_thermal", "HBM temperature against peers")
    assert describe("hbm_temp_c_peer_residual_change")[1].endswith("change over its own 6 h baseline")
    assert describe("symbol_error_per_h_15m")[0] == "fabric_link"
    names = ("ecc_sbe_per_h_1h", "gpu_temp_c_level")
    out = transform(np.array([[np.e - 1, 50.0]]), names)
    assert np.allclose(out, [[1.0, 50.0]])


def test_multivariate_flags_what_the_healthy_fleet_never_showed_with_reasons():
    rng = np.random.default_rng(0)
    names = FEATURES["port"]
    X = np.zeros((4000, len(names)))
    X[:, names.index("port_state_level")] = 4.0
    X[:, names.index("symbol_error_per_h_1h")] = rng.exponential(0.01, 4000)
    det = MultivariateDetector(n_estimators=50).fit(X, kind="port", names=names)
    odd = X[:2].copy()
    odd[0, names.index("symbol_error_per_h_1h")] = 400.0
    scores = det.decision_function(odd, kind="port")
    assert scores[0] >= det.thresholds_["port"] > scores[1]
    category, reasons = det.reasons("port", odd[0], float(scores[0]))
    assert category == "fabric_link" and "symbol errors rate over 1h 400" in reasons[0]


def test_predictor_trains_when_one_trace_lacks_a_signal_entirely():
    from detectors.predictor import FailurePredictor

    rng = np.random.default_rng(0)
    names = FEATURES["port"]
    X = rng.normal(0, 1, (400, len(names)))
    y = np.zeros(400, dtype=int)
    y[::10] = 1
    X[y == 1, 0] += 6.0
    groups = np.repeat([0, 1], 200)
    X[groups == 1, 3] = np.nan  # the second trace never published this signal (a stock exporter)
    det = FailurePredictor(max_iter=20).fit(X, y, kind="port", names=names, groups=groups)
    assert "port" in det.models_ and det.decision_function(X[:5], kind="port").shape == (5,)


def test_predictor_alarms_only_with_one_feature_far_from_the_healthy_fleet():
    from detectors.features import FeatureFrame
    from detectors.predictor import FailurePredictor
    from detectors.contract import TickInput

    rng = np.random.default_rng(1)
    names = FEATURES["port"]
    col = names.index("symbol_error_per_h_1h")
    X = rng.exponential(0.01, (600, len(names)))
    y = np.zeros(600, dtype=int)
    y[::10] = 1
    X[y == 1, col] = 50.0
    pred = FailurePredictor(max_iter=30, score_every_ticks=1, persist=1).fit(
        X, y, kind="port", names=names, groups=np.repeat([0, 1, 2], 200))

    def evidence(row: np.ndarray, entity: str):
        frame = FeatureFrame("port", 0.0, np.array([entity], dtype=object), row[None, :], names)
        return pred.update(TickInput(0.0, *(pd.DataFrame() for _ in range(3)), features={"port": frame}))

    far = X[y == 1][0]
    assert pred.support_z("port", far[None, :])[0] > 100
    (ev,) = evidence(far, "n1/mlx5_0:1")
    assert ev.category == "fabric_link"
    pred.healthy_scale_["port"] = np.full(len(names), 1e6)  # nothing is far from the fleet any more
    assert "n2/mlx5_0:1" not in {e.entity for e in evidence(far, "n2/mlx5_0:1")}


def test_no_learned_alarm_while_a_gpu_changes_load():
    from detectors.features import FeatureFrame
    from detectors.multivariate import MultivariateDetector
    from detectors.contract import TickInput

    rng = np.random.default_rng(2)
    names = FEATURES["accelerator"]
    X = rng.normal(0, 1, (3000, len(names)))
    det = MultivariateDetector(n_estimators=50, score_every_ticks=1, persist=1).fit(X, kind="accelerator",
                                                                                     names=names)
    odd = np.full((2, len(names)), 40.0)
    frame = FeatureFrame("accelerator", 0.0, np.array(["n1/gpu0", "n1/gpu1"], dtype=object), odd, names,
                         load_age_s=np.array([300.0, 3600.0]))
    (ev,) = det.update(TickInput(0.0, *(pd.DataFrame() for _ in range(3)), features={"accelerator": frame}))
    assert ev.entity == "n1/gpu1"  # gpu0 went busy five minutes ago: not judged yet


def test_a_steady_offset_against_peers_is_no_support_but_its_change_is():
    """A GPU in a warm slot, 11 °C over its peers since it was installed, gives the predictor no support for an
    alarm; the same residual newly risen over its own baseline does."""
    from detectors.predictor import FailurePredictor

    rng = np.random.default_rng(2)
    names = FEATURES["accelerator"]
    X = rng.normal(0.0, 1.0, (600, len(names)))
    y = np.zeros(600, dtype=int)
    y[::10] = 1
    pred = FailurePredictor(max_iter=10).fit(X, y, kind="accelerator", names=names,
                                             groups=np.repeat([0, 1, 2], 200))
    warm = np.zeros(len(names))  # the healthy fleet's features spread by 1: 11 is 11 scales out
    warm[names.index("hbm_temp_c_peer_residual")] = 11.0
    warm[names.index("hbm_temp_c_level")] = 20.0  # and hot under load, below the limits the rules judge
    assert pred.support_z("accelerator", warm[None, :])[0] < 5
    rising = warm.copy()
    rising[names.index("hbm_temp_c_peer_residual_change")] = 11.0
    assert pred.support_z("accelerator", rising[None, :])[0] > 6


def test_what_follows_the_job_is_no_support():
    """A job starting on the node ramps every GPU's utilisation, power and clocks: no support for an alarm
    however far from the fleet; the GPU's clock against its busy peers is."""
    from detectors.learned import LOAD_FOLLOWING
    from detectors.predictor import FailurePredictor

    rng = np.random.default_rng(3)
    names = FEATURES["accelerator"]
    X = rng.normal(0.0, 1.0, (600, len(names)))
    y = np.zeros(600, dtype=int)
    y[::10] = 1
    pred = FailurePredictor(max_iter=10).fit(X, y, kind="accelerator", names=names,
                                             groups=np.repeat([0, 1, 2], 200))
    ramp = np.zeros(len(names))
    for name in LOAD_FOLLOWING:
        ramp[names.index(name)] = 40.0
    assert pred.support_z("accelerator", ramp[None, :])[0] == 0.0
    slow = ramp.copy()
    slow[names.index("sm_clock_peer_ratio")] = -30.0
    assert pred.support_z("accelerator", slow[None, :])[0] > 20


def test_a_rate_inside_the_healthy_fleets_range_is_no_support():
    """Healthy links see a stray symbol error now and then: a rate that healthy rows reach is no support, even
    though it is many robust scales from a fleet whose median is 0; a rate beyond them is."""
    from detectors.predictor import FailurePredictor

    rng = np.random.default_rng(4)
    names = FEATURES["port"]
    col = names.index("symbol_error_per_h_15m")
    X = rng.exponential(0.001, (30_000, len(names)))
    y = np.zeros(len(X), dtype=int)
    y[::100] = 1
    X[y == 1, col] = 200.0
    stray = np.flatnonzero(y == 0)[::1000]  # one healthy row in a thousand just after a single error
    X[stray, col] = 2.77
    pred = FailurePredictor(max_iter=10).fit(X, y, kind="port", names=names, groups=np.repeat([0, 1, 2], 10_000))
    low, high = pred.healthy_range_["port"]
    assert high[col] == 2.77
    two = np.median(X, axis=0)
    two[col] = 2.3
    assert pred.support_z("port", two[None, :])[0] == 0.0
    many = two.copy()
    many[col] = 20.0
    assert pred.support_z("port", many[None, :])[0] > 6


def test_an_isolation_forest_alarm_needs_support_too():
    """An idle GPU is unusual in a busy healthy fleet, and no fault: the multivariate detector's alarm needs one
    health signal far outside the healthy fleet, like the predictor's."""
    from detectors.features import FeatureFrame
    from detectors.learned import LOAD_FOLLOWING
    from detectors.multivariate import MultivariateDetector
    from detectors.contract import TickInput

    rng = np.random.default_rng(5)
    names = FEATURES["accelerator"]
    varying = [names.index(n) for n in sorted(LOAD_FOLLOWING)] + [names.index("pcie_replay_per_h_15m")]
    X = np.zeros((3000, len(names)))
    X[:, varying] = rng.normal(0, 1, (3000, len(varying)))
    det = MultivariateDetector(n_estimators=50, score_every_ticks=1, persist=1).fit(X, kind="accelerator",
                                                                                     names=names)
    idle = np.zeros((2, len(names)))
    for name in LOAD_FOLLOWING:
        idle[:, names.index(name)] = -40.0
    idle[1, names.index("pcie_replay_per_h_15m")] = 40.0  # and a PCIe link going bad on the second
    frame = FeatureFrame("accelerator", 0.0, np.array(["n1/gpu0", "n1/gpu1"], dtype=object), idle, names)
    assert (det.decision_function(idle) >= det.thresholds_["accelerator"]).all()
    (ev,) = det.update(TickInput(0.0, *(pd.DataFrame() for _ in range(3)), features={"accelerator": frame}))
    assert ev.entity == "n1/gpu1"


def test_a_counter_rate_needs_three_errors_behind_it_to_support():
    """Two symbol errors within a quarter of an hour lie beyond anything a small healthy training fleet showed,
    and are still Poisson noise: a rate supports only with three errors behind it (rate × half-life / ln 2)."""
    from detectors.predictor import FailurePredictor

    rng = np.random.default_rng(6)
    names = FEATURES["port"]
    col = names.index("symbol_error_per_h_15m")
    X = rng.exponential(0.001, (3000, len(names)))
    y = np.zeros(len(X), dtype=int)
    y[::100] = 1
    X[y == 1, col] = 200.0
    pred = FailurePredictor(max_iter=10).fit(X, y, kind="port", names=names, groups=np.repeat([0, 1, 2], 1000))
    row = np.median(X, axis=0)
    row[col] = 2 * np.log(2) / 0.25  # two errors just now
    assert row[col] > pred.healthy_range_["port"][1][col]
    assert pred.support_z("port", row[None, :])[0] == 0.0
    row[col] = 4 * np.log(2) / 0.25
    assert pred.support_z("port", row[None, :])[0] > 6
