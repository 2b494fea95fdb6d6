import numpy as np

from detectors.peer import PeerDeviation
from detectors.schema import State
from tests.detectors.sim_helpers import first_flag, simulate_and_replay


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


def _tick(now, temps, util=None, fresh=None):
    """A tick of the readings ``temps`` (and ``util``); ``fresh``: all sampled in it (True) or all held from an
    earlier tick (False), as GaugeHold marks them (None: no such column)."""
    import pandas as pd

    from detectors.contract import TickInput
    from detectors.schema import events_frame

    rows = []
    for entity, t in temps.items():
        rows += [(entity, "gpu_temp_c", t), (entity, "power_w", 400.0)]
        if util is not None:
            rows.append((entity, "gpu_util_pct", util))
    g = pd.DataFrame({"entity": pd.Series([r[0] for r in rows], dtype=object),
                      "metric": pd.Series([r[1] for r in rows], dtype=object),
                      "last": [r[2] for r in rows], "max": [r[2] for r in rows]})
    if fresh is not None:
        g["fresh"] = fresh
    return TickInput(now, events_frame([]), pd.DataFrame({"entity": [], "metric": [], "increase": [], "resets": []}), g)


def test_a_gpu_that_always_ran_hot_is_a_warm_slot_and_one_moving_away_is_not():
    rng = np.random.default_rng(1)
    d = PeerDeviation().fit()
    first_hot = {}
    for k in range(4 * 120):  # 4 h at 30 s
        now = 30.0 * k
        temps = {f"n{n}/gpu{g}": 60.0 + rng.normal(0, 1.0) for n in range(4) for g in range(8)}
        temps["n0/gpu1"] += 10.0  # warm slot: 10 °C above its peers from the start
        temps["n1/gpu2"] += max(0.0, (now - 3600.0) / 600.0)  # degrading from 1 h: +1 °C every 10 min
        for ev in d.update(_tick(now, temps)):
            if ev.level == State.SUBHEALTHY:
                first_hot.setdefault(ev.entity, now)
    assert "n0/gpu1" not in first_hot
    # when it has moved 4-6 °C from its own baseline, far more than any other GPU of the fleet moves from its own
    assert 3600.0 + 2400.0 <= first_hot["n1/gpu2"] <= 3600.0 + 3600.0


def test_in_a_fleet_whose_temperatures_wander_a_rise_must_be_larger():
    """Every GPU's temperature wanders by up to 4 °C over hours (workload phases): a 4 °C rise over its own
    baseline is ordinary there, no wandering GPU is flagged, and the degrading one only once it stands far out."""
    rng = np.random.default_rng(3)
    phase = rng.uniform(0, 2 * np.pi, 32)
    d = PeerDeviation().fit()
    first_hot = {}
    for k in range(6 * 120):  # 6 h at 30 s
        now = 30.0 * k
        temps = {f"n{n}/gpu{g}": 60.0 + 4.0 * np.sin(now / 3600.0 + phase[8 * n + g]) + rng.normal(0, 1.0)
                 for n in range(4) for g in range(8)}
        temps["n1/gpu2"] += max(0.0, (now - 3 * 3600.0) / 600.0)  # degrading from 3 h: +1 °C every 10 min
        for ev in d.update(_tick(now, temps)):
            if ev.level == State.SUBHEALTHY:
                first_hot.setdefault(ev.entity, now)
    assert set(first_hot) == {"n1/gpu2"}, first_hot
    assert first_hot["n1/gpu2"] >= 3 * 3600.0 + 3600.0  # not at a 4-6 °C rise, as in a steady fleet


def test_a_gpu_warmer_busy_than_idle_does_not_rise_when_its_job_starts():
    rng = np.random.default_rng(2)
    d = PeerDeviation().fit()
    flagged = set()
    for k in range(4 * 120):
        now = 30.0 * k
        busy = now >= 3600.0  # the node idles for an hour, then a job starts
        temps = {f"n{n}/gpu{g}": 60.0 + rng.normal(0, 1.0) for n in range(4) for g in range(8)}
        temps["n0/gpu1"] += 10.0 if busy else 4.0  # its own thermal resistance shows under load
        flagged |= {ev.entity for ev in d.update(_tick(now, temps, 95.0 if busy else 0.0))
                    if ev.level == State.SUBHEALTHY}
    assert flagged == set()


