import pandas as pd

from detectors.contract import TickInput
from detectors.rules import RuleDetector
from detectors.schema import State, events_frame
from detectors.xid_catalog import load_xid_catalog

EMPTY_INC = pd.DataFrame({"entity": [], "metric": [], "increase": [], "resets": []})
EMPTY_G = pd.DataFrame({"entity": [], "metric": [], "last": [], "max": []})


def xid(ts, entity, code, msg="pid=1, name=python3, x"):
    return (ts, entity, "xid", code, "error", msg, "kernel", None, None)


def run(det, now, events=(), inc=EMPTY_INC, gauges=EMPTY_G, grace=frozenset()):
    return det.update(TickInput(now, events_frame(list(events)), inc, gauges, grace))


def worst(evidence, entity):
    lv = [e.level for e in evidence if e.entity == entity]
    return max(lv) if lv else State.HEALTHY


def test_catalog_buckets():
    cat = load_xid_catalog()
    assert {c for c in (48, 64, 79, 95, 119, 120) if cat[c].state == "failed"} == {48, 64, 79, 95, 119, 120}
    assert {cat[c].state for c in (13, 31, 43)} == {"application"}
    assert {cat[c].state for c in (63, 94)} == {"subhealthy"}
    assert cat[92].state == "suspect"  # NVIDIA: IGNORE; the correctable-ECC rate rule judges the rate itself


def test_hard_xid_latches_and_expires():
    det = RuleDetector(failed_hold_s=600).fit()
    ev = run(det, 30, [xid(20, "n/gpu0", 79)])
    assert worst(ev, "n/gpu0") == State.FAILED and ev[0].hard
    assert worst(run(det, 600), "n/gpu0") == State.FAILED
    assert worst(run(det, 660), "n/gpu0") == State.HEALTHY


def test_unknown_xid_is_suspect_and_counted():
    det = RuleDetector().fit()
    ev = run(det, 30, [xid(20, "n/gpu0", 999)])
    assert worst(ev, "n/gpu0") == State.SUSPECT and det.unknown_xids_[999] == 1
    assert "not in the catalog" in ev[0].reasons[0]


def test_application_xids_on_all_gpus_of_a_job_are_not_flagged():
    det = RuleDetector(app_xid_repeats=2).fit()
    evs = []
    for t, pid in ((100, 1), (5000, 2), (9000, 3)):
        evs += run(det, t, [xid(t, f"n/gpu{g}", 13, f"pid={pid}, name=python3, x") for g in range(4)])
    assert not evs


def test_application_xids_repeating_on_one_gpu_alone_are_suspect_only():
    det = RuleDetector(app_xid_repeats=3).fit()
    evs = []
    for t, pid in ((100, 1), (5000, 2), (9000, 3)):
        evs = run(det, t, [xid(t, "n/gpu5", 43, f"pid={pid}, name=python3, x")])
    assert worst(evs, "n/gpu5") == State.SUSPECT


def test_recovery_action_154():
    det = RuleDetector().fit()
    changed = "GPU recovery action changed from 0x0 (None) to"
    ev = run(det, 30, [xid(20, "n/gpu0", 154, f"{changed} 0x2 (Node Reboot Required)")])
    assert worst(ev, "n/gpu0") == State.FAILED
    ev = run(det, 60, [xid(50, "n/gpu1", 154, f"{changed} 0x1 (GPU Reset Required)")])
    assert worst(ev, "n/gpu1") == State.SUBHEALTHY


