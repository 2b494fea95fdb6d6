"""'raswarden train' and 'evaluate --model' on small simulated traces: metadata, refusal, behaviour."""

import json
import shutil

import pytest

from daemon.cli import main
from lab.evaluate import _Collect
from daemon.judgement.pipeline import PipelineConfig
from daemon.replay import replay
from lab.sim.simulator import Simulator
from lab.sim.faults import load_library
from lab.sim.scenario import Scenario
from lab.sim.writer import simulate_to
from detectors.bundle import MODEL_FORMAT, IncompatibleModel, ModelBundle
from detectors.schema import State
from tests.detectors.sim_helpers import LIBRARY

FAULTS = [
    {"entity": "sn01-b01/gpu2", "fault": "hbm_degradation", "template": "a", "onset": "30m", "failure": "4h30m"},
    {"entity": "sn01-b02/mlx5_1:1", "fault": "link_degradation", "template": "a", "onset": "1h", "failure": "4h45m"},
    {"entity": "sn01-b03/gpu5", "fault": "benign_warm_slot", "template": "b", "onset": "0s", "failure": "5h"},
    {"entity": "sn01-b04/gpu1", "fault": "benign_single_correctable_ecc", "template": "a", "onset": "2h"},
]


def simulate(out, seed, fmt="openmetrics"):
    sc = Scenario.from_dict({"name": "t", "seed": seed, "topology": {"accelerators": 32}, "duration": "5h",
                             "resolution": "30s", "profile": "full",
                             "jobs": {"nodes_per_job": [2, 3], "duration": ["12h", "12h"], "gap": ["1m", "1m"]},
                             "faults": FAULTS})
    simulate_to(Simulator(sc, load_library(LIBRARY)), out, fmt)
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    base = tmp_path_factory.mktemp("train")
    traces = [simulate(base / f"t{seed}", seed) for seed in (3, 4)]
    held_out = simulate(base / "held-out", 5)
    out = base / "model"
    assert main(["train", *map(str, traces), "--out", str(out), "--stride", "4"]) == 0
    return out, traces, held_out


def test_model_metadata(model):
    out, traces, _ = model
    meta = json.loads((out / "model.json").read_text())
    assert meta["format"] == MODEL_FORMAT and meta["detectors"] == ["multivariate", "predictor"]
    assert meta["features"]["accelerator"][0] == "ecc_sbe_per_h_15m"
    assert [t["trace"] for t in meta["training_data"]["traces"]] == [str(t) for t in traces]
    assert len(meta["training_data"]["sha256"]) == 64
    for kind in ("accelerator", "port"):
        row = meta["training"][kind]
        assert row["positive_rows"] > 0 and row["healthy_rows"] > row["positive_rows"]
        oof = row["predictor_out_of_fold"]
        # A kind's predictor is kept with its threshold, or refused for a poor out-of-fold recall, saying so.
        assert ("rejected" in oof and "predictor_threshold" not in row and oof["positives_above"] < 0.5) or (
            0.5 <= row["predictor_threshold"] <= 1.0 and oof["positives_above"] >= 0.5)
    assert "predictor_threshold" in meta["training"]["port"]  # the link fault is plain enough to learn here


def test_incompatible_models_are_refused_with_a_reason(model, tmp_path):
    out, _, _ = model
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    meta = json.loads((bad / "model.json").read_text())
    meta["features"]["port"] = meta["features"]["port"][:-1]
    (bad / "model.json").write_text(json.dumps(meta))
    with pytest.raises(IncompatibleModel, match="port feature list differs.*link_events_24h"):
        ModelBundle.load(bad)
    meta = json.loads((out / "model.json").read_text())
    meta["sklearn"] = "0.24.2"
    (bad / "model.json").write_text(json.dumps(meta))
    with pytest.raises(IncompatibleModel, match="scikit-learn 0.24.2"):
        ModelBundle.load(bad)
    (bad / "model.json").write_text(json.dumps(json.loads((out / "model.json").read_text())))
    with open(bad / "estimators.joblib", "ab") as f:
        f.write(b"tampered")
    with pytest.raises(IncompatibleModel, match="does not match the digest"):
        ModelBundle.load(bad)
    with pytest.raises(IncompatibleModel, match="not a raswarden model"):
        ModelBundle.load(tmp_path)
    assert main(["evaluate", str(model[2]), "--model", str(bad)]) == 2


