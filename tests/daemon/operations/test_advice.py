"""Checkpoint-interval advice (daemon/operations/advice.py): the formula's answer on hand-made journals, conservative
with few
failures, the safe interval at once when detection is degraded, the job's own limits, measured costs, the files."""

from __future__ import annotations

import json
import math
import os

import pytest

from daemon.operations.advice import Advisor, daly_interval, declared, measured_costs, overhead, write_files
from daemon.config import AdviceConfig
from daemon.operations.foresight import YEAR_H, measure
from playbooks.scheduler import ClusterState, JobInfo
from tests.daemon.operations.test_foresight import DAY, T0, incident, journal, step


def test_daly_is_youngs_square_root_with_its_correction():
    c, m = 120.0, 1000 * 3600.0
    young = math.sqrt(2 * c * m)
    t = daly_interval(c, m)
    assert young - c < t < young * 1.01
    assert daly_interval(c, 4 * m) == pytest.approx(2 * young, rel=0.02)  # four times the MTBF, twice the interval
    assert daly_interval(c, 50.0) == 50.0  # a checkpoint longer than two MTBFs: checkpoint every MTBF
    assert daly_interval(c, math.inf) == math.inf
    # the optimum is the optimum: overhead is higher a little either side
    assert overhead(t, c, 600, m) < min(overhead(0.8 * t, c, 600, m), overhead(1.25 * t, c, 600, m))


def job(job_id: str = "77", nodes: int = 8, comment: str = "raswarden:checkpoint", opt_in: bool = True) -> JobInfo:
    return JobInfo(job_id, tuple(f"n{i:02d}" for i in range(nodes)), "running", opt_in, "train", comment)


def state(*jobs: JobInfo) -> ClusterState:
    return ClusterState(T0, {}, {j.id: j for j in jobs})


def test_advice_is_dalys_interval_at_the_unforeseen_rates_upper_bound(tmp_path):
    """Ten node-years with 4 hard failures, 3 acted on ahead: the interval follows from the 1 unwarned failure."""
    store, now = journal(tmp_path, nodes=10, days=365.25)
    incident(store, "n00/gpu0", "gpu_bus", T0 + 10 * DAY, failed=T0 + 10 * DAY)  # without warning
    for i in range(1, 4):
        inc = incident(store, f"n0{i}/gpu0", "gpu_memory", T0 + (10 + 20 * i) * DAY, failed=T0 + (11 + 20 * i) * DAY)
        step(store, inc, "drain", T0 + (10 + 20 * i) * DAY + 600)
    cfg = AdviceConfig(quantile=0.9, cost_s=120.0, prior_per_node_year=1.4, prior_failures=1.0, window_days=400)
    advisor = Advisor(cfg)
    advice = advisor.run(store, state(job(nodes=8)), now)["77"]
    from scipy import stats

    exposure = 1.0 / (1.4 / YEAR_H) + 10 * YEAR_H
    per_node_h = stats.gamma.ppf(0.9, 1 + 1) / exposure
    expected = daly_interval(120.0, 3600.0 / (8 * per_node_h))
    assert advice.interval_s == pytest.approx(min(expected, cfg.max_interval_s))
    assert advice.cost_from == "default" and not advice.safe
    # the safe interval takes every failure as unforeseen: shorter
    safe = daly_interval(120.0, 3600.0 / (8 * stats.gamma.ppf(0.9, 1 + 4) / exposure))
    assert advice.safe_interval_s == pytest.approx(safe) and advice.safe_interval_s < advice.interval_s
    # a bigger job sees more failures: a shorter interval
    assert advisor.run(store, state(job(nodes=32)), now)["77"].interval_s < advice.interval_s
    assert "1 unwarned of 4 hard failures" in advice.why and advice.at_risk == []