def test_counter_and_gauge_rules():
    det = RuleDetector().fit()
    inc = pd.DataFrame({"entity": ["n/gpu0", "n/mlx5_0:1", "n/gpu1"], "metric": ["ecc_dbe_total", "link_downed_total",
                                                                                   "ecc_sbe_total"],
                        "increase": [1.0, 1.0, 1.0], "resets": [0, 0, 0]})
    g = pd.DataFrame({"entity": ["n/gpu2", "n/gpu3", "n/mlx5_1:1"],
                      "metric": ["gpu_temp_c", "gpu_temp_c", "port_state"],
                      "last": [80.0, 93.0, 1.0], "max": [88.0, 93.0, 1.0]})
    ev = run(det, 30, inc=inc, gauges=g)
    assert worst(ev, "n/gpu0") == State.FAILED
    assert worst(ev, "n/mlx5_0:1") == State.FAILED
    assert worst(ev, "n/gpu1") == State.HEALTHY  # one correctable error is not a finding
    assert worst(ev, "n/gpu2") == State.SUBHEALTHY and worst(ev, "n/gpu3") == State.FAILED
    assert worst(ev, "n/mlx5_1:1") == State.FAILED
    # During a node's reboot grace, link rules stay quiet.
    det2 = RuleDetector().fit()
    assert worst(run(det2, 30, inc=inc, gauges=g, grace=frozenset({"n"})), "n/mlx5_1:1") == State.HEALTHY


def symbols(n: float) -> pd.DataFrame:
    return pd.DataFrame({"entity": ["n/mlx5_0:1"], "metric": ["symbol_error_total"], "increase": [n], "resets": [0]})


def test_rate_rule_fires_only_above_the_limit():
    det = RuleDetector(symbol_errors_per_hour=120).fit()
    ev = []
    for k in range(1, 121):
        ev = run(det, 30.0 * k, inc=symbols(1.0))
    assert worst(ev, "n/mlx5_0:1") == State.HEALTHY  # ~95/h decayed: under the limit
    for k in range(121, 241):
        ev = run(det, 30.0 * k, inc=symbols(3.0))
    assert worst(ev, "n/mlx5_0:1") == State.SUBHEALTHY


def recoveries(n: float, entity: str = "t/gpu2") -> pd.DataFrame:
    return pd.DataFrame({"entity": [entity], "metric": ["nvlink_recovery_total"], "increase": [n], "resets": [0]})


def test_an_nvlink_that_keeps_recovering_is_flagged_from_its_first_hour_and_one_recovery_is_watched():
    """DCGM's NVLink health watch fails a GPU at one recovery; here a link that recovers again and again (a GB200
    link before it went down counted about four an hour, marin-community/marin 9086) is sub-healthy within its first
    hour whether or not raswarden has a record of it, and one recovery is a watch. The baseline acts on one, as
    DCGM does."""
    det = RuleDetector().fit()
    ev = run(det, 60.0, inc=recoveries(1.0, "t/gpu0"))
    assert worst(ev, "t/gpu0") == State.SUSPECT and "a burst, watched" in ev[0].reasons[0]
    flagged_at = None
    for k in range(1, 121):  # a recovery every 15 minutes from raswarden's first sample, sampled every minute
        ev = run(det, 60.0 + 60.0 * k, inc=recoveries(1.0 if k % 15 == 0 else 0.0))
        if flagged_at is None and worst(ev, "t/gpu2") == State.SUBHEALTHY:
            flagged_at = 60.0 * k
    assert flagged_at is not None and flagged_at <= 3600.0
    reason = next(e for e in ev if e.entity == "t/gpu2").reasons[0]
    assert reason.startswith("NVLink recoveries") and "samples of the last hour" in reason
    assert worst(run(RuleDetector(baseline=True).fit(), 60.0, inc=recoveries(1.0)), "t/gpu2") == State.SUBHEALTHY


