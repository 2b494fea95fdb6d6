"""Time as the data has it (issue 24): sampling intervals learned from the telemetry, staleness and held readings
that follow them, a reboot grace only from reboot evidence, counters that stop at their maximum, and replays of
traces sampled every 10 s, every 5 minutes and at a different interval per exporter."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from daemon.ingest.batch import Batch
from daemon.judgement.pipeline import Pipeline
from daemon.replay import replay
from lab.sim.simulator import Simulator
from lab.sim.faults import load_library
from lab.sim.scenario import Scenario
from lab.sim.writer import simulate_to
from detectors.cadence import Cadence
from detectors.schema import State, empty_events, events_frame

ROOT = Path(__file__).resolve().parents[2]
PORTS = [f"n1/mlx5_{i}:1" for i in range(4)]


def batch(rows: list[tuple[float, str, str, float]], events: list[tuple] = ()) -> Batch:
    return Batch(samples=pd.DataFrame({
        "ts": [r[0] for r in rows], "entity": pd.Categorical([r[1] for r in rows]),
        "metric": pd.Categorical([r[2] for r in rows]), "value": [float(r[3]) for r in rows]}),
        events=events_frame(list(events)) if events else empty_events())


def port_rows(ts: float, state: dict[str, float] | None = None, counters: dict[str, float] | None = None,
              ports=PORTS) -> list[tuple]:
    rows = []
    for p in ports:
        rows += [(ts, p, "port_state", (state or {}).get(p, 4.0)),
                 (ts, p, "link_downed_total", (counters or {}).get(p, 3.0)),
                 (ts, p, "symbol_error_total", (counters or {}).get(p, 10.0))]
    return rows


def run(p: Pipeline, schedule: dict[float, list[tuple]], until: float, interval: float = 30.0,
        events: dict[float, list[tuple]] | None = None) -> list:
    """Tick every ``interval`` to ``until``; ``schedule`` maps a tick's time to its samples."""
    out = []
    t = interval
    while t <= until:
        res = p.tick(t, batch(schedule.get(t, []), (events or {}).get(t, [])))
        out += res.findings
        t += interval
    return out


def test_a_jittered_five_minute_interval_with_a_missed_scrape_is_learned():
    c = Cadence(tick_s=30.0, floor_s=150.0)
    stamps = [300.0 * k + (7 if k % 3 else -5) for k in range(1, 12) if k != 6]  # jitter, and scrape 6 lost
    for ts in stamps:
        c.observe(np.array(["n1/gpu0"], dtype=object), np.array([ts]))
    row = c.rows(np.array(["n1/gpu0"], dtype=object))
    assert abs(c.interval_of(row)[0] - 300.0) < 15.0
    assert c.window_of(row)[0] == pytest.approx(2.5 * c.interval_of(row)[0] + 30.0)
    # sampled faster than the tick: the floor
    c.observe(np.array(["n2/gpu0"], dtype=object), np.array([10.0]))
    c.observe(np.array(["n2/gpu0"], dtype=object), np.array([40.0]))
    assert c.window_of(c.rows(np.array(["n2/gpu0"], dtype=object)))[0] == 150.0


def test_the_interval_is_the_median_of_the_gaps_bit_for_bit():
    from detectors.cadence import _row_nanmedian

    rng = np.random.default_rng(7)
    gaps = rng.choice([15.0, 29.7, 30.0, 31.2, 60.0, 300.0], size=(400, 5)) + rng.normal(0.0, 1.0, (400, 5))
    gaps[rng.random((400, 5)) < 0.35] = np.nan  # rows with 0 to 5 gaps known
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):  # nanmedian warns on the all-NaN rows
        expected = np.nanmedian(gaps, axis=1)
    assert np.array_equal(_row_nanmedian(gaps), expected, equal_nan=True)