def test_few_failures_on_record_give_shorter_advice_than_the_same_rate_well_measured(tmp_path):
    """The same unforeseen rate (one a node-year, the prior's): a fifth of a node-year on record against fifty."""
    cfg = AdviceConfig(prior_failures=1.0, prior_per_node_year=1.0, window_days=400)
    store, now = journal(tmp_path / "short", nodes=2, days=36.5)  # 0.2 node-years, no failure
    short = Advisor(cfg).run(store, state(job(nodes=2)), now)
    store, now = journal(tmp_path / "long", nodes=50, days=365.25)  # 50 node-years, 50 failures
    for i in range(50):
        incident(store, f"n{i:02d}/gpu0", "gpu_bus", T0 + (5 + 7 * i) * DAY, failed=T0 + (5 + 7 * i) * DAY)
    long = Advisor(cfg).run(store, state(job(nodes=2)), now)
    assert "50 unwarned of 50" in long["77"].why
    assert short["77"].interval_s < 0.9 * long["77"].interval_s


def test_the_safe_interval_at_once_when_detection_is_degraded(tmp_path):
    store, now = journal(tmp_path, nodes=10, days=100)
    inc = incident(store, "n01/gpu0", "gpu_memory", T0 + 10 * DAY, failed=T0 + 11 * DAY)
    step(store, inc, "drain", T0 + 10 * DAY + 600)
    advisor = Advisor(AdviceConfig())
    normal = advisor.run(store, state(job("1"), job("2", nodes=2)), now)
    degraded = advisor.run(store, state(job("1"), job("2", nodes=2)), now, degraded="collector dcgm failing")
    for j in ("1", "2"):
        assert degraded[j].safe and degraded[j].interval_s == normal[j].safe_interval_s < normal[j].interval_s
        assert degraded[j].why == "collector dcgm failing"
    # one node without telemetry: only the jobs on it
    incident(store, "n03", "telemetry", now - 1800)  # no telemetry from n03 for half an hour: open
    one = advisor.run(store, state(job("1"), JobInfo("3", ("x9",), "running", True, "t", "")), now)
    assert one["1"].safe and one["1"].why == "n03: no telemetry" and not one["3"].safe


def test_a_job_with_an_open_incident_nobody_acted_on_under_it_checkpoints_more_often(tmp_path):
    """A degrading fabric port (the built-in playbook only notifies) under one job: that job's interval is cut by
    the hazard such incidents showed before (here 3 of 3 failed within 4 h), the other job's is not."""
    store, now = journal(tmp_path, nodes=10, days=60)
    for i in range(3):  # ports warned of hours ahead, not acted on, failed
        incident(store, f"n0{i}/mlx5_0:1", "fabric_link", T0 + (5 + i) * DAY, failed=T0 + (5 + i) * DAY + 4 * 3600)
    incident(store, "n05/mlx5_2:1", "fabric_link", now - 1800)  # open now, under job 1
    advisor = Advisor(AdviceConfig(cost_s=120.0))
    one = JobInfo("1", ("n04", "n05"), "running", True, "t", "")
    two = JobInfo("2", ("n06", "n07"), "running", True, "t", "")
    advice = advisor.run(store, state(one, two), now)
    assert advice["1"].at_risk == ["n05/mlx5_2:1"] and "at risk from n05/mlx5_2:1" in advice["1"].why
    assert advice["2"].at_risk == []
    fs = advisor.foresight
    hazard = fs.hazard("fabric_link", 0.9)
    assert fs.hazard("fabric_link") == pytest.approx(4 / (24 + 12 + 0.5))  # 3 failures in 12 h (+ the prior's)
    expected = daly_interval(120.0, 3600.0 / (2 * fs.rate("unwarned", 0.9) + hazard))
    assert advice["1"].interval_s == pytest.approx(max(600.0, expected))
    assert advice["1"].interval_s < 3600.0 < advice["2"].interval_s
    # degraded detection: the safe interval, but never longer than what the open incident calls for
    safe = advisor.run(store, state(one, two), now, degraded="breaker open")
    assert safe["1"].interval_s == advice["1"].safe_interval_s <= advice["1"].interval_s * 1.0001


