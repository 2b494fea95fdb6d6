"""Evaluation metrics on hand-made labels and flags with known answers."""

import math

import pytest

from detectors.evaluation import Fault, Flag, evaluate, flags_from_findings

H = 3600.0
LABELS = [
    Fault("n1/gpu0", "hbm_degradation", onset=0.0, failure=10 * H),
    Fault("n2/gpu3", "hbm_degradation", onset=0.0, failure=10 * H),
    Fault("n3/mlx5_0:1", "link_degradation", onset=2 * H, failure=None),  # degraded, never fails
    Fault("n4", "benign_reboot", onset=5 * H, failure=5.2 * H),
    Fault("r1", "benign_coolant_swing", onset=6 * H, failure=7 * H),
]


def test_known_answers():
    flags = [
        Flag(4 * H, "n1/gpu0", "subhealthy"),      # early: lead 6 h
        Flag(10 * H + 30, "n1/gpu0", "failed"),     # hard-fault latency 30 s
        Flag(10 * H - 30, "n2", "subhealthy"),      # the node holding n2/gpu3, but within 2 intervals: late
        Flag(10 * H, "n2/gpu3", "failed"),          # latency 0
        Flag(20 * H, "n3", "subhealthy"),           # degraded fault: flagged before the trace end
        Flag(5.1 * H, "n4", "subhealthy"),          # false, on a benign label's entity in its window
        Flag(6.5 * H, "n5/gpu1", "subhealthy"),     # false; in the rack r1 during the swing
        Flag(9 * H, "n6/gpu2", "suspect"),          # not a flag
        Flag(30 * H, "n7", "failed"),               # false, outside every benign window
    ]
    rack = {"n5": "r1", "n6": "r1", "n7": "r2"}
    ev = evaluate([f for f in flags if f.state in ("subhealthy", "failed")], LABELS, trace_end=48 * H,
                  node_days=10.0, interval_s=30.0,
                  holds=lambda c, e: e == c or e.split("/")[0] == c or rack.get(e.split("/")[0]) == c)
    hbm = ev.by_class["hbm_degradation"]
    assert hbm.faults == 2 and hbm.flagged_before_failure == 1 and hbm.lead_times_s == [6 * H]
    assert sorted(hbm.hard_latencies_s) == [0.0, 30.0]
    link = ev.by_class["link_degradation"]
    assert link.recall == 1.0 and link.lead_times_s == [] and link.hard_faults == 0
    assert ev.all_faults.recall == pytest.approx(2 / 3)
    assert ev.flags == 8 and ev.true_flags == 5 and ev.false_flags == 3 and ev.confounder_flags == 2
    assert ev.false_flags_per_1000_node_days == pytest.approx(300.0)
    assert ev.precision == pytest.approx(5 / 8)
    d = ev.as_dict()
    assert d["all"]["lead_time_median_s"] == 6 * H and d["onset_to_failure_median_s"] == 10 * H
    # each fault that fails, in the labels' order, with its lead where it was flagged in time
    assert [(f["entity"], f["fault"], f["window_s"], f["lead_s"]) for f in ev.fault_leads] == [
        ("n1/gpu0", "hbm_degradation", 10 * H, 6 * H), ("n2/gpu3", "hbm_degradation", 10 * H, None)]
    assert [(f["entity"], f["ts"]) for f in d["false_flag_list"]] == [("n5/gpu1", 6.5 * H), ("n4", 5.1 * H),
                                                                     ("n7", 30 * H)] or \
        sorted(f["entity"] for f in d["false_flag_list"]) == ["n4", "n5/gpu1", "n7"]


def test_no_flags_no_recall_and_no_false_flags():
    ev = evaluate([], LABELS, trace_end=48 * H, node_days=5.0, interval_s=30.0)
    assert ev.all_faults.recall == 0.0 and ev.false_flags == 0 and math.isnan(ev.precision)


def test_findings_to_flags():
    findings = [{"ts": 1, "entity": "a", "state": "suspect"}, {"ts": 2, "entity": "a", "state": "subhealthy"},
                {"ts": 3, "entity": "a", "state": "healthy"}, {"ts": 4, "entity": "a", "state": "failed"}]
    assert [f.state for f in flags_from_findings(findings)] == ["subhealthy", "failed"]


def test_failed_before_the_failure_is_in_time_with_negative_latency():
    labels = [Fault("n1/gpu0", "hbm_degradation", onset=0.0, failure=10 * H)]
    flags = [Flag(6 * H, "n1/gpu0", "failed")]
    s = evaluate(flags, labels, trace_end=20 * H, node_days=1.0, interval_s=30.0).by_class["hbm_degradation"]
    assert s.hard_latencies_s == [-4 * H] and s.failed_in_time == 1 and s.recall == 1.0
    late = evaluate([Flag(10 * H + 60, "n1/gpu0", "failed")], labels, trace_end=20 * H, node_days=1.0,
                    interval_s=30.0).by_class["hbm_degradation"]
    assert late.failed_in_time == 0 and late.hard_latencies_s == [60.0]