def test_peers_never_mix_models_or_accelerator_kinds():
    """Half of a node's accelerators are another model that runs 15 °C hotter: only the degrading one is flagged,
    and it stands out against its own model's peers. Judged against a median between the two models, the fleet's
    spread swells and the degrading GPU never stands out against its peers (only its rise shows)."""
    import re
    from dataclasses import replace

    rng = np.random.default_rng(3)
    models = {f"n{n}/gpu{g}": ("MI300X" if g < 4 else "MI325X") for n in range(4) for g in range(8)}
    with_models, without = PeerDeviation().fit(), PeerDeviation().fit()
    peer_z, peer_z_blind, flagged = {}, {}, set()
    for k in range(2 * 120):
        now = 30.0 * k
        temps = {e: 60.0 + (15.0 if m == "MI325X" else 0.0) + rng.normal(0, 1.0) for e, m in models.items()}
        temps["n2/gpu6"] += max(0.0, (now - 1800.0) / 300.0)  # one MI325X degrading from 30 min
        tick = _tick(now, temps)
        for seen, evidence in ((peer_z, with_models.update(replace(tick, models=models))),
                               (peer_z_blind, without.update(tick))):
            for ev in evidence:
                z = float(re.search(r"peers at equal power \(z (-?[\d.]+)", ev.reasons[0]).group(1))
                seen[ev.entity] = max(seen.get(ev.entity, 0.0), z)
                flagged.add(ev.entity)
    assert flagged == {"n2/gpu6"}
    assert peer_z["n2/gpu6"] >= 6.0 > peer_z_blind["n2/gpu6"], (peer_z, peer_z_blind)


def test_peer_groups_name_node_kind_and_model():
    from detectors.grouping import peer_group

    assert peer_group("n1/npu3") == "n1|npu|" and peer_group("n1/gpu3", {"n1/gpu3": "H100"}) == "n1|gpu|H100"
    assert peer_group("n1/gpu3") != peer_group("n1/dcu3")


def _tick_with(now, temps, power, util):
    import pandas as pd

    from detectors.contract import TickInput
    from detectors.schema import events_frame

    rows = [(e, m, v) for e in temps for m, v in (("gpu_temp_c", temps[e]), ("power_w", power[e]),
                                                  ("gpu_util_pct", util[e]))]
    g = pd.DataFrame({"entity": pd.Series([r[0] for r in rows], dtype=object),
                      "metric": pd.Series([r[1] for r in rows], dtype=object),
                      "last": [r[2] for r in rows], "max": [r[2] for r in rows]})
    return TickInput(now, events_frame([]), pd.DataFrame({"entity": [], "metric": [], "increase": [], "resets": []}), g)


def test_a_gpu_whose_busy_peers_change_with_the_jobs_has_not_risen():
    """Node n0 runs jobs on all eight GPUs, and for one hour in six on gpu0-3 only (the others idle); its thermal
    resistances are those of seed 14 of the matrix' `300s` cells, where the idle half's are the higher. gpu0 then
    stands 4 °C above the median of its four busy peers, against all eight 1.5 °C: a baseline of that residual calls
    each half-node job a rise of 2.5 °C (the seed's false flag, with sampling noise on top). Its own temperature at
    its power has not moved: with the rise asked down to 2 °C at a z of 3, so that 2.5 °C would show, no flag. A
    GPU whose thermal resistance steps up (+6 °C at 400 W) is flagged within half an hour. Five-minute samples with
    little noise (so that the sensitive setting sees the jobs, not the noise); node n3 idles throughout (the fleet's
    slope of temperature over power needs idle GPUs to be fitted)."""
    rng = np.random.default_rng(14)
    gpus = [f"n{n}/gpu{g}" for n in range(4) for g in range(8)]
    resistance = dict(zip(gpus, rng.uniform(0.060, 0.076, len(gpus))))
    resistance.update(zip(gpus[:8], (0.0785, 0.0701, 0.0671, 0.0604, 0.0732, 0.0812, 0.0752, 0.0776)))
    d = PeerDeviation(min_rise_c=2.0, z_threshold=3.0).fit()
    flagged: dict[str, float] = {}
    step_at = 26 * 3600.0
    for k in range(int(27 * 3600 / 300)):
        now = 300.0 * k
        half = now % (6 * 3600) >= 5 * 3600
        busy = {e: not e.startswith("n3/") and not (half and e.startswith("n0/") and int(e[-1]) >= 4) for e in gpus}
        power = {e: (400.0 + rng.normal(0, 15)) if busy[e] else 60.0 + rng.normal(0, 5) for e in gpus}
        if now >= step_at:
            resistance["n2/gpu5"] = resistance["n2/gpu5"] + 0.015 if now == step_at else resistance["n2/gpu5"]
        temps = {e: 30.0 + resistance[e] * power[e] + rng.normal(0, 0.3) for e in gpus}
        util = {e: 95.0 if busy[e] else 0.0 for e in gpus}
        for ev in d.update(_tick_with(now, temps, power, util)):
            if ev.level == State.SUBHEALTHY:
                flagged.setdefault(ev.entity, now)
    assert set(flagged) == {"n2/gpu5"}, flagged
    assert flagged["n2/gpu5"] - step_at <= 1800, flagged


