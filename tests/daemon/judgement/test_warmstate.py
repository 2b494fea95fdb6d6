"""The warm state (daemon/judgement/warmstate.py): a daemon that restarts mid-fault finds what one that never stopped
finds,
and a warm state it must not trust (other code or config, too old, unreadable) is refused with a reason, never
a crash."""

from __future__ import annotations

import io
import json
import math
import shutil
import zlib
from pathlib import Path

import pytest

from daemon import metrics
from daemon.judgement import warmstate
from daemon.judgement.pipeline import Pipeline, PipelineConfig
from daemon.replay import replay
from daemon.store import Store
from lab.sim.faults import load_library
from lab.sim.scenario import Scenario
from lab.sim.simulator import Simulator
from lab.sim.writer import simulate_to

LIBRARY = Path(__file__).resolve().parents[3] / "fixtures" / "faults"
LINK = "sn01-b02/mlx5_1:1"


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    """Five hours of 32 GPUs whose link and HBM degrade from 1.5 h on (the trend detector's record of both parts
    is what a cold restart loses)."""
    sc = Scenario.from_dict({"name": "warm", "seed": 2, "topology": {"accelerators": 32}, "duration": "5h",
                             "resolution": "30s", "profile": "full",
                             "jobs": {"nodes_per_job": [2, 2], "duration": ["12h", "12h"], "gap": ["1m", "1m"],
                                      "partial_share": 0.0},
                             "faults": [
                                 {"entity": "sn01-b01/gpu3", "fault": "hbm_degradation", "template": "a",
                                  "onset": "1h30m", "failure": "4h40m"},
                                 {"entity": LINK, "fault": "link_degradation", "template": "a", "onset": "1h30m",
                                  "failure": "4h40m"}]})
    out = tmp_path_factory.mktemp("warm") / "trace"
    simulate_to(Simulator(sc, load_library(LIBRARY)), out)
    return out


def run(trace: Path, db: Path, window=None, on_start=None, on_tick=None) -> list[tuple]:
    buf = io.StringIO()
    replay([trace], findings_out=buf, db_url=f"sqlite:///{db}", window=window, on_start=on_start, on_tick=on_tick)
    return [(f["ts"], f["entity"], f["state"], f["detector"]) for f in map(json.loads, buf.getvalue().splitlines())]


def test_a_restart_with_the_warm_state_finds_what_an_uninterrupted_run_finds(trace, tmp_path):
    whole = run(trace, tmp_path / "whole.db")
    first = replay([trace]).stats.first_ts
    cut = first + 2 * 3600.0  # half an hour into both parts' rise, before either is flagged
    assert not [f for f in whole if f[0] <= cut and f[1] == LINK and f[2] != "healthy"]
    saved: list[warmstate.WarmState] = []

    def keep(now: float, pipeline: Pipeline) -> None:
        if now == cut:
            saved.append(warmstate.capture(pipeline, now))

    before = run(trace, tmp_path / "part.db", window=(-math.inf, cut), on_tick=keep)
    assert len(saved) == 1 and [f for f in before if f[0] <= cut] == [f for f in whole if f[0] <= cut]
    shutil.copy(tmp_path / "part.db", tmp_path / "cold.db")

    def warm(pipeline: Pipeline) -> None:
        assert warmstate.take_up(pipeline, saved[0], cut, 86400.0, "test")
        pipeline.restore(pipeline.store)

    after = run(trace, tmp_path / "part.db", window=(cut, math.inf), on_start=warm)
    cold = run(trace, tmp_path / "cold.db", window=(cut, math.inf), on_start=lambda p: p.restore(p.store))
    rest = [f for f in whole if f[0] > cut]
    assert after == rest
    # without it the link's record is gone: the restarted daemon's trend detector sees the link erring from its
    # first sample, a part it cannot judge (a watch), and flags it later or never
    assert cold != rest
    flag = [f[0] for f in rest if f[1] == LINK and f[2] == "subhealthy" and f[3] == "trend"]
    cold_flag = [f[0] for f in cold if f[1] == LINK and f[2] == "subhealthy" and f[3] == "trend"]
    assert flag and (not cold_flag or cold_flag[0] > flag[0]), (flag[:1], cold_flag[:1])


def _pipeline(**config) -> Pipeline:
    p = Pipeline(config=PipelineConfig(**config))
    p.known_entities.add("n1/gpu0")  # something a fresh pipeline would not know
    return p


def _refused() -> float:
    return metrics.WARM_STATE.labels("take_up", "refused")._value.get()


@pytest.mark.parametrize("case, why", [
    ("config", "other detection code or config"),
    ("old", "h old"),
    ("future", "in the future"),
    ("truncated", "cannot be read"),
    ("foreign", "cannot be read"),
])
def test_a_warm_state_it_must_not_trust_is_refused_with_a_reason(case, why, caplog):
    state = warmstate.capture(_pipeline(), 1000.0)
    target, now = Pipeline(config=PipelineConfig()), 1030.0
    if case == "config":
        target = Pipeline(config=PipelineConfig(interval_s=60.0))
    elif case == "old":
        now = 1000.0 + 2 * 86400.0
    elif case == "future":
        now = 1000.0 - 3600.0
    elif case == "truncated":
        state.blob = state.blob[: len(state.blob) // 2]
    else:
        state.blob = zlib.compress(json.dumps({"not": "a warm state"}).encode())
    refused = _refused()
    assert not warmstate.take_up(target, state, now, 86400.0, "test")
    assert why in caplog.text and "warm up afresh" in caplog.text
    assert _refused() == refused + 1
    assert not target.known_entities  # nothing half taken up


def test_a_warm_state_is_the_pipelines_pickle_compressed_as_it_is_written():
    """The pickle is compressed while it is written, never held whole beside the pipeline (at 100,000 accelerators
    some 290 MB): the blob is zlib's, and it holds the pickle of the warm state to the byte."""
    import pickle

    import numpy as np

    p = _pipeline()
    p.cadence.last = np.arange(200_000.0)  # (a large array: protocol 5 writes its memory as it is)
    state = warmstate.capture(p, 1000.0)
    assert zlib.decompress(state.blob) == pickle.dumps(p.warm_state(), protocol=pickle.HIGHEST_PROTOCOL)
    assert warmstate.take_up(Pipeline(config=PipelineConfig()), state, 1030.0, 86400.0, "test")


def test_the_store_keeps_one_warm_state_per_shard_and_a_newer_replaces_it(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    _check_store(store)


@pytest.mark.postgres
def test_the_warm_state_in_postgresql(pg_url):
    _check_store(Store(pg_url))


def _check_store(store: Store) -> None:
    try:
        assert store.warm_state("a") is None
        assert not warmstate.load(store, "a", Pipeline(), 1000.0, 86400.0)
        warmstate.save(store, "a", _pipeline(), 1000.0)
        first = store.warm_state("a")
        assert first.saved_at == 1000.0 and first.size == len(first.blob) > 0
        warmstate.save(store, "a", _pipeline(interval_s=60.0), 1300.0)
        assert store.warm_state("a").saved_at == 1300.0  # replaced, not added
        assert store.warm_state("b") is None
        taker = Pipeline(config=PipelineConfig(interval_s=60.0))
        assert warmstate.load(store, "a", taker, 1330.0, 86400.0)
        assert taker.known_entities == {"n1/gpu0"}
    finally:
        store.close()
