"""Streaming features: rates over horizons, gaps, peers, missing values, bounded state."""

import math

import numpy as np
import pandas as pd
import pytest

from detectors.features import FEATURES, FeatureState, RATE_HORIZONS
from detectors.schema import events_frame


def inc(rows):
    return pd.DataFrame({"entity": pd.Series([r[0] for r in rows], dtype=object),
                         "metric": pd.Series([r[1] for r in rows], dtype=object),
                         "increase": [float(r[2]) for r in rows], "resets": [0] * len(rows)})


def gauges(rows):
    return pd.DataFrame({"entity": pd.Series([r[0] for r in rows], dtype=object),
                         "metric": pd.Series([r[1] for r in rows], dtype=object),
                         "last": [float(r[2]) for r in rows], "max": [float(r[2]) for r in rows]})


NO_GAUGES = gauges([])


def test_rate_ewma_converges_to_the_rate_and_the_short_horizon_leads():
    fs = FeatureState()
    for k in range(0, 241):  # 2 h at 30 s; 1 error per tick = 120/h
        fs.update(30.0 * k, inc([("n1/gpu0", "ecc_sbe_total", 0 if k == 0 else 1)]), NO_GAUGES)
    f = fs.frames["accelerator"].frame().loc["n1/gpu0"]
    assert f["ecc_sbe_per_h_15m"] == pytest.approx(120.0, rel=0.01)
    assert f["ecc_sbe_per_h_15m"] > f["ecc_sbe_per_h_1h"] > f["ecc_sbe_per_h_6h"] > 0
    # Half-life arithmetic: after 2 h the 1 h EWMA has covered 1 - 2^-2 of the step.
    assert f["ecc_sbe_per_h_1h"] == pytest.approx(120.0 * (1 - 0.5 ** 2), rel=0.02)


def test_an_exporter_gap_is_not_a_spike():
    fs = FeatureState()
    fs.update(0.0, inc([("n1/gpu0", "ecc_sbe_total", 0)]), NO_GAUGES)
    # The series is silent for an hour, then shows the 10 errors counted meanwhile: 10/h, not 1,200/h.
    fs.update(3600.0, inc([("n1/gpu0", "ecc_sbe_total", 10)]), NO_GAUGES)
    f = fs.frames["accelerator"].frame().loc["n1/gpu0"]
    assert f["ecc_sbe_per_h_15m"] <= 10.0 + 1e-9


def test_a_counter_reset_restarts_the_rates():
    """A GPU that threw thousands of replays an hour fell off the bus and came back a day later with its
    counter reset (a replaced part): its rates are what the new counter says, not a remainder of before."""
    fs = FeatureState()
    for k in range(0, 121):
        fs.update(30.0 * k, inc([("n1/gpu0", "pcie_replay_total", 0 if k == 0 else 40)]), NO_GAUGES)
    assert fs.frames["accelerator"].frame().loc["n1/gpu0", "pcie_replay_per_h_6h"] > 500
    back = inc([("n1/gpu0", "pcie_replay_total", 2)])
    back["resets"] = [1]
    fs.update(3600.0 + 86400.0, back, NO_GAUGES)
    f = fs.frames["accelerator"].frame().loc["n1/gpu0"]
    assert f["pcie_replay_per_h_6h"] == pytest.approx(2 / 24, rel=0.01)


def test_unobserved_features_are_nan_and_stale_rows_leave_the_frame():
    fs = FeatureState()
    fs.update(0.0, inc([]), gauges([("n1/gpu0", "gpu_temp_c", 50.0)]))
    f = fs.frames["accelerator"].frame().loc["n1/gpu0"]
    assert f["gpu_temp_c_level"] == 50.0
    assert math.isnan(f["ecc_sbe_per_h_1h"]) and math.isnan(f["hbm_temp_c_level"])
    fs.update(3600.0, inc([]), gauges([("n2/gpu0", "gpu_temp_c", 40.0)]))
    assert list(fs.frames["accelerator"].entities) == ["n2/gpu0"]