def _long_tick(now, samples, with_mean=True):
    """A tick over several scrapes: each (entity, metric)'s last sample, its largest and (as the pipeline gives it)
    its mean. ``samples``: entity -> metric -> the tick's readings."""
    import pandas as pd

    from detectors.contract import TickInput
    from detectors.schema import events_frame

    rows = [(e, m, v[-1], max(v), float(np.mean(v))) for e, by in samples.items() for m, v in by.items()]
    g = pd.DataFrame({"entity": pd.Series([r[0] for r in rows], dtype=object),
                      "metric": pd.Series([r[1] for r in rows], dtype=object),
                      "last": [r[2] for r in rows], "max": [r[3] for r in rows]})
    if with_mean:
        g["mean"] = [r[4] for r in rows]
    return TickInput(now, events_frame([]), pd.DataFrame({"entity": [], "metric": [], "increase": [], "resets": []}), g)


def test_a_tick_over_many_scrapes_reads_their_mean_not_the_last_ones_noise():
    """A day of 5-minute ticks over 30 s scrapes (noise 1 °C a scrape): a GPU whose HBM always runs 15.5 °C above its
    peers' (a warm slot, under the 17 °C that flags an HBM without a rise) is never flagged when the tick's mean is
    read; read from each tick's last scrape alone, the noise the smoothing no longer averages away flags it."""
    flagged = {}
    for with_mean in (True, False):
        rng = np.random.default_rng(5)
        d = PeerDeviation().fit()
        flagged[with_mean] = 0
        for k in range(288):
            samples = {}
            for n in range(4):
                for gpu in range(8):
                    hbm = 70.0 + (15.5 if (n, gpu) == (0, 1) else 0.0) + rng.normal(0, 1.0, 10)
                    samples[f"n{n}/gpu{gpu}"] = {"gpu_temp_c": list(60.0 + rng.normal(0, 1.0, 10)),
                                                 "hbm_temp_c": list(hbm), "power_w": [400.0] * 10}
            flagged[with_mean] += sum(ev.level == State.SUBHEALTHY for ev in d.update(_long_tick(300.0 * k, samples,
                                                                                                  with_mean)))
    assert flagged[True] == 0 and flagged[False] > 0, flagged


def test_a_gpu_far_above_its_peers_from_its_first_sample_needs_no_rise_its_hbm_two_degrees_more():
    """Three hours of four nodes of eight: a GPU whose die runs 16 °C above its peers' from raswarden's first sample
    (already degrading when it started) is flagged without a rise; a GPU whose HBM alone stands 16 °C above (its
    memory traffic, which the power does not show) is not, one whose HBM stands 18 °C above is."""
    rng = np.random.default_rng(7)
    d = PeerDeviation().fit()
    flagged: dict[str, float] = {}
    for k in range(3 * 120):
        now = 30.0 * k
        samples = {}
        for n in range(4):
            for gpu in range(8):
                e = f"n{n}/gpu{gpu}"
                die = 60.0 + (16.0 if e == "n0/gpu1" else 0.0) + rng.normal(0, 0.5)
                hbm = die + 5.0 + {"n1/gpu2": 16.0, "n2/gpu3": 18.0}.get(e, 0.0) + rng.normal(0, 0.5)
                samples[e] = {"gpu_temp_c": [die], "hbm_temp_c": [hbm], "power_w": [400.0]}
        for ev in d.update(_long_tick(now, samples)):
            if ev.level == State.SUBHEALTHY:
                flagged.setdefault(ev.entity, now)
    assert set(flagged) == {"n0/gpu1", "n2/gpu3"}, flagged
    assert max(flagged.values()) <= 1800, flagged  # (the smoothing's half-hour, not a rise's)