def test_a_limit_crossed_by_few_errors_or_under_a_burst_is_not_called_a_burst():
    """A sample holding half of the hour's errors is a burst only while the others stay under the limit without it:
    four NVLink recoveries in three samples (2, 1, 1: as evenly as four go into three) are four times the limit of
    one, and a touched cable's burst on a port whose other samples run over the limit by themselves hides nothing;
    the same burst on a quiet port is still a watch."""
    det = RuleDetector().fit()
    for k, n in ((1, 2.0), (16, 1.0), (31, 1.0)):  # sampled every minute, recoveries at 1, 16 and 31 minutes
        ev = run(det, 60.0 * k, inc=recoveries(n))
    assert worst(ev, "t/gpu2") == State.SUBHEALTHY and "in 3 samples of the last hour" in ev[0].reasons[0]

    def hour(steady: float, burst: float) -> list:
        det = RuleDetector(symbol_errors_per_hour=120).fit()
        for k in range(1, 25):  # a 5-minute sample each for two hours; the burst in the last
            ev = run(det, 300.0 * k, inc=symbols(steady + (burst if k == 24 else 0.0)))
        return ev

    over = hour(12.0, 200.0)  # 144 an hour without the burst: over the limit by itself
    assert worst(over, "n/mlx5_0:1") == State.SUBHEALTHY, over
    under = hour(1.0, 200.0)  # 12 an hour and one burst: the burst is the limit's only crossing
    assert worst(under, "n/mlx5_0:1") == State.SUSPECT and "a burst, watched" in under[0].reasons[0]


def test_a_rate_held_over_the_limit_by_an_older_bursts_tail_is_watched_as_that():
    """An hour after a burst of 342, the decayed hourly rate still holds 342/e of it (over the limit of 120) while
    the hour's own samples hold three single errors: a watch that says the rest is from before the hour."""
    det = RuleDetector(symbol_errors_per_hour=120).fit()
    for k in range(1, 37):  # 5-minute samples; the burst at k = 24, single errors at 26, 28 and 35
        ev = run(det, 300.0 * k, inc=symbols({24: 342.0, 26: 1.0, 28: 1.0, 35: 1.0}.get(k, 0.0)))
        if k == 30:
            assert "a burst, watched" in ev[0].reasons[0]
    assert worst(ev, "n/mlx5_0:1") == State.SUSPECT
    assert "3 of them in the last hour's samples" in ev[0].reasons[0] and "a burst's tail" in ev[0].reasons[0]


def test_a_limit_crossed_in_two_samples_each_over_it_is_watched_as_too_few_not_as_a_burst():
    """Two samples of 130 and 125 symbol errors: each over the limit of 120 by itself, so neither is a burst, and too
    few samples for a rate that lasts; the reason says so, not that one sample held the hour."""
    det = RuleDetector(symbol_errors_per_hour=120).fit()
    for k in range(1, 13):
        ev = run(det, 300.0 * k, inc=symbols({6: 130.0, 12: 125.0}.get(k, 0.0)))
    assert worst(ev, "n/mlx5_0:1") == State.SUSPECT
    assert "in 2 samples of the last hour: watched" in ev[0].reasons[0] and "burst" not in ev[0].reasons[0]


def test_baseline_keeps_only_the_static_thresholds():
    det = RuleDetector(baseline=True).fit()
    ev = run(det, 30, [xid(20, "n/gpu0", 63, "Row Remapper"), xid(20, "n/gpu1", 13), xid(20, "n/gpu2", 999)])
    assert worst(ev, "n/gpu0") == State.FAILED  # any hardware Xid is fatal to a static tool
    assert worst(ev, "n/gpu1") == State.HEALTHY and worst(ev, "n/gpu2") == State.HEALTHY
    inc = pd.DataFrame({"entity": ["n/gpu3"] * 1, "metric": ["pcie_replay_total"], "increase": [10_000.0],
                        "resets": [0]})
    g = pd.DataFrame({"entity": ["n/gpu4"], "metric": ["hbm_temp_c"], "last": [99.0], "max": [99.0]})
    ev = run(det, 60, inc=inc, gauges=g)
    assert worst(ev, "n/gpu3") == State.HEALTHY and worst(ev, "n/gpu4") == State.HEALTHY


def test_xid_154_from_the_gauge_alone_is_subhealthy():
    det = RuleDetector().fit()
    ev = run(det, 30, [(20, "n/gpu0", "xid", 154, "error", "reported by dcgm-exporter DCGM_FI_DEV_XID_ERRORS",
                        "dcgm-exporter", None, None)])
    assert worst(ev, "n/gpu0") == State.SUBHEALTHY