def test_the_learned_intervals_follow_every_change_of_the_gaps():
    """The cadence recomputes an entity's interval only when a gap differs from the one it replaces in its ring:
    fed random gaps over many ticks (steady stretches, changes, jitter, entities that come late), its intervals and
    the fleet's equal the median of each entity's last gaps computed afresh."""
    rng = np.random.default_rng(11)
    names = np.array([f"n{i}/gpu0" for i in range(6)], dtype=object)
    c = Cadence(tick_s=30.0, floor_s=150.0)
    last = np.zeros(len(names))
    history: list[list[float]] = [[] for _ in names]
    for tick in range(300):
        period = 30.0 if tick < 100 else 60.0 if tick < 200 else 30.0
        seen = np.flatnonzero(rng.random(len(names) - 1) < 0.8) if tick > 10 else np.arange(3)
        gap = np.where(rng.random(len(seen)) < 0.7, period, period + rng.normal(0.0, 3.0, len(seen)))
        if tick % 3 == 0:  # one entity alternating between two intervals: its median flips with each gap
            seen, gap = np.append(seen, len(names) - 1), np.append(gap, 30.0 if tick % 2 else 60.0)
        last[seen] += gap
        c.observe(names[seen], last[seen])
        for i, g in zip(seen, gap):
            if last[i] > g:  # not the first sight
                history[i].append(float(g))
    rows = c.rows(names)
    want = np.array([np.median(h[-5:]) if h else np.nan for h in history])
    assert np.allclose(c.interval[rows], want, equal_nan=True)
    assert c.fleet_interval == float(np.median(c.interval[np.isfinite(c.interval)]))


def test_five_minute_ports_are_never_unknown_between_samples_and_a_down_port_fails():
    p = Pipeline()
    schedule = {float(t): port_rows(t - 3.0) for t in range(300, 3601, 300)}  # samples 3 s before the tick
    findings = run(p, schedule, 3840.0)
    assert all(p.health.is_fresh(e, 3840.0) for e in PORTS)  # 243 s after the last sample: current
    assert not any(p.health.state_of(e) == State.UNKNOWN for e in PORTS)
    schedule[3900.0] = port_rows(3897.0, state={"n1/mlx5_2:1": 1.0}, counters={"n1/mlx5_2:1": 4.0})
    findings += [f for t in (3870.0, 3900.0, 3930.0) for f in p.tick(t, batch(schedule.get(t, []))).findings]
    assert [(f.entity, f.state) for f in findings if f.kind == "port"] == [("n1/mlx5_2:1", "failed")]
    failed = next(f for f in findings if f.entity == "n1/mlx5_2:1")
    assert failed.ts == 3900.0  # in the tick that read it: within one sampling interval


def test_held_readings_let_a_hot_gpu_through_the_hysteresis_at_five_minutes():
    p = Pipeline()
    schedule = {float(t): [(t, "n1/gpu0", "gpu_temp_c", 60.0), (t, "n1/gpu1", "gpu_temp_c", 60.0)]
                for t in range(300, 3001, 300)}
    schedule[3300.0] = [(3300.0, "n1/gpu0", "gpu_temp_c", 88.0), (3300.0, "n1/gpu1", "gpu_temp_c", 60.0)]
    findings = run(p, schedule, 3500.0)
    hot = [f for f in findings if f.entity == "n1/gpu0"]
    assert hot and hot[0].state == "subhealthy" and hot[0].ts == 3330.0  # the held reading's second tick


def test_a_reading_is_held_while_its_entity_is_current_and_dropped_after():
    from detectors.hold import GaugeHold

    cadence, hold = Cadence(tick_s=30.0, floor_s=150.0), GaugeHold()
    for k in range(1, 5):  # every 5 minutes
        cadence.observe(np.array(["n1/gpu0"], dtype=object), np.array([300.0 * k]))
        now = hold.update(300.0 * k, pd.DataFrame({"entity": ["n1/gpu0"], "metric": ["gpu_temp_c"],
                                                   "last": [60.0 + k], "max": [61.0 + k], "mean": [60.5 + k]}),
                          cadence)
        assert now["fresh"].tolist() == [True] and now["max"].tolist() == [61.0 + k]
        assert now["mean"].tolist() == [60.5 + k]  # the tick's own mean, for detectors that read it
    empty = pd.DataFrame({"entity": [], "metric": [], "last": [], "max": []})
    held = hold.update(1200.0 + 600.0, empty, cadence)  # ten minutes on: within 2.5 intervals and a tick
    assert held["last"].tolist() == [64.0] and held["max"].tolist() == [64.0] and not held["fresh"].any()
    assert held["mean"].tolist() == [64.0]  # held: its last reading
    assert hold.update(1200.0 + 800.0, empty, cadence).empty  # past it