def test_peer_residual_is_power_corrected_and_against_the_node():
    fs = FeatureState()
    rows = []
    for n in range(1, 9):  # the slope is the fleet's: eight nodes, half of each one busy
        for g in range(8):
            power = 400.0 if g < 4 else 70.0
            temp = 30.0 + 0.075 * power + (9.0 if (n, g) == (1, 2) else 0.0)
            rows += [(f"n{n}/gpu{g}", "gpu_temp_c", temp), (f"n{n}/gpu{g}", "power_w", power),
                     (f"n{n}/gpu{g}", "sm_clock_mhz", 1500.0 if (n, g) == (1, 1) else 1950.0),
                     (f"n{n}/gpu{g}", "gpu_util_pct", 95.0 if g < 4 else 0.0)]
    fs.update(0.0, inc([]), gauges(rows))
    f = fs.frames["accelerator"].frame()
    assert f.loc["n1/gpu2", "gpu_temp_c_peer_residual"] == pytest.approx(9.0, abs=1.5)
    assert abs(f.loc["n1/gpu5", "gpu_temp_c_peer_residual"]) < 1.5  # idle, not cold
    assert f.loc["n1/gpu1", "sm_clock_peer_ratio"] == pytest.approx(1500 / 1950, rel=0.01)
    assert np.isnan(f.loc["n1/gpu5", "sm_clock_peer_ratio"])  # idle GPUs have no busy-clock ratio



def test_peers_are_at_comparable_load_on_a_half_used_node():
    """A job on half of a node: its busy GPUs draw 300 W more than the idle half, which is no anomaly; the one
    busy GPU that draws 60 W more than the other busy ones is."""
    fs = FeatureState()
    rows = []
    for n in range(1, 5):
        for g in range(8):
            busy = g < 4
            power = (400.0 if busy else 80.0) + (60.0 if (n, g) == (1, 3) else 0.0)
            rows += [(f"n{n}/gpu{g}", "gpu_temp_c", 30.0 + 0.075 * power), (f"n{n}/gpu{g}", "power_w", power),
                     (f"n{n}/gpu{g}", "gpu_util_pct", 95.0 if busy else 0.0)]
    fs.update(0.0, inc([]), gauges(rows))
    f = fs.frames["accelerator"].frame()
    assert abs(f.loc["n1/gpu0", "power_w_peer_residual"]) < 1.0
    assert abs(f.loc["n1/gpu6", "power_w_peer_residual"]) < 1.0
    assert f.loc["n1/gpu3", "power_w_peer_residual"] == pytest.approx(60.0, abs=1.0)
    assert abs(f.loc["n1/gpu0", "gpu_temp_c_peer_residual"]) < 0.5

def test_a_steady_offset_has_no_change_but_a_rising_one_does():
    fs = FeatureState()
    for k in range(0, 6 * 120):  # 6 h at 30 s
        t = 30.0 * k
        rows = []
        for g in range(8):
            offset = {2: 8.0, 3: 8.0 * k / 720}.get(g, 0.0)  # gpu2 warm for ever, gpu3 warming up
            rows += [(f"n1/gpu{g}", "gpu_temp_c", 60.0 + offset), (f"n1/gpu{g}", "power_w", 400.0)]
        fs.update(t, inc([]), gauges(rows))
    f = fs.frames["accelerator"].frame()
    assert f.loc["n1/gpu2", "gpu_temp_c_peer_residual"] == pytest.approx(8.0, abs=0.5)
    assert abs(f.loc["n1/gpu2", "gpu_temp_c_peer_residual_change"]) < 0.5
    assert f.loc["n1/gpu3", "gpu_temp_c_peer_residual_change"] > 2.0


