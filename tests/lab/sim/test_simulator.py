"""Each fault class and confounder leaves its signature in the telemetry; output is deterministic."""

import filecmp

import numpy as np
import pytest

from lab.sim.writer import simulate_to
from tests.lab.sim.conftest import collect, make

H = 3600
FAULTS = [
    {"entity": "sn01-b01/gpu3", "fault": "hbm_degradation", "template": "a", "onset": "20m", "failure": "2h"},
    {"entity": "sn01-b02/gpu5", "fault": "gpu_off_bus", "template": "a", "onset": "30m", "failure": "2h30m"},
    {"entity": "sn01-b03/gpu1", "fault": "thermal_degradation", "template": "a", "onset": "30m", "failure": "3h"},
    {"entity": "sn01-b04/mlx5_2:1", "fault": "link_degradation", "template": "a", "onset": "30m", "failure": "3h"},
    {"entity": "sn01-b03/gpu6", "fault": "nvlink_errors", "template": "a", "onset": "1h", "failure": "3h"},
    {"entity": "sn01-b04/gpu2", "fault": "fail_slow", "template": "b", "onset": "1h", "failure": "3h"},
    {"entity": "r01", "fault": "benign_coolant_swing", "template": "b", "onset": "1h30m", "failure": "2h"},
    {"entity": "sn01-b01/gpu7", "fault": "benign_warm_slot", "template": "a", "onset": "0s", "failure": "4h"},
    {"entity": "sn01-b05", "fault": "benign_reboot", "template": "a", "onset": "2h", "failure": "2h06m"},
    {"entity": "sn01-b06", "fault": "benign_exporter_gap", "template": "a", "onset": "1h", "failure": "1h05m"},
    {"entity": "sn01-b07", "fault": "benign_application_xid", "template": "a", "onset": "40m", "failure": "1h40m"},
    {"entity": "sn01-b08/gpu0", "fault": "benign_single_correctable_ecc", "template": "a", "onset": "50m"},
    {"entity": "sn01-b08", "fault": "benign_maintenance", "template": "b", "onset": "3h", "failure": "3h30m"},
]


@pytest.fixture(scope="module")
def run(library):
    sim = make(library, FAULTS, accelerators=64)
    return sim, collect(sim)


def rows(sim, entity):
    return sim.gpu_index[entity]


def window(ts, t0, a, b):
    return (ts > t0 + a) & (ts <= t0 + b)


def test_labels_are_what_was_injected(run):
    sim, _ = run
    labels = {(x["entity"], x["fault"]): x for x in sim.labels()}
    t0 = sim.scenario.start
    assert labels[("sn01-b01/gpu3", "hbm_degradation")]["onset"] == t0 + 1200
    assert labels[("sn01-b01/gpu3", "hbm_degradation")]["failure"] == t0 + 2 * H
    assert labels[("sn01-b04/gpu2", "fail_slow")]["failure"] is None  # degraded, never failed
    assert labels[("sn01-b05", "benign_reboot")]["failure"] == t0 + 2 * H + 360
    assert len({k for k in labels if k[1] != "benign_load_step"}) == len(FAULTS)


def test_hbm_degradation(run):
    sim, (ts, gpu, port, gp, pp, lines) = run
    t0, g = sim.scenario.start, rows(sim, "sn01-b01/gpu3")
    sbe = gpu["ecc_sbe_total"][g]
    early = sbe[window(ts, t0, 0, 1200)]
    late = sbe[window(ts, t0, 1.5 * H, 2 * H)]
    assert early[-1] - early[0] <= 1 and late[-1] - late[0] > 20
    assert gpu["ecc_dbe_total"][g][ts <= t0 + 2 * H - 60].max() == 0 and gpu["ecc_dbe_total"][g][-1] == 1
    xids = [ln for _, node, ln in lines if node == "sn01-b01" and "PCI:0000:5d:00" in ln]
    assert any("): 63," in x for x in xids) and any("): 48," in x for x in xids)
    assert gpu["xid_last"][g][-1] == 48


def test_gpu_off_bus(run):
    sim, (ts, gpu, port, gp, pp, lines) = run
    t0, g = sim.scenario.start, rows(sim, "sn01-b02/gpu5")
    replay = gpu["pcie_replay_total"][g]
    first = replay[window(ts, t0, 30 * 60, 90 * 60)]
    last = replay[window(ts, t0, 1.5 * H, 2.5 * H)]
    assert (last[-1] - last[0]) > 5 * max(first[-1] - first[0], 1)
    assert gp[g][ts < t0 + 2.5 * H].all() and not gp[g][ts >= t0 + 2.5 * H].any()
    mine = [ln for _, node, ln in lines if node == "sn01-b02" and "0000:ab:00" in ln]
    assert sum("severity=Corrected" in x for x in mine) >= 4 and any("): 79," in x for x in mine)