def test_a_gap_the_sampling_explains_is_no_reboot_and_a_dead_exporter_goes_unknown():
    """Every 5 minutes and no reboot evidence: no grace, so a port found down fails at once. A port sampled every
    10 s whose exporter dies is unknown after the floor (150 s), not after five minutes."""
    p = Pipeline()
    schedule = {float(t): port_rows(t) for t in range(300, 1801, 300)}
    schedule[2100.0] = port_rows(2100.0, state={"n1/mlx5_0:1": 1.0})
    findings = run(p, schedule, 2100.0)
    assert ("n1/mlx5_0:1", "failed") in [(f.entity, f.state) for f in findings]
    assert not p.grace_until
    fast = Pipeline()
    sched = {}
    for t in range(30, 601, 30):
        sched[float(t)] = [(t - 20.0 + d, "n9/gpu0", "gpu_temp_c", 50.0) for d in (0.0, 10.0, 20.0)]
    run(fast, sched, 900.0)
    assert fast.health.is_fresh("n9/gpu0", 600.0 + 150.0) and not fast.health.is_fresh("n9/gpu0", 600.0 + 181.0)
    assert fast.health.state_of("n9/gpu0") == State.UNKNOWN


def test_reboot_evidence_graces_the_node_and_one_cleared_port_graces_nothing():
    gpus = [f"n1/gpu{i}" for i in range(4)]

    def node_rows(t, counters=50.0, state=None, ports=PORTS):
        rows = port_rows(t, state=state, counters={p: counters for p in ports}, ports=ports)
        rows += [(t, g, "pcie_replay_total", counters) for g in gpus]
        return rows

    # a reboot: everything resets together, the ports come back in INIT: no link failure
    p = Pipeline()
    schedule = {float(t): node_rows(t) for t in range(30, 601, 30)}
    for t in range(840, 1201, 30):
        schedule[float(t)] = node_rows(t, counters=0.0, state={q: 2.0 for q in PORTS} if t < 900 else None)
    findings = run(p, schedule, 1200.0)
    assert "n1" in p.grace_until and not [f for f in findings if f.state == "failed"]
    # perfquery -R on one port, then another port goes down: failed at once, no grace
    p = Pipeline()
    schedule = {float(t): node_rows(t) for t in range(30, 601, 30)}
    schedule[630.0] = port_rows(630.0, counters={PORTS[0]: 0.0} | {q: 50.0 for q in PORTS[1:]}) + \
        [(630.0, g, "pcie_replay_total", 50.0) for g in gpus]
    schedule[660.0] = port_rows(660.0, state={PORTS[3]: 1.0}, counters={PORTS[0]: 0.0, PORTS[3]: 51.0}
                                | {q: 50.0 for q in PORTS[1:3]}) + [(660.0, g, "pcie_replay_total", 50.0) for g in gpus]
    findings = run(p, schedule, 690.0)
    assert not p.grace_until
    assert (PORTS[3], "failed", 660.0) in [(f.entity, f.state, f.ts) for f in findings]
    # the kernel's boot banner graces the node from its time
    p = Pipeline()
    boot = [(700.0, "n1", "boot", None, "info", "kernel booted: Linux 6.8.0", "kernel", None, None)]
    schedule = {float(t): port_rows(t) for t in range(30, 691, 30)}
    schedule[720.0] = port_rows(720.0, state={PORTS[1]: 2.0})
    findings = run(p, schedule, 720.0, events={720.0: boot})
    assert p.grace_until["n1"] == 700.0 + p.config.reboot_grace_s
    assert not [f for f in findings if f.state == "failed"]


def test_a_saturated_link_downed_counter_is_said_from_a_real_h100():
    """leptonai/gpud's H100 sysfs (fixtures/real): mlx5_1's link_downed is 255, the 8-bit counter's maximum."""
    from daemon.ingest.collectors.sysfs import SysfsCollector  # noqa: F401  (the live reader of the same files)

    root = ROOT / "fixtures" / "real" / "gpud" / "sys-class-infiniband-h100"
    p = Pipeline()
    for k in range(1, 4):
        rows = []
        for dev in ("mlx5_0", "mlx5_1"):
            counters = root / dev / "ports" / "1" / "counters"
            for f, metric in (("link_downed", "link_downed_total"), ("port_rcv_errors", "rcv_errors_total")):
                rows.append((30.0 * k, f"n1/{dev}:1", metric, float((counters / f).read_text())))
            rows.append((30.0 * k, f"n1/{dev}:1", "port_state",
                         float((root / dev / "ports" / "1" / "state").read_text().split(":")[0])))
        p.tick(30.0 * k, batch(rows))
    h = p.health.entities.get("n1/mlx5_1:1")
    assert h is not None and h.state == State.SUSPECT and "stuck at 255" in " ".join(h.top.reasons)
    assert p.health.state_of("n1/mlx5_0:1") == State.HEALTHY


