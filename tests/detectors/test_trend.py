import numpy as np
import pandas as pd
import pytest

from detectors.contract import TickInput
from detectors.schema import State, events_frame
from detectors.trend_counters import LOGGED_AER as LOGGED
from detectors.rate_spread import fit_lognormal
from detectors.trend import TrendDetector
from tests.detectors.sim_helpers import first_flag, simulate_and_replay

EMPTY_G = pd.DataFrame({"entity": [], "metric": [], "last": [], "max": []})


def tick(det, now, n, entity="n/gpu0", metric="ecc_sbe_total", dt=None, others=0):
    """One tick's increases: ``n`` errors on ``entity`` and none on ``others`` quiet parts of the same counter."""
    entities = [entity] + [f"q{k}/gpu0" for k in range(others)]
    inc = pd.DataFrame({"entity": entities, "metric": [metric] * len(entities),
                        "increase": [float(n)] + [0.0] * others, "resets": [0] * len(entities),
                        "dt": [dt if dt is not None else 30.0] * len(entities)})
    return det.update(TickInput(now, events_frame([]), inc, EMPTY_G))


def test_leaving_out_the_fleets_noisiest_healthy_parts_hides_its_spread():
    """640 parts, rates log-normal with sigma 2 (the realistic AER noise), 3 hours in: a few dozen parts have
    counted. Leaving out the top 1 % (the old ``trim``) fits a fleet under half as spread, and its noisiest healthy
    parts then look risen (run 3's false flags); leaving out the top part only (``trim`` 0.001) does not."""
    assert TrendDetector().trim * 640 <= 1.0
    for seed in range(6):
        rng = np.random.default_rng(seed)
        k = np.sort(rng.poisson(0.002 * np.exp(rng.normal(0.0, 2.0, 640)) * 3.0).astype(float))
        counted, zeros = k[k > 0], float((k == 0).sum())
        _, top_percent_out = fit_lognormal(counted[:-7], zeros, 3.0, prior_rate=1 / 50, prior_spread=1.5)
        _, top_part_out = fit_lognormal(counted[:-1], zeros, 3.0, prior_rate=1 / 50, prior_spread=1.5)
        assert top_percent_out < 1.0 and top_part_out > 1.1 and top_part_out > top_percent_out + 0.25, seed


def test_a_handful_of_errors_a_day_is_normal_a_rising_rate_is_not():
    det = TrendDetector().fit()
    # five errors spread over a day on a fleet of 200 parts that sees some too: no alarm
    day = 86400
    for k in range(0, day, 300):
        n = 1 if k in (3600, 20000, 41000, 60000, 80000) else 0
        assert tick(det, k, n, dt=300.0, others=199) == []
    # then errors in every 5-minute sample: an alarm within the hour
    fired = None
    for j, k in enumerate(range(day, day + 3 * 3600, 300)):
        if tick(det, k, 1, dt=300.0, others=199) and fired is None:
            fired = j
    assert fired is not None and (fired + 1) * 300 <= 3600, fired


def test_a_burst_of_any_size_is_one_episode():
    """A counter that jumps by millions (a GPU back from the bus) is the rules' to judge by magnitude."""
    det = TrendDetector().fit()
    assert tick(det, 30, 5_000_000) == []
    for k in range(2, 30):  # the burst going on for ten more samples within its five minutes
        assert tick(det, 30 * k, 1000 if k < 12 else 0) == []


def test_the_same_rate_reads_the_same_at_any_sampling_interval():
    """Errors at 12 an hour flag at 15 s, 1 min and 5 min sampling alike, within about the same time."""
    times = {}
    for interval in (15, 60, 300):
        det = TrendDetector().fit()
        for k in range(0, 6 * 3600, interval):  # six quiet hours on a fleet of 100
            tick(det, k, 0, dt=float(interval), others=99)
        start = 6 * 3600
        for k in range(start, start + 3 * 3600, interval):
            n = 1 if (k - start) % 300 < interval else 0  # one error every 5 minutes, whatever the sampling
            if tick(det, k, n, dt=float(interval), others=99):
                times[interval] = k - start
                break
    assert set(times) == {15, 60, 300}, times
    assert max(times.values()) - min(times.values()) <= 600, times