def test_a_warm_slot_changing_load_is_no_change():
    """gpu2's higher thermal resistance puts it 6 °C over its peers busy and 1 °C idle: when the node goes from
    idle to busy its residual moves, but against its own busy baseline it has not changed."""
    fs = FeatureState()
    for k in range(0, 10 * 120):  # 10 h at 30 s: busy 2 h, idle 2 h, ...
        t = 30.0 * k
        busy = (k // 240) % 2 == 0
        rows = []
        for n in range(1, 5):
            for g in range(8):
                power = 400.0 if busy else 70.0
                r = 0.09 if (n, g) == (1, 2) else 0.075
                rows += [(f"n{n}/gpu{g}", "gpu_temp_c", 30.0 + r * power), (f"n{n}/gpu{g}", "power_w", power),
                         (f"n{n}/gpu{g}", "gpu_util_pct", 95.0 if busy else 0.0)]
        fs.update(t, inc([]), gauges(rows))
        f = fs.frames["accelerator"].frame()
        if k % 240 in (30, 120, 239):  # after each load change has settled
            assert abs(f.loc["n1/gpu2", "gpu_temp_c_peer_residual_change"]) < 1.0, (k, busy)
    assert f.loc["n1/gpu2", "gpu_temp_c_peer_residual"] == pytest.approx(0.015 * 400, abs=0.5)  # busy at the end


def test_events_decay_by_class():
    fs = FeatureState()
    ev = events_frame([(0.0, "n1/gpu0", "xid", 79, "error", "m", "kernel", None, None),
                       (0.0, "n1/gpu0", "xid", 13, "error", "m", "kernel", None, None),
                       (0.0, "n1/mlx5_0:1", "link", None, "error", "m", "kernel", None, None)])
    fs.update(0.0, inc([("n1/gpu0", "ecc_sbe_total", 0), ("n1/mlx5_0:1", "symbol_error_total", 0)]), NO_GAUGES, ev)
    fs.update(3600.0, inc([("n1/gpu0", "ecc_sbe_total", 0), ("n1/mlx5_0:1", "symbol_error_total", 0)]), NO_GAUGES)
    a = fs.frames["accelerator"].frame().loc["n1/gpu0"]
    assert a["xid_hardware_events_1h"] == pytest.approx(math.exp(-1)) and a["xid_application_events_1h"] > 0
    assert a["xid_hardware_events_24h"] == pytest.approx(math.exp(-1 / 24))
    assert fs.frames["port"].frame().loc["n1/mlx5_0:1", "link_events_1h"] == pytest.approx(math.exp(-1))


def test_state_does_not_grow_with_run_length():
    fs = FeatureState()
    for k in range(500):
        fs.update(30.0 * k, inc([("n1/gpu0", "ecc_sbe_total", 1)]), gauges([("n1/gpu0", "gpu_temp_c", 50.0)]))
    st = fs.kinds["accelerator"]
    assert len(st.ids) == 1 and st.rates.shape == (1, 6, len(RATE_HORIZONS))
    assert fs.frames["accelerator"].X.shape == (1, len(FEATURES["accelerator"]))


def test_other_vendors_scaleup_counters_feed_the_same_column_summed():
    """AMD's XGMI and Ascend's HCCS lanes are the NVLink CRC column, so one model serves every vendor."""
    from detectors.features import FeatureState

    fs = FeatureState()

    def inc(now, rows):
        return pd.DataFrame({"entity": [r[0] for r in rows], "metric": [r[1] for r in rows],
                             "increase": [r[2] for r in rows], "resets": [0] * len(rows)})

    empty = pd.DataFrame({"entity": [], "metric": [], "last": [], "max": []})
    for k in range(3):
        rows = [("n/gpu0", "xgmi_ce_total", 10.0), ("n/npu0", "hccs_crc_lane1_total", 4.0),
                ("n/npu0", "hccs_crc_lane2_total", 6.0), ("n/gpu1", "nvlink_crc_flit_total", 10.0)]
        frames = fs.update(30.0 * (k + 1), inc(30.0 * (k + 1), rows), empty)
    f = frames["accelerator"].frame()["nvlink_crc_flit_per_h_15m"]
    assert f["n/gpu0"] == pytest.approx(f["n/gpu1"]) == pytest.approx(f["n/npu0"]) and f["n/gpu0"] > 0


def test_an_own_baseline_does_not_start_from_one_odd_tick():
    """(A held-out trace's busy baseline began from one tick 37 W below the GPU's steady residual, and three hours
    later that read as a 28 W rise.) The baseline starts from the smoothed residual once it has converged."""
    fs = FeatureState()
    for k in range(0, 4 * 120):  # idle 30 min, then busy; one odd tick 10 min into the job
        t = 30.0 * k
        busy = k >= 60
        rows = []
        for g in range(8):
            power = (400.0 if busy else 70.0) - (40.0 if (g == 6 and k == 80) else 0.0)
            rows += [(f"n1/gpu{g}", "power_w", power), (f"n1/gpu{g}", "gpu_temp_c", 30.0 + 0.075 * power),
                     (f"n1/gpu{g}", "gpu_util_pct", 95.0 if busy else 0.0)]
        fs.update(t, inc([]), gauges(rows))
    f = fs.frames["accelerator"].frame()
    assert abs(f.loc["n1/gpu6", "power_w_peer_residual_change"]) < 2.0


def test_forget_restarts_only_the_repaired_nodes_rows():
    fs = FeatureState()
    fs.update(0.0, inc([("n1/gpu0", "ecc_sbe_total", 0), ("n2/gpu0", "ecc_sbe_total", 0)]), NO_GAUGES)
    fs.update(30.0, inc([("n1/gpu0", "ecc_sbe_total", 9), ("n2/gpu0", "ecc_sbe_total", 9)]), NO_GAUGES)
    fs.forget("n1")
    fs.update(60.0, inc([("n1/gpu0", "ecc_sbe_total", 0), ("n2/gpu0", "ecc_sbe_total", 0)]), NO_GAUGES)
    f = fs.frames["accelerator"].frame()
    assert f.loc["n1/gpu0", "ecc_sbe_per_h_1h"] == 0.0 and f.loc["n2/gpu0", "ecc_sbe_per_h_1h"] > 0