def test_learned_detectors_flag_held_out_faults_not_confounders(model):
    """The learned detectors' own evidence, tick by tick: a finding names only the detector that moved the
    entity's state, and on this link the trend detector's CUSUM gets there some minutes first."""
    out, _, held_out = model
    bundle = ModelBundle.load(out)
    evidence = []
    for detector in bundle.detectors():
        def update(tick, detector=detector, update=detector.update):
            found = update(tick)
            evidence.extend(found)
            return found
        detector.update = update
    replay([held_out], findings_out=_Collect(), config=PipelineConfig(model=bundle))
    flagged = {e.entity for e in evidence if e.level >= State.SUBHEALTHY}
    assert "sn01-b02/mlx5_1:1" in flagged, evidence
    assert flagged <= {"sn01-b01/gpu2", "sn01-b02/mlx5_1:1"}, flagged
    assert {e.detector for e in evidence} <= {"multivariate", "predictor"}
    reasons = next(e.reasons[0] for e in evidence if e.entity in flagged)
    assert "healthy fleet" in reasons


def test_evaluate_with_a_model_prints_both(model, capsys):
    out, _, held_out = model
    assert main(["evaluate", str(held_out), "--model", str(out)]) == 0
    text = capsys.readouterr().out
    assert "raswarden:" in text and "baseline:" in text


def test_labelled_entities_are_kept_at_every_tick_only_while_their_label_is_in_force():
    """(A 30-day trace's collection ran out of memory: every node labelled once, for a 10-minute exporter gap
    say, was kept at every tick for the whole month.)"""
    from lab.train import label_windows
    from detectors.evaluation import Fault

    faults = [Fault("n1/gpu2", "hbm_degradation", 50_000.0, 60_000.0),
              Fault("n2", "benign_exporter_gap", 10_000.0, 10_600.0),
              Fault("n3", "benign_reboot", 20_000.0, None),
              Fault("n4/gpu0", "fail_slow", 30_000.0, None),
              Fault("n5", "benign_load_step", 1.0, 601.0, template="workload")]
    windows = {e: (a, b) for e, a, b in label_windows(faults, horizon_s=43_200.0)}
    assert windows["n1/gpu2"] == (50_000.0 - 43_200.0, 60_000.0 + 3600.0)
    assert windows["n2"] == (10_000.0, 10_600.0) and windows["n3"] == (20_000.0, 23_600.0)
    assert windows["n4/gpu0"][1] == float("inf") and "n5" not in windows


def test_a_trace_cut_into_parts_of_time_gives_the_same_rows(tmp_path):
    """Training a month on two cores cuts the trace in two, the second part warmed up on the stretch before it:
    the rows (entities, times, weights) are the ones one process collects, and those before the cut the same
    features; the Parquet statistics give the span without reading the data."""
    import numpy as np

    from lab.train import collect, segments
    from daemon.ingest.trace import Trace

    trace = simulate(tmp_path / "t", 3, "parquet")
    lo, hi = Trace.discover([trace]).sample_span()
    assert 4.9 * 3600 < hi - lo <= 5 * 3600
    parts = segments(trace, 2, warmup_s=1800.0)
    cut = parts[0][2]
    assert cut % 30 == 0 and abs(cut - (lo + hi) / 2) < 30
    assert parts == [((-np.inf - 1800.0, cut), -np.inf, cut), ((cut - 1800.0, np.inf), cut, np.inf)]
    assert segments(trace, 2) == [(None, -np.inf, np.inf)]  # 5 hours: not worth a day's warm-up
    one = collect([trace], stride=4)
    two = collect([trace], stride=4, jobs=2, warmup_s=1800.0)
    for kind in ("accelerator", "port"):
        a, b = one.sets[kind], two.sets[kind]
        assert a.offered_rows == b.offered_rows > 0
        Xa, ea, ta, wa, _ = a.arrays()
        Xb, eb, tb, wb, _ = b.arrays()
        order_a, order_b = np.lexsort((ea.astype(str), ta)), np.lexsort((eb.astype(str), tb))
        assert len(Xa) == len(Xb)
        assert (ea[order_a] == eb[order_b]).all() and (ta[order_a] == tb[order_b]).all()
        np.testing.assert_allclose(wa[order_a], wb[order_b])
        before = ta[order_a] <= cut
        np.testing.assert_array_equal(Xa[order_a][before], Xb[order_b][before])
        # after the cut: features of a replay that began half an hour before it, not at the trace's start, so
        # not the same, and mostly close (what the warm-up is for; a day of it in real training)
        A, B = Xa[order_a][~before], Xb[order_b][~before]
        assert not np.array_equal(A, B, equal_nan=True) and np.isclose(A, B, rtol=0.05, atol=1e-3,
                                                                        equal_nan=True).mean() > 0.75