def _episodes_in_an_hour(stamps: list[float], tick_s: float = 30.0) -> int:
    """The episodes a part counts when every sample at ``stamps`` has errors, read as the pipeline reads them: one
    increase a tick, over the time since the last sample of the tick before (the first one's as long as the next)."""
    det = TrendDetector().fit()
    ticks: dict[float, list[float]] = {}
    for ts in stamps:
        ticks.setdefault((ts // tick_s + 1) * tick_s, []).append(ts)
    last = stamps[0] - (stamps[1] - stamps[0])
    for now, inside in sorted(ticks.items()):
        tick(det, now, len(inside), dt=inside[-1] - last, others=9)
        last = inside[-1]
    return len(det._series[("n/gpu0", "ecc_sbe_total")].episodes)


def test_errors_that_go_on_count_twelve_episodes_an_hour_at_any_sampling_jitter_included():
    """Every 5-minute scrape, one second early or late (a scrape near the tick's boundary lands in the tick before
    or after), is an episode of its own: spans measured from tick to tick merged every other one (issue 53: the
    coarse cells' lead). So is every 5 minutes at 15 s and 60 s sampling."""
    rng = np.random.default_rng(1)
    jittered = [29.5 + 300.0 * k + rng.uniform(-1.0, 1.0) for k in range(12)]  # the tick boundary at 30 s
    assert _episodes_in_an_hour(jittered) == 12
    assert _episodes_in_an_hour([300.0 * k for k in range(12)]) == 12
    for step in (15.0, 60.0):
        assert _episodes_in_an_hour([1.0 + k * step + rng.uniform(-1.0, 1.0) for k in range(int(3600 / step))]) == 12


def test_a_burst_after_a_long_gap_in_a_series_is_one_episode():
    """The first sample after an hour without one covers the hour: its episode spans at most half a gap back, so
    the burst's next sample 30 s later joins it."""
    det = TrendDetector().fit()
    tick(det, 30.0, 0, others=9)
    tick(det, 3630.0, 40, dt=3600.0, others=9)
    tick(det, 3660.0, 25, dt=30.0, others=9)
    assert [e[:2] for e in det._series[("n/gpu0", "ecc_sbe_total")].episodes] == [[3630.0, 65.0]]


def test_a_part_that_always_counts_more_learns_its_own_rate():
    det = TrendDetector().fit()
    flags = []
    for k in range(0, 3 * 86400, 300):  # an episode every 40 minutes, for three days, steady
        n = 1 if k % 2400 == 0 else 0
        if tick(det, k, n, dt=300.0, others=99):
            flags.append(k)
    assert not [f for f in flags if f > 86400], flags[:5]  # after a day it is this part's normal


def test_forget_drops_only_the_repaired_nodes_alarms():
    det = TrendDetector().fit()
    quiet = [f"q{k}/gpu0" for k in range(1998)]  # two failing parts in 2,000: within the share the fit leaves out
    for k in range(12):
        inc = pd.DataFrame({"entity": ["n1/gpu0", "n2/gpu0", *quiet], "metric": ["pcie_replay_total"] * 2000,
                            "increase": [5.0, 5.0] + [0.0] * 1998, "resets": [0] * 2000, "dt": [300.0] * 2000})
        det.update(TickInput(300.0 * k, events_frame([]), inc, EMPTY_G))
    det.forget("n1")
    assert [e.entity for e in tick(det, 3700, 0)] == ["n2/gpu0"]


def test_rising_counters_flag_before_the_static_rules(tmp_path):
    """Onsets 1.5 h in: raswarden has watched the parts before their errors rise (a flag, not a watch)."""
    findings, labels = simulate_and_replay(tmp_path, [
        {"entity": "sn01-b01/gpu3", "fault": "hbm_degradation", "template": "a", "onset": "1h30m",
         "failure": "4h40m"},
        {"entity": "sn01-b02/mlx5_1:1", "fault": "link_degradation", "template": "a", "onset": "1h30m",
         "failure": "4h40m"},
        {"entity": "sn01-b03/gpu0", "fault": "benign_single_correctable_ecc", "template": "b", "onset": "2h"},
        {"entity": "sn01-b04/gpu4", "fault": "benign_single_correctable_ecc", "template": "a", "onset": "3h"},
    ], duration="5h")
    # the link: the trend first, before any static rule; the GPU: its correctable errors are a trend reason before
    # its double-bit error fails it (an Xid 63 row remap may flag it first)
    trend = first_flag(findings, "sn01-b02/mlx5_1:1", "trend")
    rules = first_flag(findings, "sn01-b02/mlx5_1:1", "rules")
    assert trend is not None and any("episodes" in r for r in trend["reasons"])
    assert rules is None or trend["ts"] <= rules["ts"], (trend, rules)
    dbe = next(f["ts"] for f in findings if f["entity"] == "sn01-b01/gpu3" and f["state"] == "failed")
    assert any("correctable ECC errors in" in r for f in findings if f["entity"] in ("sn01-b01/gpu3", "sn01-b01")
               and f["ts"] <= dbe for r in f["reasons"])
    flagged = {f["entity"] for f in findings if f["state"] in ("subhealthy", "failed")}
    assert not flagged & {"sn01-b03/gpu0", "sn01-b04/gpu4", "sn01-b03", "sn01-b04"}


def test_a_part_already_erring_when_watching_starts_is_a_watch_then_a_flag():
    """Errors from the first minutes at a steady rate: no record of the part before them, so a watch (suspect), and
    no rise after it either; a flag at once for a part the store says was flagged before a restart."""
    from detectors.schema import State

    levels = {}
    for restored in (False, True):
        det = TrendDetector().fit()
        if restored:
            det.restore({"n/gpu0"})
        seen = []
        for k in range(0, 26 * 3600, 300):
            seen += [e.level for e in tick(det, k, 2 if k >= 600 else 0, dt=300.0, others=99)]
        levels[restored] = seen
    # a day on, its 12-hour window is judged too: against its own record, not the fleet's rate of the first watch
    assert levels[False] and set(levels[False]) == {State.SUSPECT}
    assert levels[True] and State.SUBHEALTHY in levels[True] and State.SUSPECT not in levels[True]


def _flags(det, counts, step=300.0, entity="n/mlx5_0:1", metric="rcv_errors_total"):
    """Feed per-step error counts of one part beside 99 quiet ones; the (time, level) of its evidence."""
    out = []
    for i, n in enumerate(counts):
        for e in tick(det, (i + 1) * step, n, entity=entity, metric=metric, dt=step, others=99):
            out.append(((i + 1) * step, e.level.label))
    return out


def test_a_part_unlike_the_fleet_from_the_start_is_judged_on_its_own_record():
    """A healthy port that always counts a few receive errors an hour (a log-normal fleet's far tail; one seed of the
    5-minute realistic matrix cell): 8 episodes in its first 3.6 h, then 21 in 3 h by chance. Against the fleet's
    prior its record was near zero and it was flagged sub-healthy; its own record makes that a 1-in-10^3 run.
    A part with a quiet record that rises to the same rate is still flagged."""
    noisy = [0] * 79  # 5-minute steps: 3.6 h, then 3 h
    for i in np.linspace(0, 42, 8).astype(int):
        noisy[i] = 1
    for i in np.linspace(43, 78, 21).astype(int):
        noisy[i] = 1
    assert sum(noisy[:43]) == 8 and sum(noisy[43:]) == 21
    noisy += noisy[43:] * 2  # and goes on so
    assert not [f for f in _flags(TrendDetector().fit(), noisy) if f[1] != "suspect"]
    quiet_then_rising = [0] * 43 + noisy[43:]
    assert any(level == "subhealthy" for _, level in _flags(TrendDetector().fit(), quiet_then_rising))


def test_corrected_aer_lines_in_the_kernel_log_count_like_a_counter():
    """A GPU about to fall off the bus logs corrected AER errors for hours (gpu_off_bus templates; real lines in
    fixtures/real): a line every 5 minutes after a quiet record, among 99 GPUs sampled without any, is flagged
    by the trend with the kernel log named; lines on a GPU no counter row names this tick are counted too."""
    from detectors.schema import events_frame as ev

    det = TrendDetector().fit()
    gpus = [f"n{k}/gpu0" for k in range(100)]
    levels = []
    for i in range(1, 5 * 12 + 1):  # 5 hours of 5-minute samples
        now = 300.0 * i
        inc = pd.DataFrame({"entity": gpus, "metric": ["ecc_sbe_total"] * 100, "increase": [0.0] * 100,
                            "resets": [0] * 100, "dt": [300.0] * 100})
        lines = []
        if i > 36:  # after three quiet hours
            lines.append((now - 10.0, "n0/gpu0", "aer", None, "corrected", "Corrected, type=Data Link Layer",
                          "kernel", None, None))
            lines.append((now - 5.0, "m9/gpu3", "aer", None, "corrected", "Corrected, type=Physical Layer",
                          "kernel", None, None))
        out = det.update(TickInput(now, ev(lines), inc, EMPTY_G))
        levels += [(e.entity, e.level.label, e.reasons[0]) for e in out]
    flagged = [x for x in levels if x[0] == "n0/gpu0" and x[1] == "subhealthy"]
    assert flagged and "PCIe AER corrected errors in the kernel log" in flagged[0][2]
    assert not [x for x in levels if x[0].startswith("n") and x[0] != "n0/gpu0"]
    assert ("m9/gpu3", LOGGED) in det._series and det._series[("m9/gpu3", LOGGED)].episodes


def _saturated(rng, hours, rate_per_h, step=300.0, bursts_per_day=0.5, burst_size=20.0):
    """Per-step counts of a part erring in nearly every sample: Poisson at ``rate_per_h`` (a scalar or one per step),
    plus bursts of a geometric number of errors."""
    steps = int(hours * 3600 / step)
    lam = np.broadcast_to(np.asarray(rate_per_h, dtype=float) * step / 3600.0, (steps,))
    counts = rng.poisson(lam).astype(float)
    hit = rng.random(steps) < bursts_per_day * step / 86400.0
    counts[hit] += rng.geometric(1.0 / burst_size, int(hit.sum()))
    return counts


def test_a_saturated_part_is_judged_by_its_episodes_sizes():
    """A noisy healthy GPU's PCIe replays at 92 an hour, sampled every 5 minutes: an episode in nearly every sample,
    so a failing GPU's rising replays cannot show as more episodes. A day of that, then hours at twice the rate (a
    job with more traffic) and bursts: no flag. The same day, then replays rising from 30 to 4,000 an hour (the
    simulator's off-the-bus template a) over 4.5 h: flagged on the sizes of its episodes, before the replay budget
    (921.6 an hour) is reached, and not flagged with the size test off (the episodes alone are saturated)."""
    rng = np.random.default_rng(7)
    day = _saturated(rng, 24, 92.0)
    busy = _saturated(rng, 6, 184.0)
    healthy = np.concatenate((day, busy, _saturated(rng, 6, 92.0)))
    assert np.count_nonzero(day) / len(day) > 0.95  # saturated: an episode every sample
    flags = _flags(TrendDetector().fit(), healthy.tolist(), metric="pcie_replay_total", entity="n/gpu0")
    # a watch in its first hours (no record of its own yet: the episode test), never a flag
    assert flags and {level for _, level in flags} == {"suspect"} and max(t for t, _ in flags) < 12 * 3600, flags

    t = np.arange(int(4.5 * 12)) / (4.5 * 12)
    fault = 92.0 + 30.0 * (4000 / 30.0) ** t
    failing = np.concatenate((day, _saturated(rng, 4.5, fault)))
    budget_at = 24 * 3600 + float(np.argmax(fault >= 921.6)) * 300

    def first_flag(**kw):
        flags = _flags(TrendDetector(**kw).fit(), failing.tolist(), metric="pcie_replay_total", entity="n/gpu0")
        return next((t for t, level in flags if level == "subhealthy"), None)

    flagged = first_flag()
    assert flagged is not None and 24 * 3600 < flagged < budget_at - 1800, (flagged, budget_at)
    unsized = first_flag(min_size_record=10**9)
    assert unsized is None or unsized > flagged + 3600, (unsized, flagged)


def test_a_long_record_whose_sizes_jump_is_flagged_on_episodes_larger_than_all_of_it():
    """A noisy healthy GPU's replays at 92 an hour for a day (sizes about 8 an episode, at most 14), then at 600 an
    hour (50 an episode), sampled every 5 minutes. Its 1-hour window's mean is three times its record's after six
    episodes of the jump, all six larger than every one of its record of 282 (a chance of C(12, 6) / C(294, 6),
    times the two tests and three windows: 7e-9): flagged 30 minutes after the jump, where the record's 90th
    percentile needed eight episodes over it (40 minutes). A record with one burst of 200 errors in it leaves that
    to the percentile test: nine episodes (45 minutes), as before this test was added."""
    rng = np.random.default_rng(11)
    day = _saturated(rng, 24, 92.0, bursts_per_day=0.0)
    jump = _saturated(rng, 2, 600.0, bursts_per_day=0.0)

    def first_flag(counts):
        flags = _flags(TrendDetector().fit(), counts.tolist(), metric="pcie_replay_total", entity="n/gpu0")
        at = next((t for t, level in flags if level == "subhealthy"), None)
        return None if at is None else at - len(day) * 300.0

    assert first_flag(np.concatenate((day, jump))) == 6 * 300.0
    burst = day.copy()
    burst[100] += 200.0
    assert first_flag(np.concatenate((burst, jump))) == 9 * 300.0
    det = TrendDetector().fit()
    reasons = [e.reasons[0] for i, n in enumerate(np.concatenate((day, jump[:6])))
               for e in tick(det, (i + 1) * 300.0, n, entity="n/gpu0", metric="pcie_replay_total", dt=300.0,
                             others=99) if e.level == State.SUBHEALTHY]
    assert reasons and "6 of the last 12 episodes over 1 h had more than 14 errors" in reasons[0] and \
        "more than any of this part's own" in reasons[0], reasons


def test_the_chance_of_episodes_larger_than_all_their_record_is_exact_for_any_distribution():
    """C(n, k) / C(N + n, k): against shuffles of heavy-tailed and of normal sizes, and its closed form where the
    whole window is larger."""
    from math import comb

    from detectors.trend_judge import _above_all

    rng = np.random.default_rng(2)
    for k, n, record in ((3, 5, 20), (2, 4, 10), (4, 4, 30), (1, 3, 5)):
        for draw in (lambda size: rng.pareto(1.2, size), lambda size: rng.normal(0.0, 1.0, size)):
            x = draw((200_000, record + n))
            hits = ((x[:, record:] > x[:, :record].max(axis=1, keepdims=True)).sum(axis=1) >= k).mean()
            assert hits == pytest.approx(_above_all(k, n, record), rel=0.05, abs=2e-4), (k, n, record)
        assert _above_all(k, n, record) == pytest.approx(comb(n, k) / comb(record + n, k))


def test_forgetting_one_replaced_part_keeps_its_neighbours_records():
    """A GPU replaced in its slot starts afresh; the other GPUs of its node keep their episodes and records (the
    node's whole forgetting is for a node repaired as a whole)."""
    det = TrendDetector().fit()
    quiet = [f"q{k}/gpu0" for k in range(98)]
    for k in range(12):
        inc = pd.DataFrame({"entity": ["n1/gpu0", "n1/gpu1", *quiet], "metric": ["pcie_replay_total"] * 100,
                            "increase": [5.0, 5.0] + [0.0] * 98, "resets": [0] * 100, "dt": [300.0] * 100})
        det.update(TickInput(300.0 * k, events_frame([]), inc, EMPTY_G))
    kept = {k for k in det._series if k[0].startswith("n1/")}
    assert kept == {("n1/gpu0", "pcie_replay_total"), ("n1/gpu1", "pcie_replay_total")}
    det.forget("n1/gpu1")
    assert {k for k in det._series if k[0].startswith("n1/")} == {("n1/gpu0", "pcie_replay_total")}
    det.forget("n1")
    assert not {k for k in det._series if k[0].startswith("n1/")}


def _fleet_with_one_rising_gpu(det, aer_every_s, replay_every_s, n=200, seed=3, step=300.0, rise_h=24.0,
                               hours=28.0, replays_per_h=None):
    """A noisy fleet of ``n`` GPUs (healthy PCIe replays and corrected AER lines at log-normal rates per part, the
    simulator's ``noisy`` preset: medians 0.25 and 0.01 an hour, sigma 2.5) for ``hours``; after ``rise_h`` of them
    the quiet GPU n0 logs an AER line every ``aer_every_s`` and 2 replays every ``replay_every_s`` (None: not that
    signal), or, with ``replays_per_h`` (a function of the hours since the rise), Poisson replays at that rate. Its
    evidence as (seconds after the rise, entity, level, first reason)."""
    rng = np.random.default_rng(seed)
    gpus = [f"n{k}/gpu0" for k in range(n)]
    replay = np.minimum(0.25 * np.exp(rng.normal(0, 2.5, n)), 92.0)
    aer = np.minimum(0.01 * np.exp(rng.normal(0, 2.5, n)), 5.0)
    replay[0], aer[0] = 0.05, 0.002
    out = []
    for i in range(1, int(hours * 3600 / step) + 1):
        now = i * step
        x = rng.poisson(replay * step / 3600).astype(float)
        a = rng.poisson(aer * step / 3600)
        t = now - rise_h * 3600
        if t > 0 and replay_every_s and t % replay_every_s < step:
            x[0] += 2
        if t > 0 and replays_per_h is not None:
            x[0] += rng.poisson(replays_per_h(t / 3600.0) * step / 3600.0)
        if t > 0 and aer_every_s and t % aer_every_s < step:
            a[0] += 1
        inc = pd.DataFrame({"entity": gpus, "metric": ["pcie_replay_total"] * n, "increase": x, "resets": [0] * n,
                            "dt": [step] * n})
        lines = [(now - 10.0, g, "aer", None, "corrected", "Corrected, type=Data Link Layer", "kernel", None, None)
                 for g, c in zip(gpus, a) for _ in range(int(c))]
        out += [(t, e.entity, e.level.label, e.reasons[0])
                for e in det.update(TickInput(now, events_frame(lines), inc, EMPTY_G))]
    return out


def test_two_signals_of_one_part_are_judged_together():
    """A GPU whose link goes bad logs corrected AER lines and counts PCIe replays, each only a little above a
    noisy fleet's healthy parts: three lines and four replay episodes an hour. Each alone is flagged after two hours
    and more (its 3-hour window); judged together, within the hour. One signal alone is judged as before, and no
    healthy GPU of the noisy fleet is flagged either way."""
    first = {}
    for together in (True, False):
        for signals in ((1200, 900), (1200, None)):
            out = _fleet_with_one_rising_gpu(TrendDetector(together=together).fit(), *signals)
            assert not [o for o in out if o[1] != "n0/gpu0" and o[2] == "subhealthy"], (together, signals)
            first[together, signals] = next((o for o in out if o[1] == "n0/gpu0" and o[2] == "subhealthy"), None)
    both, alone = first[True, (1200, 900)], first[False, (1200, 900)]
    assert both[0] <= 3600 and both[3].startswith("together on one part: PCIe replays in"), both
    assert "PCIe AER corrected errors in the kernel log in" in both[3]
    assert alone[0] >= 2 * 3600 and "together" not in alone[3], alone
    assert first[True, (1200, None)] == first[False, (1200, None)] and first[True, (1200, None)][0] >= 2 * 3600


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_a_rise_in_a_young_record_is_judged_by_its_second_half_against_its_first(seed):
    """Raswarden started watching 2 h before a quiet GPU of a noisy fleet began to count PCIe replays in every
    5-minute sample. Its first window soon holds the rise's own first hour in the record before it (the part looks
    as if it always counted so) and its 3-hour window needs 3 h of record: judged by those alone it is not flagged
    in the 4 h that follow (measured: seeds 3-7). The record's second half against its first is flagged within 2 h
    of the rise, and no healthy GPU of the fleet is flagged in those first hours. (The Poisson tail alone, as the
    windows were judged before episodes were bounded by their spans: the test below.)"""
    out = _fleet_with_one_rising_gpu(TrendDetector(episode_span_s=0.0).fit(), None, 300, seed=seed, rise_h=2.0,
                                     hours=6.0)
    assert not [o for o in out if o[1] != "n0/gpu0" and o[2] == "subhealthy"], seed
    first = next((o for o in out if o[1] == "n0/gpu0" and o[2] == "subhealthy"), None)
    assert first is not None and first[0] <= 2 * 3600, (seed, first)
    assert "PCIe replays in" in first[3] and " episodes over the last 1." in first[3], first


@pytest.mark.parametrize("seed", [3, 4])
def test_a_rise_soon_after_the_start_is_judged_by_its_episodes_sizes_on_two_hours_of_them(seed):
    """Raswarden started 1.5 h before a GPU of a noisy fleet (healthy parts up to 92 replays an hour: saturated
    episodes are no sign) began to fall off the bus: replays rising from 30 to 4,000 an hour over 4.5 h (the
    simulator's template a), sampled every minute. Its episodes saturate at 12 an hour within the hour, so their
    count rises no more; their sizes do, three times an hour. A record of 24 episodes' sizes (2 h of a counter in
    every sample) flags it 3.0-3.1 h into the rise, half an hour before the replay budget's hour count would (3.6 h);
    one of 36 (3 h) waited 4.05-4.1 h. No healthy GPU is flagged. (The Poisson tail alone: the test below.)"""
    out = _fleet_with_one_rising_gpu(TrendDetector(episode_span_s=0.0).fit(), None, None, seed=seed, step=60.0,
                                     rise_h=1.5, hours=6.0, replays_per_h=lambda h: 30.0 * (4000 / 30.0) ** (h / 4.5))
    assert not [o for o in out if o[1] != "n0/gpu0" and o[2] == "subhealthy"], seed
    first = next((o for o in out if o[1] == "n0/gpu0" and o[2] == "subhealthy"), None)
    assert first is not None and first[0] <= 3.5 * 3600, (seed, first)
    assert "PCIe replays larger in each episode" in first[3], first


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_a_run_of_episodes_near_one_a_span_is_judged_by_its_spans_not_the_poisson_tail(seed):
    """The two rises above, judged with episodes bounded by their spans (at most one a 225 s span: the binomial tail
    of that many spans with errors): a GPU counting replays in every 5-minute sample from 2 h in is flagged by its
    1-hour window within the hour (the Poisson tail of its errors' rate: the half-record window, within 2 h), and the
    off-the-bus rise from 1.5 h in within 1.5 h (the Poisson tail: its sizes, 3.0-3.1 h). No healthy GPU of the
    noisy fleet (some at 92 replays an hour) is flagged."""
    out = _fleet_with_one_rising_gpu(TrendDetector().fit(), None, 300, seed=seed, rise_h=2.0, hours=6.0)
    assert not [o for o in out if o[1] != "n0/gpu0" and o[2] == "subhealthy"], seed
    first = next((o for o in out if o[1] == "n0/gpu0" and o[2] == "subhealthy"), None)
    assert first is not None and first[0] <= 3600, (seed, first)
    assert "PCIe replays in" in first[3] and " episodes over the last 1 h" in first[3], first
    out = _fleet_with_one_rising_gpu(TrendDetector().fit(), None, None, seed=seed, step=60.0, rise_h=1.5, hours=6.0,
                                     replays_per_h=lambda h: 30.0 * (4000 / 30.0) ** (h / 4.5))
    assert not [o for o in out if o[1] != "n0/gpu0" and o[2] == "subhealthy"], seed
    first = next((o for o in out if o[1] == "n0/gpu0" and o[2] == "subhealthy"), None)
    assert first is not None and first[0] <= 1.5 * 3600, (seed, first)


@pytest.mark.parametrize("aer_every_s", [None, 900])
def test_a_flag_on_a_young_record_lasts_while_the_rise_goes_on(aer_every_s):
    """The young record's rise above (PCIe replays in every sample, with or without an AER line every 15 minutes,
    then flagged by the two together): once flagged, the part is judged against its rate before the flag while the
    alarm lasts, so it stays flagged for the 4 h the rise goes on. Judged against the 1-hour window's record (the
    rise's own first hour in it), or with nothing frozen for an alarm on two counters together, it went back to
    healthy an hour after its flag (40 of the 50 ticks after it without a flag)."""
    out = _fleet_with_one_rising_gpu(TrendDetector().fit(), aer_every_s, 300, seed=3, rise_h=2.0, hours=6.0)
    flagged = sorted({o[0] for o in out if o[1] == "n0/gpu0" and o[2] == "subhealthy"})
    assert flagged and flagged[0] <= 2 * 3600, flagged[:1]
    assert [t for t in range(int(flagged[0]), 4 * 3600 + 1, 300) if t not in set(flagged)] == []


def test_fishers_combination_of_chances():
    """Two chances: the closed form p1 p2 (1 - ln(p1 p2)); a counter the part has but that is not judged (chance 1)
    adds degrees of freedom and makes the combination weaker, never stronger; one chance is itself."""
    from detectors.trend_judge import _fisher

    assert abs(_fisher([1e-6, 1e-2], 2) - 1e-8 * (1 - np.log(1e-8))) < 1e-15
    assert _fisher([1e-6, 1e-2], 3) > _fisher([1e-6, 1e-2], 2)
    assert abs(_fisher([0.03], 1) - 0.03) < 1e-12


def test_episodes_of_a_warm_state_saved_before_they_kept_their_span_still_read():
    """A warm state saved before episodes carried where they began ([ts, errors]) goes on: the span is taken from
    the episode's time, and old episodes fold into the history."""
    det = TrendDetector().fit()
    tick(det, 300.0, 2, dt=300.0, others=9)
    s = det._series[("n/gpu0", "ecc_sbe_total")]
    s.episodes[-1] = s.episodes[-1][:2]  # as an older warm state holds it
    tick(det, 330.0, 1, dt=30.0, others=9)  # within its span: joins it
    tick(det, 600.0, 1, dt=270.0, others=9)  # a span after it: a new one
    assert [e[:2] for e in s.episodes] == [[300.0, 3.0], [600.0, 1.0]]
    for k in range(1, 60):  # 13 hours on: the old episode leaves the windows for the history
        tick(det, 600.0 + k * 900.0, 0, dt=900.0, others=9)
    assert len(s.episodes) <= 1 or s.episodes[0][0] > 600.0


def test_the_size_judgement_s_quantile_is_numpy_s_higher_quantile():
    """The record's 90th percentile by selection is np.quantile's "higher" one, on records of any length and ties."""
    import numpy as np

    from detectors.trend_judge import _higher_quantile

    rng = np.random.default_rng(5)
    for n in (1, 2, 9, 10, 11, 36, 37, 288, 300):
        for x in (rng.pareto(1.5, n) * 10, rng.integers(1, 4, n).astype(float)):
            assert _higher_quantile(x, 0.9) == float(np.quantile(x, 0.9, method="higher"))
    assert np.isnan(_higher_quantile(np.array([1.0, np.nan, 3.0]), 0.9))


def test_a_tick_of_many_new_episodes_is_judged_as_each_alone():
    """Windows made in blocks (a tick of hundreds of new episodes, over the block size) are each series' own."""
    rng = np.random.default_rng(11)
    det = TrendDetector().fit()
    entities = [f"n{k // 4}/mlx5_{k % 4}:1" for k in range(600)]
    for step in range(40):  # ~3 h of 5-minute samples; noisier parts err more often
        errors = rng.poisson(np.linspace(0.05, 3.0, len(entities)))
        inc = pd.DataFrame({"entity": entities, "metric": ["symbol_error_total"] * len(entities),
                            "increase": errors.astype(float), "resets": [0] * len(entities),
                            "dt": [300.0] * len(entities)})
        det.update(TickInput(300.0 * (step + 1), events_frame([]), inc, EMPTY_G))
    now = 300.0 * 40
    keys = [k for k in det._series if k[1] == "symbol_error_total"]
    assert len(keys) > 512  # more than two blocks
    together = det._windows_many(keys, now)
    for key, w in zip(keys, together):
        alone = det._windows(key, now)
        for a, b in zip(w, alone):
            assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True), key


@pytest.mark.parametrize("metric, words", [
    ("local_link_integrity_errors_total", "local link integrity errors"),
    ("excessive_buffer_overrun_total", "excessive buffer overrun errors"),
    ("nvlink_recovery_total", "NVLink recoveries"), ("nvlink_replay_total", "NVLink replays"),
    ("nvlink_crc_data_total", "NVLink data CRC errors"), ("pcie_recovery_total", "PCIe link recoveries"),
    ("pcie_nack_received_total", "PCIe NAKs received"), ("roce_rx_err_pkt_total", "RoCE receive errors"),
    ("nvlink_effective_error_total", "NVLink errors after FEC"),
    ("nvlink_link_integrity_total", "NVLink local link integrity errors"),
    ("c2c_crc_error_total", "C2C link CRC errors"), ("pcie_correctable_total", "PCIe correctable errors")])
def test_a_counter_of_the_vendors_again_and_again_is_flagged_once_is_not(metric, words):
    """The counters peers and the vendors' health checks judge (a link's integrity and buffer overruns, NVLink's
    replays and recoveries, NVLink 5's errors after FEC and integrity errors, Grace-Blackwell's C2C link, a GPU's own
    PCIe correctable errors, AMD's PCIe NAKs and recoveries, an NPU's RoCE receive errors): a part that shows one now
    and then, like several of a 200-part fleet over a day, raises nothing; one that shows them in every 5-minute
    sample is flagged within the hour, naming them."""
    det = TrendDetector().fit()
    port = "n/mlx5_0:1"
    for k in range(0, 86400, 300):
        n = 1 if k in (7200, 40000, 70000) else 0
        assert tick(det, k, n, entity=port, metric=metric, dt=300.0, others=199) == []
    fired = None
    for j, k in enumerate(range(86400, 86400 + 2 * 3600, 300)):
        ev = tick(det, k, 1, entity=port, metric=metric, dt=300.0, others=199)
        if ev and fired is None:
            fired = (j, ev[0])
    assert fired is not None and (fired[0] + 1) * 300 <= 3600, fired
    assert fired[1].level.name == "SUBHEALTHY" and fired[1].reasons[0].startswith(words + " in ")


@pytest.mark.parametrize("seed", range(6))
def test_the_size_gate_in_plain_sums_leaves_out_only_windows_numpy_s_gate_leaves_out(seed):
    """The windows the sizes' judgement goes on to (:meth:`_size_gate_open`, sums kept as episodes come and go) are
    the windows whose mean size is ``size_ratio`` times their record's as numpy's means say, on records of whole and
    fractional sizes, frozen sizes, and windows made to stand exactly at the gate; any other it lets through stands
    within a millionth of the gate (and is judged by numpy's means after it)."""
    from detectors.trend_counters import CounterRecord

    rng = np.random.default_rng(seed)
    det = TrendDetector().fit()
    left_out = 0
    for _ in range(300):
        s = CounterRecord(0.0, ("pcie_replay_total", ""))
        whole = rng.random() < 0.5
        n_all = int(rng.integers(30, 500))
        sizes = rng.integers(1, 50, n_all).astype(float) if whole else rng.pareto(1.1, n_all) + 0.5
        rise = int(rng.integers(0, 40))
        if rise:
            sizes[-rise:] *= rng.choice([1.0, 3.0, 10.0])
        for t, x in enumerate(sizes):
            s.open_episode([float(t), float(x), float(t)])
            if len(s.episodes) > 144:
                s.retire_oldest()
        n, n_past = len(s.episodes), len(s.past_sizes)
        kept = np.array([e[1] for e in s.episodes])
        longest = min(n, n_past + n - det.min_size_record)  # (a window judged has a record of 24 before it)
        windows = sorted(rng.choice(np.arange(3, longest + 1), 3))
        past = np.array(s.past_sizes)
        if rng.random() < 0.3:  # the middle window at the gate exactly: its mean three times its record's
            c = int(windows[1])
            more = det.size_ratio * np.concatenate((past, kept[:n - c])).mean() * c - kept[n - c:].sum()
            if more > 0 and float(more).is_integer() == whole:
                s.grow_last(float(more))
                kept = np.array([e[1] for e in s.episodes])
        frozen = (0.0, 0.1, float(rng.uniform(0.5, 30.0))) if rng.random() < 0.2 else None
        judged = [(i, int(c)) for i, c in enumerate(windows)]

        gate = {c: kept[n - c:].mean() / (det.size_ratio * max(
            frozen[2] if frozen else float(np.concatenate((past, kept[:n - c])).mean()), 1.0)) for _, c in judged}
        opened = det._size_gate_open(s, frozen, judged)
        assert [(i, c) for i, c in judged if gate[c] >= 1.0] == [w for w in opened if gate[w[1]] >= 1.0]
        assert all(gate[c] > 1.0 - 1e-6 for _, c in opened)
        left_out += len(judged) - len(opened)
    assert left_out > 300