def test_never_longer_than_the_jobs_maximum_or_the_configured_one(tmp_path):
    store, now = journal(tmp_path, nodes=1000, days=365.25)  # a thousand failure-free node-years: very long advice
    advisor = Advisor(AdviceConfig(max_interval_s=12 * 3600.0))
    advice = advisor.run(store, state(job("1", nodes=1), job("2", nodes=1, comment="raswarden:checkpoint max=2h")),
                         now)
    assert advice["1"].interval_s == 12 * 3600.0 and "longest advised" in advice["1"].why
    assert advice["2"].interval_s == 7200.0 and "job's maximum" in advice["2"].why


def test_only_running_jobs_that_opted_in_are_advised(tmp_path):
    store, now = journal(tmp_path)
    pending = JobInfo("5", (), "pending", True, "t", "")
    advice = Advisor().run(store, state(job("1"), job("2", opt_in=False), pending), now)
    assert set(advice) == {"1"}


def test_a_jobs_declared_costs_and_its_measured_checkpoints(tmp_path):
    assert declared("raswarden:checkpoint cost=2m restart=15m max=6h") == {"cost": 120, "restart": 900, "max": 21600}
    assert declared("raswarden:checkpoint cost=fast max=0") == {}
    store, now = journal(tmp_path)
    inc = incident(store, "n01/gpu0", "gpu_memory", T0 + DAY)
    step(store, inc, "checkpoint", T0 + DAY, signalled=["77", "78"], signalled_at=T0 + DAY)
    step(store, inc, "wait_checkpoint", T0 + DAY, confirmed_at={"77": T0 + DAY + 95})  # 78 never confirmed
    assert measured_costs(store, T0) == {"77": [95.0]}
    advisor = Advisor()
    j = job("77", comment="raswarden:checkpoint cost=5m restart=20m")
    advice = advisor.run(store, state(j), now)["77"]
    assert (advice.checkpoint_cost_s, advice.cost_from, advice.restart_cost_s) == (95.0, "measured", 1200.0)
    # the job confirms by rewriting its comment: what it declared is remembered
    j2 = job("78", comment="raswarden:checkpoint cost=5m")
    advisor.run(store, state(j2), now)
    advice = advisor.run(store, state(job("78", comment="raswarden:checkpointed 1780000000")), now)["78"]
    assert (advice.checkpoint_cost_s, advice.cost_from) == (300.0, "declared")


def test_each_jobs_advice_is_a_file_replaced_whole_and_removed_when_the_job_is_gone(tmp_path):
    store, now = journal(tmp_path)
    advisor = Advisor()
    out = tmp_path / "advice"
    first = advisor.run(store, state(job("1"), job("2")), now)
    write_files(out, first)
    one = json.loads((out / "1.json").read_text())
    assert one["job"] == "1" and one["interval_s"] > 0 and one["expires_at"] > one["updated_at"]
    (out / "9.json").write_text("{}")  # another shard's job
    old = out / "8.json"  # a job that ended long ago while nobody wrote
    old.write_text("{}")
    os.utime(old, (now - 2 * 86400, now - 2 * 86400))
    write_files(out, advisor.run(store, state(job("2")), now), gone=set(first))
    assert sorted(p.name for p in out.iterdir()) == ["2.json", "9.json"]


def test_the_rate_the_advice_reads_is_measured_over_the_window(tmp_path):
    store, now = journal(tmp_path, nodes=10, days=400)
    incident(store, "n01/gpu0", "gpu_bus", T0 + 5 * DAY, failed=T0 + 5 * DAY)  # before a 180-day window
    assert measure(store, now, window_s=180 * DAY).failures == []
    assert len(measure(store, now, window_s=400 * DAY).failures) == 1