def test_readings_held_between_samples_are_judged_as_when_worked_out_again():
    """A tick whose readings are the last tick's (5-minute samples judged every 30 s) takes its peer figures from the
    tick before; the evidence is the same as a detector that works every tick out afresh, and a changed reading is
    never answered from the tick before."""
    rng = np.random.default_rng(3)
    memo, fresh = PeerDeviation().fit(), PeerDeviation().fit()
    temps: dict = {}
    for k in range(3 * 120):
        now = 30.0 * k
        if k % 10 == 0:  # a new sample every 5 minutes, the same readings in between
            temps = {f"n{n}/gpu{g}": 60.0 + rng.normal(0, 1.0) for n in range(4) for g in range(8)}
            temps["n2/gpu5"] += max(0.0, (now - 3600.0) / 300.0)
        fresh._peer_memo = {}
        a, b = memo.update(_tick(now, temps, util=95.0)), fresh.update(_tick(now, temps, util=95.0))
        assert [(e.entity, e.level, e.reasons) for e in a] == [(e.entity, e.level, e.reasons) for e in b]
    assert any(e.entity == "n2/gpu5" and e.level == State.SUBHEALTHY for e in a)
    import pickle

    assert memo._peer_memo and not hasattr(pickle.loads(pickle.dumps(memo)), "_peer_memo")  # a warm state's size


def test_a_reading_held_between_samples_is_folded_in_once():
    """Five-minute samples judged every 30 s, the ticks between marked held as GaugeHold marks them: a held tick says
    what its sample's tick said, and the smoothing is that of a detector given each sample once, at its own time (a
    sample held over ten ticks is one reading, not ten). The GPU whose temperature climbs is flagged at a sample's
    tick, never first at a tick between two samples."""
    rng = np.random.default_rng(3)
    held, once = PeerDeviation().fit(), PeerDeviation().fit()
    temps: dict = {}
    first = None
    for k in range(3 * 120):
        now = 30.0 * k
        sampled = k % 10 == 0
        if sampled:
            temps = {f"n{n}/gpu{g}": 60.0 + rng.normal(0, 1.0) for n in range(4) for g in range(8)}
            temps["n2/gpu5"] += max(0.0, (now - 3600.0) / 300.0)
            said = once.update(_tick(now, temps, util=95.0))
        got = held.update(_tick(now, temps, util=95.0, fresh=sampled))
        assert [(e.entity, e.level, e.reasons) for e in got] == [(e.entity, e.level, e.reasons) for e in said]
        if first is None and any(e.entity == "n2/gpu5" and e.level == State.SUBHEALTHY for e in got):
            first = k
    assert first is not None and first % 10 == 0
    np.testing.assert_array_equal(held._smooth.value, once._smooth.value)


def test_a_node_of_four_running_a_half_node_job_is_judged_as_a_whole():
    """A GB200 tray (or any node of four GPUs) running a half-node job has two busy GPUs and two idle: fewer than four
    share either load, so each is set against the whole node, power-corrected. An idle GPU whose cold plate lets go is
    flagged; its idle twin and the busy pair are not."""
    import pandas as pd

    from detectors.contract import TickInput
    from detectors.schema import events_frame

    rng = np.random.default_rng(5)
    d = PeerDeviation().fit()
    first_hot = {}
    for k in range(4 * 120):  # 4 h at 30 s
        now = 30.0 * k
        rows = []
        for n in range(6):
            for g in range(4):
                busy = g < 2
                power = (700.0 if busy else 160.0) + rng.normal(0, 6)
                temp = 30.0 + 0.045 * power + rng.normal(0, 0.7)
                if (n, g) == (1, 2):
                    temp += max(0.0, (now - 3600.0) / 600.0)  # degrading from 1 h, idle: +1 °C every 10 min
                rows += [(f"t{n}/gpu{g}", "gpu_temp_c", temp), (f"t{n}/gpu{g}", "power_w", power),
                         (f"t{n}/gpu{g}", "gpu_util_pct", 95.0 if busy else 0.0)]
        g = pd.DataFrame({"entity": pd.Series([r[0] for r in rows], dtype=object),
                          "metric": pd.Series([r[1] for r in rows], dtype=object),
                          "last": [r[2] for r in rows], "max": [r[2] for r in rows]})
        tick = TickInput(now, events_frame([]), pd.DataFrame({"entity": [], "metric": [], "increase": [],
                                                              "resets": []}), g)
        for ev in d.update(tick):
            if ev.level == State.SUBHEALTHY:
                first_hot.setdefault(ev.entity, now)
    assert set(first_hot) == {"t1/gpu2"}
    assert first_hot["t1/gpu2"] <= 3600.0 + 5400.0  # within 90 minutes of its first degree