def test_forget_drops_only_the_repaired_nodes_latches():
    det = RuleDetector().fit()
    run(det, 30, [xid(20, "n1/gpu0", 79), xid(20, "n2/gpu0", 79), xid(25, "n10/gpu0", 79)])
    det.forget("n1")  # not n10
    ev = run(det, 60)
    assert worst(ev, "n1/gpu0") == State.HEALTHY
    assert worst(ev, "n2/gpu0") == worst(ev, "n10/gpu0") == State.FAILED


def aer(ts, entity, severity="corrected"):
    return (ts, entity, "aer", None, severity, "Corrected, type=Physical Layer", "kernel", None, None)


def test_corrected_aer_counts_minutes_with_errors_not_a_bursts_lines():
    """A link retraining logs a handful of corrected errors at once (the simulator's noisy GPUs: bursts of twenty
    and more, a false flag at "20/h"): one minute's lines count once; corrected errors in 20 separate minutes of an
    hour are a rate that goes on."""
    det = RuleDetector().fit()
    burst = [aer(100.0 + 0.01 * k, "n/gpu0") for k in range(40)]
    assert worst(run(det, 120, burst), "n/gpu0") == State.HEALTHY
    flagged = None
    for minute in range(1, 40):
        now = 120 + 90.0 * minute
        if worst(run(det, now, [aer(now - 10.0, "n/gpu1"), aer(now - 9.0, "n/gpu1")]), "n/gpu1") == \
                State.SUBHEALTHY:
            flagged = minute
            break
    assert flagged is not None and flagged >= 20, flagged


def link(ts, entity, severity, msg):
    return (ts, entity, "link", None, severity, msg, "kernel", "0000:00:1f.6", "eth0")


def test_a_link_down_fails_its_port_but_only_tells_of_a_nic_the_topology_does_not_place():
    """A link-down line the resolver placed on a fabric port fails the port (hard); one it could not place (a
    management NIC's 'NIC Link is Down', a port the topology lists without its PCI address) stays on the node as a
    suspicion: a management port's flap must never fail, and so drain, its node."""
    det = RuleDetector().fit()
    ev = run(det, 30, [link(20, "n1/mlx5_0:1", "error", "ibp12s0 link down")])
    assert worst(ev, "n1/mlx5_0:1") == State.FAILED and ev[0].hard
    ev = run(det, 60, [link(50, "n2", "error", "eth0 link down")])
    assert worst(ev, "n2") == State.SUSPECT and not [e for e in ev if e.entity == "n2" and e.hard]
    assert "a NIC the topology does not place" in next(e for e in ev if e.entity == "n2").reasons[0]
    ev = run(det, 90, [link(80, "n2", "info", "eth0 link up")])
    assert worst(ev, "n2") == State.HEALTHY  # its link up clears it
    # while the node boots (its reboot grace), unused ports say "Cable unplugged" and links come up: no watch
    ev = run(det, 120, [link(110, "n3", "error", "mlx5 port module 1: cable unplugged")], grace=frozenset({"n3"}))
    assert worst(ev, "n3") == State.HEALTHY


def test_a_link_out_of_its_specification_is_watched_at_one_error_and_a_stuck_counter_said():
    """LocalLinkIntegrityErrors and ExcessiveBufferOverrunErrors: zero on a healthy port, any increase a fault for
    NVSentinel. One increase is a watch naming what it means (a touched cable makes one); not during a node's
    reboot grace; and at 15, their 4-bit maximum, the counter is said to be blind."""
    det = RuleDetector().fit()
    inc = pd.DataFrame({"entity": ["n/mlx5_0:1", "n/mlx5_1:1"],
                        "metric": ["local_link_integrity_errors_total", "excessive_buffer_overrun_total"],
                        "increase": [1.0, 2.0], "resets": [0, 0], "last": [1.0, 15.0]})
    ev = run(det, 30, inc=inc)
    assert worst(ev, "n/mlx5_0:1") == State.SUSPECT and worst(ev, "n/mlx5_1:1") == State.SUSPECT
    reasons = " ".join(r for e in ev for r in e.reasons)
    assert "local link integrity errors (the port's physical errors over its LocalPhyErrors threshold) +1" in reasons
    assert "excessive buffer overrun errors" in reasons and "+2" in reasons
    assert "excessive_buffer_overrun stuck at 15" in reasons  # 4 bits: it counts no more
    again = run(det, 60, inc=inc.assign(last=[2.0, 15.0]))  # a second one: still one watch, not two
    assert sum(e.entity == "n/mlx5_0:1" for e in again) == 1
    quiet = RuleDetector().fit()
    assert worst(run(quiet, 30, inc=inc.assign(last=[1.0, 2.0]), grace=frozenset({"n"})), "n/mlx5_0:1") \
        == State.HEALTHY