def test_an_event_on_the_last_tick_becomes_a_finding(tmp_path):
    path = tmp_path / "k.json"
    recs = [{"__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "_HOSTNAME": "sn01-b01", "_TRANSPORT": "kernel",
             "MESSAGE": msg} for ts, msg in (
        (1772409600.0, "NVRM: GPU at PCI:0000:18:00: GPU-1"),
        (1772413200.0, "NVRM: Xid (PCI:0000:18:00): 94, pid=1, name=python3, Contained: SM (0x1). RST: No"))]
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    buf = io.StringIO()
    replay([path], findings_out=buf)
    states = [json.loads(x)["state"] for x in buf.getvalue().splitlines() if json.loads(x)["entity"] == "sn01-b01"]
    assert "subhealthy" in states


def test_replay_jumps_over_years_without_data_and_refuses_a_corrupted_stamp(tmp_path):
    (tmp_path / "sn01-b01.dmesg").write_text(
        "[Mon Mar  2 00:00:00 2020] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n")
    (tmp_path / "k.json").write_text("\n".join(json.dumps({
        "__REALTIME_TIMESTAMP": str(int(ts * 1e6)), "_HOSTNAME": "sn01-b02", "_TRANSPORT": "kernel",
        "MESSAGE": "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."}) for ts in (210.0,
                                                                                               1772409600.0)) + "\n")
    started = time.perf_counter()
    result = replay([tmp_path])
    assert time.perf_counter() - started < 60  # 6 years of 30 s ticks would be 6.3 million
    assert result.stats.jumps and result.stats.implausible == 1
    assert any("before 2000-01-01" in m for m in result.rejects.messages)
    assert result.stats.ticks < 2 * 720 + 20


def _scenario(sampling: dict, noise: str) -> Scenario:
    return Scenario.from_dict({
        "name": "t", "seed": 3, "topology": {"accelerators": 64}, "duration": "6h", "resolution": "10s",
        "profile": "full", "sampling": sampling, "noise": noise,
        "jobs": {"nodes_per_job": [2, 4], "duration": ["2h", "5h"], "gap": ["5m", "10m"], "partial_share": 0.0},
        "faults": [
            {"entity": "sn01-b02/mlx5_1:1", "fault": "link_degradation", "template": "a", "onset": "2h",
             "failure": "5h"},
            {"entity": "sn01-b05/gpu3", "fault": "gpu_off_bus", "template": "a", "onset": "2h", "failure": "5h"},
            {"entity": "sn01-b03", "fault": "benign_reboot", "template": "a", "onset": "3h"},
            {"entity": "sn01-b04", "fault": "benign_exporter_gap", "template": "b", "onset": "2h30m"},
            {"entity": "sn01-b06/gpu1", "fault": "benign_single_correctable_ecc", "template": "a", "onset": "1h"},
        ]})


@pytest.mark.parametrize("name,sampling", [
    ("10s", {"dcgm": {"interval": "10s", "jitter": "2s", "missed": 0.01},
             "node": {"interval": "10s", "jitter": "2s", "missed": 0.01}}),
    ("5min", {"dcgm": {"interval": "5m", "aligned": True}, "node": {"interval": "5m", "aligned": True}}),
    ("mixed", {"dcgm": {"interval": "10s", "jitter": "2s", "missed": 0.01},
               "node": {"interval": "5m", "jitter": "3s", "missed": 0.01}}),
])
def test_each_sampling_interval_flags_the_faults_and_nothing_else(tmp_path, name, sampling):
    """Written in the exporters' own formats and replayed through the readers, with realistic background errors."""
    sim = Simulator(_scenario(sampling, "realistic"), load_library(ROOT / "fixtures" / "faults"))
    simulate_to(sim, tmp_path / "t")
    buf = io.StringIO()
    replay([tmp_path / "t"], findings_out=buf)
    findings = [json.loads(x) for x in buf.getvalue().splitlines()]
    flagged = {f["entity"] for f in findings if f["state"] in ("subhealthy", "failed")}
    assert flagged <= {"sn01-b02/mlx5_1:1", "sn01-b02", "sn01-b05/gpu3", "sn01-b05"}, flagged
    start = sim.scenario.start
    step = 300.0 if name == "5min" else 10.0
    for entity in ("sn01-b02/mlx5_1:1", "sn01-b05/gpu3"):
        mine = [f for f in findings if f["entity"] == entity]
        early = [f for f in mine if f["state"] == "subhealthy" and f["ts"] < start + 5 * 3600]
        failed = [f for f in mine if f["state"] == "failed"]
        assert early, (entity, mine[:3])
        assert failed and failed[0]["ts"] <= start + 5 * 3600 + step + 30.0, (entity, failed[:1])