def test_thermal_degradation_grows_against_peers_at_equal_power(run):
    sim, (ts, gpu, *_rest) = run
    t0, g = sim.scenario.start, rows(sim, "sn01-b03/gpu1")
    peers = [rows(sim, f"sn01-b03/gpu{i}") for i in (0, 2, 3, 4, 5, 7)]
    temp = gpu["gpu_temp_c"]
    residual = temp[g] - np.median(temp[peers], axis=0)
    assert abs(np.mean(residual[window(ts, t0, 35 * 60, 50 * 60)])) < 3
    assert np.mean(residual[window(ts, t0, 2.6 * H, 2.9 * H)]) > 12
    assert abs(np.mean(gpu["power_w"][g] - np.median(gpu["power_w"][peers], axis=0))) < 30
    assert gpu["throttle_thermal"][g][window(ts, t0, 2.8 * H, 2.95 * H)].all()


def test_link_degradation(run):
    sim, (ts, gpu, port, gp, pp, lines) = run
    t0, p = sim.scenario.start, sim.port_index["sn01-b04/mlx5_2:1"]
    sym = port["symbol_error_total"][p]
    assert np.ptp(sym[window(ts, t0, 2.5 * H, 3 * H)]) > 10 * max(np.ptp(sym[window(ts, t0, 30 * 60, 60 * 60)]), 1)
    assert (port["port_state"][p][ts >= t0 + 3 * H] == 1).all() and (port["port_state"][p][ts < t0 + 3 * H] == 4).all()
    assert port["link_downed_total"][p][-1] == 1
    assert any("ibp140s0: Link down" in ln for _, n, ln in lines if n == "sn01-b04")


def test_nvlink_and_fail_slow(run):
    sim, (ts, gpu, port, gp, pp, lines) = run
    t0 = sim.scenario.start
    mine = [ln for _, n, ln in lines if n == "sn01-b03" and "0000:ba:00" in ln]
    assert sum("): 74," in x for x in mine) >= 2 and "Node Reboot Required" in mine[-1]
    g = rows(sim, "sn01-b04/gpu2")
    peers = [rows(sim, f"sn01-b04/gpu{i}") for i in (0, 1, 3)]
    late = window(ts, t0, 1.5 * H, 3 * H)
    ratio = gpu["sm_clock_mhz"][g][late] / np.median(gpu["sm_clock_mhz"][peers][:, late], axis=0)
    assert np.median(ratio) < 0.8 and gp[g].all()


def test_confounders(run):
    sim, (ts, gpu, port, gp, pp, lines) = run
    t0 = sim.scenario.start
    temp = gpu["gpu_temp_c"]
    busy = gpu["gpu_util_pct"] > 50
    during = window(ts, t0, 1.6 * H, 1.9 * H)
    before = window(ts, t0, 1.2 * H, 1.45 * H)
    rise = np.nanmean(np.where(busy[:, during], temp[:, during], np.nan)) - np.nanmean(
        np.where(busy[:, before], temp[:, before], np.nan))
    assert 3.5 < rise < 6.5  # the whole rack warms together
    warm = rows(sim, "sn01-b01/gpu7")
    peers = [rows(sim, f"sn01-b01/gpu{i}") for i in (0, 1, 2, 4, 5, 6)]
    assert 2.5 < np.mean(temp[warm] - np.median(temp[peers], axis=0)) < 6
    node5 = [rows(sim, f"sn01-b05/gpu{i}") for i in range(8)]
    gone = window(ts, t0, 2 * H + 30, 2 * H + 330)
    assert not gp[node5][:, gone].any() and not pp[sim.port_index["sn01-b05/mlx5_0:1"], gone].any()
    energy = gpu["energy_mj_total"][node5[0]]
    assert energy[ts > t0 + 2 * H + 400][0] < energy[ts <= t0 + 2 * H][-1]  # counters restarted
    node6 = [rows(sim, f"sn01-b06/gpu{i}") for i in range(8)]
    gap = window(ts, t0, H + 30, H + 270)
    assert not gp[node6][:, gap].any() and pp[sim.port_index["sn01-b06/mlx5_0:1"], gap].all()
    app = [ln for _, n, ln in lines if n == "sn01-b07"]
    assert {ln.split("):")[0] for ln in app if "): 13," in ln}.__len__() == 8  # every GPU of the node
    sbe = gpu["ecc_sbe_total"][rows(sim, "sn01-b08/gpu0")]
    assert 1 <= sbe[-1] <= 2


