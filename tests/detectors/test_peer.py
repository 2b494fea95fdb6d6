import numpy as np

from detectors.peer import PeerDeviation, group_median
from tests.detectors.sim_helpers import first_flag, simulate_and_replay


def test_group_median():
    codes = np.array([0, 0, 0, 1, 1, 2])
    values = np.array([3.0, 1.0, 2.0, 10.0, np.nan, 5.0])
    median, count = group_median(codes, values)
    assert list(median) == [2.0, 10.0, 5.0] and list(count) == [3, 1, 1]


def test_interface():
    d = PeerDeviation(z_threshold=5.0).fit()
    assert d.threshold_ == 5.0 and d.z_threshold == 5.0


def test_flags_a_gpu_hotter_than_its_peers_and_not_the_warm_slot_or_a_hot_rack(tmp_path):
    findings, labels = simulate_and_replay(tmp_path, [
        {"entity": "sn01-b01/gpu2", "fault": "thermal_degradation", "template": "a", "onset": "20m",
         "failure": "3h30m"},
        {"entity": "sn01-b02/gpu5", "fault": "benign_warm_slot", "template": "b", "onset": "0s", "failure": "4h"},
        {"entity": "r01", "fault": "benign_coolant_swing", "template": "a", "onset": "1h"},
        {"entity": "sn01-b03/gpu1", "fault": "fail_slow", "template": "a", "onset": "30m", "failure": "3h30m"},
    ], partial_share=1.0)
    thermal = first_flag(findings, "sn01-b01/gpu2", "peer")
    failure = next(lb["failure"] for lb in labels if lb["fault"] == "thermal_degradation")
    assert thermal is not None and thermal["ts"] < failure - 3600, thermal  # more than an hour early
    assert "against its node's peers at equal power" in thermal["reasons"][0]
    slow = first_flag(findings, "sn01-b03/gpu1", "peer")
    assert slow is not None and "SM clock at" in slow["reasons"][0]
    flagged = {f["entity"] for f in findings if f["state"] in ("subhealthy", "failed")}
    assert flagged <= {"sn01-b01/gpu2", "sn01-b01", "sn01-b03/gpu1", "sn01-b03"}, flagged