def test_stamps_past_year_9999_or_ahead_of_now_are_rejected_and_the_summary_prints(tmp_path, capsys):
    """Issue 54: a sample after year 9999 crashed the replay's summary after the whole run; one in 2100 was taken."""
    from daemon.cli import main

    trace = tmp_path / "t"
    trace.mkdir()
    (trace / "samples.csv").write_text("ts,entity,metric,value\n1772409600,sn01-b01/gpu0,gpu_temp_c,41\n"
                                       "1772409630,sn01-b01/gpu0,gpu_temp_c,42\n"
                                       "4102444800,sn01-b01/gpu0,gpu_temp_c,43\n"  # 2100-01-01
                                       "253402300800,sn01-b01/gpu0,gpu_temp_c,44\n")  # 10000-01-01
    assert main(["replay", str(trace)]) == 0
    err = capsys.readouterr()
    assert "stamped more than a day after now" in err.err + err.out
    result = replay([trace])
    assert result.stats.implausible == 2
    ahead = replay([trace], future_s=None)  # a trace made for a date ahead: 2100 taken, year 10000 never
    assert ahead.stats.implausible == 1 and any("after year 9999" in m for m in ahead.rejects.messages)


def test_held_readings_every_one_current_or_some_dropped_come_in_slot_order_and_keep_their_values():
    """Every series current (the slots' arrays copied whole) and some past their window (picked) give the same rows a
    series each, fresh ones with the tick's max and mean, held ones their last reading; a returned table keeps its
    values when the hold moves on (the pipeline may keep what it is given)."""
    from detectors.hold import GaugeHold

    cadence, hold = Cadence(tick_s=30.0, floor_s=150.0), GaugeHold()
    names = np.array(["n1/gpu0", "n1/gpu1"], dtype=object)
    cadence.observe(names, np.array([30.0, 30.0]))
    both = hold.update(30.0, pd.DataFrame({"entity": list(names), "metric": ["gpu_temp_c"] * 2,
                                           "last": [60.0, 70.0], "max": [61.0, 71.0], "mean": [60.5, 70.5]}), cadence)
    cadence.observe(names, np.array([60.0, 60.0]))  # (both seen: each has its interval, 30 s, a 150 s window)
    one = hold.update(60.0, pd.DataFrame({"entity": ["n1/gpu1"], "metric": ["gpu_temp_c"], "last": [72.0],
                                          "max": [73.0], "mean": [72.5]}), cadence)  # gpu0 held: every one current
    assert list(one["entity"]) == ["n1/gpu0", "n1/gpu1"] and one["fresh"].tolist() == [False, True]
    assert one["last"].tolist() == [60.0, 72.0] and one["max"].tolist() == [60.0, 73.0]
    assert one["mean"].tolist() == [60.0, 72.5]
    cadence.observe(names[1:], np.array([400.0]))
    later = hold.update(400.0, pd.DataFrame({"entity": ["n1/gpu1"], "metric": ["gpu_temp_c"], "last": [74.0],
                                             "max": [75.0], "mean": [74.5]}), cadence)  # gpu0 past its window
    assert list(later["entity"]) == ["n1/gpu1"] and later["max"].tolist() == [75.0]
    assert later["fresh"].tolist() == [True]
    assert both["last"].tolist() == [60.0, 70.0] and one["last"].tolist() == [60.0, 72.0]  # not moved with the hold


def test_a_node_stays_current_while_its_five_minute_gpus_are_after_its_own_series_stop():
    """A node's staleness window is its longest entity's: its own series (node_exporter's, every minute with jitter,
    their learned interval moving after the GPUs' was learned) must not shorten it, or the node goes unknown between
    its GPUs' 5-minute samples once node_exporter stops."""
    rng = np.random.default_rng(1)
    p = Pipeline()
    for k in range(1, 131):
        t = 30.0 * k
        rows = [(t - 2.0, "n1/gpu0", "gpu_temp_c", 60.0)] if t % 300 == 0 else []
        if t <= 1500 and t % 60 == 0:
            rows.append((t - 20.0 + rng.uniform(-9, 9), "n1", "boot_time_s", 1000.0))
        p.tick(t, batch(rows))
        if t >= 600:
            assert p.health.freshness.window_of("n1") == p.node_window["n1"], t
        if t >= 1800:
            assert p.health.state_of("n1") != State.UNKNOWN, t
    assert p.node_window["n1"] > 600.0
