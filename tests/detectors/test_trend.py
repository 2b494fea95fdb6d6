import pandas as pd

from detectors.rules import TickInput
from detectors.schema import events_frame
from detectors.trend import TrendDetector
from tests.detectors.sim_helpers import first_flag, simulate_and_replay

EMPTY_G = pd.DataFrame({"entity": [], "metric": [], "last": [], "max": []})


def tick(det, now, n):
    inc = pd.DataFrame({"entity": ["n/gpu0"], "metric": ["ecc_sbe_total"], "increase": [float(n)], "resets": [0]})
    return det.update(TickInput(now, events_frame([]), inc, EMPTY_G))


def test_one_error_decays_a_rising_rate_alarms():
    det = TrendDetector().fit()
    assert tick(det, 30, 0) == [] and tick(det, 60, 1) == []
    for k in range(3, 400):
        assert tick(det, 30 * k, 0) == []
    det = TrendDetector().fit()
    fired = None
    for k in range(1, 400):
        n = 1 if k % max(1, 40 - k // 10) == 0 else 0  # errors come faster and faster
        if tick(det, 30 * k, n) and fired is None:
            fired = k
    assert fired is not None and fired < 400


def test_rising_counters_flag_before_the_static_rules(tmp_path):
    findings, labels = simulate_and_replay(tmp_path, [
        {"entity": "sn01-b01/gpu3", "fault": "hbm_degradation", "template": "a", "onset": "20m", "failure": "3h30m"},
        {"entity": "sn01-b02/mlx5_1:1", "fault": "link_degradation", "template": "a", "onset": "20m",
         "failure": "3h30m"},
        {"entity": "sn01-b03/gpu0", "fault": "benign_single_correctable_ecc", "template": "b", "onset": "1h"},
        {"entity": "sn01-b04/gpu4", "fault": "benign_single_correctable_ecc", "template": "a", "onset": "2h"},
    ])
    for entity in ("sn01-b01/gpu3", "sn01-b02/mlx5_1:1"):
        trend = first_flag(findings, entity, "trend")
        rules = first_flag(findings, entity, "rules")
        assert trend is not None and "rising" in trend["reasons"][0]
        assert rules is None or trend["ts"] <= rules["ts"], (trend, rules)
    flagged = {f["entity"] for f in findings if f["state"] in ("subhealthy", "failed")}
    assert not flagged & {"sn01-b03/gpu0", "sn01-b04/gpu4", "sn01-b03", "sn01-b04"}


def test_after_a_burst_of_any_size_the_alarm_clears_soon_after_the_errors_stop():
    det = TrendDetector().fit()
    assert tick(det, 30, 5_000_000)  # a counter that jumped by millions (a GPU back from the bus)
    # capped at 2h: h / (6/h - prior) = 4.2 hours of decay for correctable ECC, plus the hour's hold
    flagged = [k for k in range(2, 8 * 120) if tick(det, 30 * k, 0)]
    assert flagged and 30 * flagged[-1] <= 5.5 * 3600


def test_forget_drops_only_the_repaired_nodes_alarms():
    det = TrendDetector().fit()
    for entity in ("n1/gpu0", "n2/gpu0"):
        inc = pd.DataFrame({"entity": [entity], "metric": ["pcie_replay_total"], "increase": [500.0], "resets": [0]})
        det.update(TickInput(30, events_frame([]), inc, EMPTY_G))
    det.forget("n1")
    assert [e.entity for e in tick(det, 60, 0)] == ["n2/gpu0"]