def test_partial_node_job_runs_half_the_gpus(library):
    sim = make(library, [], accelerators=16, duration="1h",
               jobs={"nodes_per_job": [2, 2], "duration": ["10h", "10h"], "gap": ["1m", "1m"], "partial_share": 1.0})
    ts, gpu, *_ = collect(sim)
    util = gpu["gpu_util_pct"][:, ts > sim.scenario.start + 120]
    assert (util[[0, 1, 2, 3]] > 50).all() and (util[[4, 5, 6, 7]] == 0).all()
    assert gpu["gpu_temp_c"][0, -1] - gpu["gpu_temp_c"][7, -1] > 15
    assert {x["fault"] for x in sim.labels()} == {"benign_partial_node_job", "benign_load_step"}


def test_same_seed_same_bytes_other_seed_other_bytes(library, tmp_path):
    faults = FAULTS[:3] + FAULTS[6:9]
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        simulate_to(make(library, faults, accelerators=48, duration="2h", seed=seed), tmp_path / name)
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == ["dcgm-exporter.om", "kernel.journal.json", "labels.jsonl", "node-exporter.om", "scenario.yaml",
                     "topology.yaml"]
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "a", tmp_path / "b", files, shallow=False)
    assert mismatch == [] and errors == []
    assert not filecmp.cmp(tmp_path / "a" / "dcgm-exporter.om", tmp_path / "c" / "dcgm-exporter.om", shallow=False)


def test_parquet_form_carries_events_once(library, tmp_path):
    from daemon.replay import replay

    faults = [FAULTS[1]]  # gpu_off_bus: AER lines and an Xid
    simulate_to(make(library, faults, accelerators=16, duration="3h"), tmp_path / "om")
    simulate_to(make(library, faults, accelerators=16, duration="3h"), tmp_path / "pq", "parquet")
    assert not (tmp_path / "pq" / "events.parquet").exists()
    a, b = replay([tmp_path / "om"]), replay([tmp_path / "pq"])
    assert a.stats.events == b.stats.events > 0 and a.stats.samples == b.stats.samples


def test_nothing_deviates_before_the_labelled_onset(library):
    sim = make(library, FAULTS, accelerators=64, seed=7)
    for p in sim.placed:
        for k, eff in enumerate(p.inst.template.effects):
            assert eff.start + p.inst.shift.get(k, 0.0) >= 0.0, (p.inst.template.name, k)
        assert all(ts >= p.inst.onset for ts, _, _ in p.lines)


def test_random_listed_faults_land_on_distinct_nodes(library):
    faults = [{"entity": "random", "fault": f, "template": "a", "onset": "1h", "failure": "3h"}
              for f in ("hbm_degradation", "nvlink_errors", "gpu_off_bus", "link_degradation") * 3]
    for seed in range(5):  # 12 faults on 16 nodes: with replacement, a shared node is all but certain
        sim = make(library, faults, accelerators=128, seed=seed)
        nodes = [p.inst.entity.split("/", 1)[0] for p in sim.placed]
        assert len(set(nodes)) == len(nodes), nodes


def test_a_confounder_acts_only_inside_its_labelled_window(library):
    """The label's window is where a confounder's effects are: a warm slot's offset (which holds its value
    past normalized 1.0 for a fault) ends with the window, mid-chunk too."""
    sim = make(library, [{"entity": "sn01-b02/gpu4", "fault": "benign_warm_slot", "template": "a",
                          "onset": "1h", "failure": "2h7m"}], accelerators=32, duration="4h", seed=3,
               jobs={"nodes_per_job": [4, 4], "duration": ["10h", "10h"], "gap": ["1s", "1s"], "partial_share": 0.0})
    ts, gpu, *_ = collect(sim)
    g = sim.gpu_index["sn01-b02/gpu4"]
    peers = [sim.gpu_index[f"sn01-b02/gpu{i}"] for i in range(8) if i != 4]
    excess = gpu["gpu_temp_c"][g] - np.median(gpu["gpu_temp_c"][peers], axis=0)
    inside = (ts > sim.scenario.start + 1.1 * 3600) & (ts <= sim.scenario.start + 2.1 * 3600)
    after = ts > sim.scenario.start + 2.2 * 3600
    assert np.mean(excess[inside]) > np.mean(excess[after]) + 3.0