def test_an_nvlink_5_link_that_failed_its_recovery_is_sub_healthy():
    """NVLink 5's failed recoveries (DCGM field 1212: the link went into recovery, failed it and was declared down):
    each increase makes its GPU sub-healthy on its scale-up link, the repair a reset (NVIDIA's Xid 149 decode for
    NETIR_LINK_DOWN: RESET_GPU); the static baseline judges it not."""
    from detectors.xid_catalog import vendor_repair

    inc = pd.DataFrame({"entity": ["n/gpu3"], "metric": ["nvlink_recovery_failed_total"], "increase": [1.0],
                        "resets": [0], "last": [1.0]})
    ev = run(RuleDetector().fit(), 30, inc=inc)
    assert [(e.entity, e.level, e.category) for e in ev] == [("n/gpu3", State.SUBHEALTHY, "scaleup_link")]
    assert "NVLink recovery failed +1" in ev[0].reasons[0] and vendor_repair(ev[0].reasons) == "reset"
    assert run(RuleDetector(baseline=True).fit(), 30, inc=inc) == []


def test_dcgm_s_page_retirement_and_an_npu_s_network_health():
    """DCGM's health check: pages pending retirement are a watch ("monitor, the GPU can still perform workload");
    63 retired pages, single- and double-bit together, are its limit (run the field diagnostic): sub-healthy, the
    repair an inspection. npu-exporter's network status 0 (its RoCE port cannot reach its detect address) is a
    watch."""
    from detectors.xid_catalog import vendor_repair

    det = RuleDetector().fit()
    g = pd.DataFrame({"entity": ["n/gpu0", "n/gpu1", "n/npu0", "n/npu1"],
                      "metric": ["retired_pages_pending", "retired_pages_pending", "npu_network_health",
                                 "npu_network_health"],
                      "last": [2.0, 0.0, 0.0, 1.0], "max": [2.0, 0.0, 0.0, 1.0]})
    inc = pd.DataFrame({"entity": ["n/gpu2", "n/gpu2", "n/gpu3", "n/gpu3"],
                        "metric": ["retired_pages_sbe_total", "retired_pages_dbe_total"] * 2,
                        "increase": [0.0, 1.0, 0.0, 0.0], "resets": [0] * 4, "last": [60.0, 3.0, 60.0, 2.0]})
    ev = run(det, 30, inc=inc, gauges=g)
    assert worst(ev, "n/gpu0") == State.SUSPECT
    assert "2 page(s) pending retirement" in " ".join(r for e in ev if e.entity == "n/gpu0" for r in e.reasons)
    assert worst(ev, "n/gpu1") == State.HEALTHY
    assert worst(ev, "n/npu0") == State.SUSPECT and worst(ev, "n/npu1") == State.HEALTHY
    limit = [e for e in ev if e.entity == "n/gpu2" and "DCGM" in e.reasons[0]]  # (and its new DBE page's own)
    assert [e.level for e in limit] == [State.SUBHEALTHY] and vendor_repair(limit[0].reasons) == "inspect"
    assert "63 retired pages (60 for single-bit, 3 for double-bit errors)" in limit[0].reasons[0]
    assert worst(ev, "n/gpu3") == State.HEALTHY  # 62: under the limit


def test_a_pending_row_remap_is_sub_healthy_until_the_gpu_s_reset_clears_it():
    """DCGM_FI_DEV_ROW_REMAP_PENDING (nvidia-smi's remapped_rows.pending): DCGM's health watch says
    PENDING_ROW_REMAP, severity ISOLATE; the row is used only after a reset. Sub-healthy, repair a reset, for as long
    as the GPU says so (a level, not a latch: the reset's 0 ends it); the static baseline does not judge it."""
    from detectors.xid_catalog import vendor_repair

    def gauges(pending: float) -> pd.DataFrame:
        return pd.DataFrame({"entity": ["n/gpu0", "n/gpu1"], "metric": ["row_remap_pending"] * 2,
                             "last": [pending, 0.0], "max": [pending, 0.0]})

    det = RuleDetector().fit()
    for now in (30, 3 * 3600):  # held while the GPU reports it, hours after the Xid 63 that marked the row
        ev = run(det, now, gauges=gauges(1.0))
        flag = [e for e in ev if e.entity == "n/gpu0"]
        assert [(e.level, e.category, e.latched) for e in flag] == [(State.SUBHEALTHY, "gpu_memory", False)]
        assert vendor_repair(flag[0].reasons) == "reset" and "row remapping pending" in flag[0].reasons[0]
        assert worst(ev, "n/gpu1") == State.HEALTHY
    assert worst(run(det, 3 * 3600 + 30, gauges=gauges(0.0)), "n/gpu0") == State.HEALTHY
    assert worst(run(RuleDetector(baseline=True).fit(), 30, gauges=gauges(1.0)), "n/gpu0") == State.HEALTHY


def test_a_bank_out_of_spare_rows_is_watched():
    """NVML's row remapper histogram, "none" (DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_NONE, nvidia-smi's
    remapped_rows.histogram.none): banks with no reserved rows left. No vendor action names it: a watch, never a
    drain; zero banks (every real capture's) is nothing."""
    g = pd.DataFrame({"entity": ["n/gpu0", "n/gpu1"], "metric": ["row_remap_banks_exhausted"] * 2,
                      "last": [2.0, 0.0], "max": [2.0, 0.0]})
    ev = run(RuleDetector().fit(), 30, gauges=g)
    assert [(e.level, e.category) for e in ev if e.entity == "n/gpu0"] == [(State.SUSPECT, "gpu_memory")]
    assert "2 memory bank(s) with no spare rows left" in [e for e in ev if e.entity == "n/gpu0"][0].reasons[0]
    assert worst(ev, "n/gpu1") == State.HEALTHY


def test_time_throttled_for_temperature_is_judged_as_the_throttle_reasons_are():
    """DCGM's thermal violation counter (microseconds throttled): two thirds of a sample's interval throttled is a
    GPU throttled for heat, held until its next sample; a sample throttled a sixth of the time ends it."""
    det = RuleDetector().fit()

    def sample(now, throttled_s):
        inc = pd.DataFrame({"entity": ["n/gpu0"], "metric": ["thermal_violation_us_total"],
                            "increase": [throttled_s * 1e6], "resets": [0], "dt": [30.0]})
        return run(det, now, inc=inc)

    ev = sample(30, 20.0)
    assert worst(ev, "n/gpu0") == State.SUBHEALTHY and "throttled for temperature 67% of the last 30 s" in \
        ev[0].reasons[0]
    assert worst(run(det, 60), "n/gpu0") == State.SUBHEALTHY  # no sample this tick: held
    assert worst(sample(90, 5.0), "n/gpu0") == State.HEALTHY
    assert worst(RuleDetector(baseline=True).fit().update(
        TickInput(30, events_frame([]), pd.DataFrame({"entity": ["n/gpu0"], "metric": ["thermal_violation_us_total"],
                                                      "increase": [3e7], "resets": [0], "dt": [30.0]}), EMPTY_G)),
        "n/gpu0") == State.HEALTHY  # the static baseline reads the throttle reasons only