def test_chunks_carry_each_gpus_speed_for_the_closed_loop(library):
    sim = make(library, [{"entity": "sn01-b02/gpu1", "fault": "fail_slow", "template": "b", "onset": "1h",
                          "failure": "3h"}], accelerators=16, duration="2h")
    chunks = list(sim.chunks())
    ts = np.concatenate([c.ts for c in chunks])
    speed = np.concatenate([c.gpu_speed for c in chunks], axis=1)
    g = sim.gpu_index["sn01-b02/gpu1"]
    late = window(ts, sim.scenario.start, 1.5 * H, 2 * H)
    assert 0.7 < speed[g][late].max() < 0.8 and (speed[g][ts < sim.scenario.start + H] == 1.0).all()
    others = np.delete(speed, g, axis=0)
    assert (others == 1.0).all()


def test_a_repaired_gpu_comes_back_reset(library):
    """The closed loop sets when a fault is repaired (``until``): the GPU is back on the bus then, with its
    counters from zero and no last Xid, as after the part is replaced and the node rebooted."""
    sim = make(library, [{"entity": "sn01-b02/gpu5", "fault": "gpu_off_bus", "template": "a", "onset": "30m",
                          "failure": "1h30m"}], accelerators=16, duration="4h")
    p = next(p for p in sim.placed if not p.inst.template.benign)
    p.inst.until = sim.scenario.start + 3 * H + 15  # mid-chunk, off the 30 s grid
    ts, gpu, _port, gp, *_ = collect(sim)
    g = sim.gpu_index["sn01-b02/gpu5"]
    gone, back = window(ts, sim.scenario.start, 2 * H, 3 * H), ts > sim.scenario.start + 3 * H + 15
    assert not gp[g][gone].any() and gp[g][back].all()
    assert gpu["xid_last"][g][ts <= sim.scenario.start + 3 * H].max() == 79 and (gpu["xid_last"][g][back] == 0).all()
    replay = gpu["pcie_replay_total"][g]
    assert replay[ts <= sim.scenario.start + 3 * H][-1] > 100 and replay[back][0] < 5


def test_healthy_gpus_log_corrected_aer_lines_in_realistic_noise_only(library):
    """Healthy GPUs' kernel logs show corrected PCIe errors now and then (lab/sim/noise.py): lines the kernel
    reader reads as corrected AER events of the GPU's PCI address; the quiet preset logs none."""
    from daemon.ingest.formats.kernel_events import parse_kernel_message
    from lab.sim.simulator import Simulator
    from lab.sim.scenario import Scenario

    def lines(noise):
        sc = Scenario.from_dict({"name": "t", "seed": 5, "topology": {"accelerators": 640}, "duration": "2d",
                                 "resolution": "5m", "profile": "full", "noise": noise, "faults": []})
        return [x for c in Simulator(sc, library).chunks(chunk_steps=288) for x in c.lines]

    assert not [x for x in lines("quiet") if "AER" in x[2]]
    said = [x for x in lines("realistic") if "AER" in x[2]]
    assert said and len(said) < 640 * 48  # rare: well under one a GPU an hour
    events = [parse_kernel_message(x[2]) for x in said]
    assert all(e is not None and e.kind == "aer" and e.severity == "corrected" and e.pci for e in events)
    assert len({(x[1], e.pci) for x, e in zip(said, events)}) > 1


@pytest.mark.parametrize("steps", [1, 2, 3, 8, 9, 240])
def test_counters_accumulate_step_after_step_in_chunks_of_any_size(steps):
    """The simulator's counters from their increments: each step's value the one before plus its increment
    (fractional energy included), whether the steps come in one chunk or a step at a time, to the bit; a reset
    starts again from its own increment."""
    from lab.sim.simulator import _accumulate

    rng = np.random.default_rng(steps)
    inc = np.vstack([np.floor(rng.exponential(2.0, (40, steps))), rng.uniform(0, 1e6, (40, steps))])
    carry = rng.uniform(0, 1e12, 80)
    whole = _accumulate(carry.copy(), inc, [])
    assert np.array_equal(whole, np.cumsum(np.concatenate((carry[:, None], inc), axis=1), axis=1)[:, 1:])
    c = carry.copy()
    one_by_one = np.hstack([_accumulate(c, inc[:, k:k + 1], []) for k in range(steps)])
    assert np.array_equal(whole, one_by_one) and np.array_equal(c, whole[:, -1])
    rows = np.array([3, 50])
    reset = _accumulate(carry.copy(), inc, [(rows, steps - 1)])
    assert np.array_equal(reset[rows, -1], inc[rows, -1]) and np.array_equal(reset[:3], whole[:3])