def test_a_contained_host_memory_error_is_sub_healthy_an_uncontained_one_failed():
    det = RuleDetector().fit()
    ev = run(det, 30, events=[(30.0, "n1", "edac", 1, "deferred", "memory failure at page 0x1a (LRU page): Recovered",
                               "rasdaemon", None, None),
                              (30.0, "n2", "edac", 1, "uncorrected", "memory failure at page 0x1b: Failed",
                               "rasdaemon", None, None)])
    assert worst(ev, "n1") == State.SUBHEALTHY
    assert any(r.startswith("EDAC deferred: memory failure") for e in ev if e.entity == "n1" for r in e.reasons)
    assert worst(ev, "n2") == State.FAILED
    assert worst(run(RuleDetector(baseline=True).fit(), 30, events=[
        (30.0, "n1", "edac", 1, "deferred", "x", "rasdaemon", None, None)]), "n1") == State.HEALTHY


def test_arm_processor_and_firmware_reported_errors_judged_as_machine_checks():
    """rasdaemon's arm_event (Grace, Kunpeng) and non_standard_event (a firmware's vendor sections) judged as an x86
    host's machine checks: corrected a watch, uncorrected or fatal a failed host."""
    det = RuleDetector().fit()
    ev = run(det, 30, events=[(30.0, "n1", "arm", 1, "corrected", "cache error on MPIDR 0x81080000, x1", "rasdaemon",
                               None, None),
                              (30.0, "n2", "arm", 1, "uncorrected", "bus error on MPIDR 0x0, x1", "rasdaemon", None,
                               None),
                              (30.0, "n3", "cper", None, "corrected", "Corrected error in CPU0 (section x)",
                               "rasdaemon", None, None),
                              (30.0, "n4", "cper", None, "fatal", "Fatal error in PCIe (section x)", "rasdaemon", None,
                               None),
                              (30.0, "n5", "cper", None, "info", "Informational error in x", "rasdaemon", None, None)])
    assert worst(ev, "n1") == State.SUSPECT and worst(ev, "n3") == State.SUSPECT
    assert worst(ev, "n2") == State.FAILED and worst(ev, "n4") == State.FAILED
    assert worst(ev, "n5") == State.HEALTHY
    assert any(r == "Arm processor corrected: cache error on MPIDR 0x81080000, x1"
               for e in ev if e.entity == "n1" for r in e.reasons)


def test_a_failing_local_disk_is_a_watch_on_its_host_and_one_per_storm():
    det = RuleDetector().fit()
    storm = [(30.0 + i, "n1", "disk", None, "error", f"disk 259:0: critical medium error (R of 8 sectors at {i})",
              "rasdaemon", None, None) for i in range(50)]
    ev = run(det, 90, events=[*storm, (31.0, "n2", "disk", None, "info", "disk 8:0: nonblocking retry error",
                                       "rasdaemon", None, None)])
    assert worst(ev, "n1") == State.SUSPECT and worst(ev, "n2") == State.HEALTHY
    assert sum(1 for e in ev if e.entity == "n1") == 1 and "at 49)" in [e for e in ev if e.entity == "n1"][0].reasons[0]
    assert len(det._latches["n1"]) == 1  # a storm of failed requests holds one watch, not fifty
    assert worst(run(RuleDetector(baseline=True).fit(), 30, events=storm[:1]), "n1") == State.HEALTHY


def test_a_gpus_nvlink_fabric_health_summary():
    """NVML's fabric health summary (DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY: 0 not supported, 1 healthy, 2 unhealthy,
    3 limited capacity): unhealthy is sub-healthy on the scale-up link, limited capacity and a value NVML does not
    document a watch, the others nothing; the static baseline does not read it."""
    values = [0.0, 1.0, 2.0, 3.0, 7.0]
    g = pd.DataFrame({"entity": [f"n/gpu{i}" for i in range(len(values))], "metric": ["fabric_health"] * 5,
                      "last": values, "max": values})
    ev = run(RuleDetector().fit(), 30, gauges=g)
    assert {e.entity: (e.level, e.category) for e in ev} == {
        "n/gpu2": (State.SUBHEALTHY, "scaleup_link"), "n/gpu3": (State.SUSPECT, "scaleup_link"),
        "n/gpu4": (State.SUSPECT, "scaleup_link")}
    assert "LIMITED_CAPACITY" in next(e for e in ev if e.entity == "n/gpu3").reasons[0]
    assert run(RuleDetector(baseline=True).fit(), 30, gauges=g) == []


def test_nvlink_5_s_effective_ber_over_dcgm_s_limit_is_a_link_to_inspect():
    """DCGM's NVLink health watch fails a GPU whose effective BER is over 1e-12 (1e-12 passes, 1.1e-12 fails): here
    sub-healthy on the scale-up link, its cables and signal to be looked at; NVML's floor (1.5e-254) is nothing; the
    static baseline does not read it."""
    from detectors.xid_catalog import vendor_repair

    values = [1.5e-254, 1e-12, 1.1e-12, 3e-9]
    g = pd.DataFrame({"entity": [f"n/gpu{i}" for i in range(4)], "metric": ["nvlink_effective_ber"] * 4,
                      "last": values, "max": values})
    ev = run(RuleDetector().fit(), 30, gauges=g)
    assert [(e.entity, e.level, e.category, vendor_repair(e.reasons)) for e in ev] == [
        ("n/gpu2", State.SUBHEALTHY, "scaleup_link", "inspect"),
        ("n/gpu3", State.SUBHEALTHY, "scaleup_link", "inspect")]
    assert ev[0].reasons[0].startswith("NVLink effective BER 1.1e-12 (limit 1e-12)")
    assert run(RuleDetector(baseline=True).fit(), 30, gauges=g) == []


def test_a_gpus_memory_it_cannot_repair_fails_it_for_replacement():
    """NVML's unrepairable memory flag (DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG, 1 yes, 0 no; DCGM's memory health watch
    fails the GPU on it): failed (hard), the repair a replacement; the static baseline reads it too, as a row
    remapping failure."""
    from detectors.xid_catalog import vendor_repair

    g = pd.DataFrame({"entity": ["n/gpu0", "n/gpu1"], "metric": ["memory_unrepairable"] * 2, "last": [0.0, 1.0],
                      "max": [0.0, 1.0]})
    ev = run(RuleDetector().fit(), 30, gauges=g)
    assert [(e.entity, e.level, e.hard, vendor_repair(e.reasons)) for e in ev] == [
        ("n/gpu1", State.FAILED, True, "replace")]
    assert [e.entity for e in run(RuleDetector(baseline=True).fit(), 30, gauges=g)] == ["n/gpu1"]


def test_the_drivers_recovery_action_is_acted_on_as_xid_154s_line():
    """NVML's GPU recovery action (DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION, nvidia-smi's gpu_recovery_action): a reboot
    fails the GPU, a reset or a drain is sub-healthy with the repair it calls for, None is nothing, a value NVML does
    not document is sub-healthy; the static baseline does not read it."""
    from detectors.xid_catalog import vendor_repair

    values = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 9.0]
    g = pd.DataFrame({"entity": [f"n/gpu{i}" for i in range(len(values))], "metric": ["gpu_recovery_action"] * 7,
                      "last": values, "max": values})
    ev = run(RuleDetector().fit(), 30, gauges=g)
    got = {e.entity: (e.level, e.hard, vendor_repair(e.reasons)) for e in ev}
    assert got == {"n/gpu1": (State.SUBHEALTHY, False, "reset"), "n/gpu2": (State.FAILED, True, "reboot"),
                   "n/gpu3": (State.SUBHEALTHY, False, None), "n/gpu4": (State.SUBHEALTHY, False, "reset"),
                   "n/gpu5": (State.SUBHEALTHY, False, "reset"), "n/gpu6": (State.SUBHEALTHY, False, None)}
    assert "NODE_REBOOT" in next(e for e in ev if e.entity == "n/gpu2").reasons[0]
    assert "does not document" in next(e for e in ev if e.entity == "n/gpu6").reasons[0]
    assert run(RuleDetector(baseline=True).fit(), 30, gauges=g) == []
