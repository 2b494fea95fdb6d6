"""Verdicts on amdgpu RAS lines, Ascend fault codes and AMD Field IDs, alone and through the rule detector."""

import pandas as pd

from detectors.contract import TickInput
from detectors.rules import RuleDetector
from detectors.schema import State, events_frame
from detectors.vendor_events import (ASCEND_LEVELS, afid_verdict, amdgpu_verdict, ascend_verdict,
                                     load_afid_catalog, load_ascend_catalog)
from detectors.xid_catalog import vendor_repair

EMPTY = pd.DataFrame({"entity": [], "metric": [], "increase": [], "resets": []})
GAUGES = pd.DataFrame({"entity": [], "metric": [], "last": [], "max": []})


def test_ascend_catalog_levels_and_the_more_severe_of_two():
    cat = load_ascend_catalog()
    assert len(cat) > 300 and set(cat.values()) <= set(ASCEND_LEVELS)
    assert cat[0x80E18402] == "SeparateNPU" and cat[0x80E18405] == "SubHealthFault"
    assert cat[0xA2301001] == "SeparateNPU"  # listed as RestartBusiness and SeparateNPU upstream


def test_ascend_verdicts():
    cat = load_ascend_catalog()
    v = ascend_verdict(0x80E18402, cat)
    assert v.level == State.FAILED and v.hard and "0x80E18402" in v.reason and "isolate the NPU" in v.reason
    assert ascend_verdict(0x8C0E4E00, cat).level == State.SUBHEALTHY  # FreeRestartNPU: reset when idle
    assert ascend_verdict(0x80E21007, cat) is None  # NotHandleFault
    assert ascend_verdict(0x8C204E00, cat).application  # RestartBusiness: the job's to restart
    unknown = ascend_verdict(0x12345678, cat)
    assert unknown.level == State.SUSPECT and unknown.unknown
    # The baseline acts as MindCluster does: on isolating and resetting levels only.
    assert ascend_verdict(0x80E18402, cat, baseline=True).level == State.FAILED
    assert ascend_verdict(0x8C0E4E00, cat, baseline=True) is None
    assert ascend_verdict(0x12345678, cat, baseline=True) is None


def test_amdgpu_verdicts():
    ue = amdgpu_verdict("uncorrected", "xgmi_wafl block: 1 uncorrectable hardware errors", 1)
    assert ue.level == State.FAILED and ue.hard and ue.category == "scaleup_link"
    de = amdgpu_verdict("deferred", "umc block: 1 deferred hardware errors", 1)
    assert de.level == State.SUBHEALTHY and de.category == "gpu_memory"
    ce = amdgpu_verdict("corrected", "umc block: 3 correctable hardware errors", 3)
    assert ce.level is None and ce.rate_key == "amdgpu-ce-umc" and ce.count == 3
    assert amdgpu_verdict("info", "GPU reset begin", None).level == State.SUSPECT
    assert amdgpu_verdict("application", "gfxhub page fault", None).application
    assert amdgpu_verdict("application", "gfxhub page fault", None, baseline=True) is None
    assert amdgpu_verdict("fatal", "GPU reset failed", None).level == State.FAILED
    assert amdgpu_verdict("corrected", "umc block: 3 correctable hardware errors", 3, baseline=True) is None
    assert amdgpu_verdict("fatal", "uncorrectable hardware error ERREVENT_ATHUB_INTERRUPT", None,
                          baseline=True).hard
    # the GPU's bad-page table over the driver's threshold: the driver will not initialize it; near it, a watch
    rma = amdgpu_verdict("bad_pages", "512 bad-page records over the driver's threshold of 512: replace the GPU", 512)
    assert rma.level == State.FAILED and rma.hard and rma.category == "gpu_memory"
    near = amdgpu_verdict("bad_pages_near", "461 bad-page records, over 90% of the driver's threshold of 512", 461)
    assert near.level == State.SUSPECT and near.category == "gpu_memory" and "plan the GPU's replacement" in near.reason


def tick(rules, now, events):
    frame = events_frame([(now, e, kind, code, sev, msg, "kernel", None, None) for e, kind, code, sev, msg in events])
    return {ev.entity: ev for ev in rules.update(TickInput(now, frame, EMPTY, GAUGES))}


def test_rule_detector_judges_vendor_events():
    rules = RuleDetector().fit()
    out = tick(rules, 100.0, [("n1/npu3", "ascend", 0x80E18402, "error", ""),
                              ("n1/npu4", "ascend", 0x80E18405, "error", ""),
                              ("n1/npu5", "ascend", 0x12345678, "error", ""),
                              ("n2/gpu1", "amdgpu", 1, "uncorrected", "umc block: 1 uncorrectable hardware errors"),
                              ("n2/gpu2", "amdgpu", 512, "bad_pages",
                               "512 bad-page records over the driver's threshold of 512: replace the GPU")])
    assert out["n1/npu3"].level == State.FAILED and out["n1/npu3"].hard
    assert out["n1/npu4"].level == State.SUBHEALTHY
    assert out["n1/npu5"].level == State.SUSPECT and rules.unknown_codes_[0x12345678] == 1
    assert out["n2/gpu1"].level == State.FAILED and out["n2/gpu1"].category == "gpu_memory"
    assert out["n2/gpu2"].level == State.FAILED and "replace the GPU" in out["n2/gpu2"].reasons[0]


def test_amdgpu_correctable_errors_count_towards_an_hourly_rate():
    rules = RuleDetector(sbe_per_hour=50.0).fit()
    flagged = {}
    for k in range(20):  # 12 correctable UMC errors every 30 s: 1,440/h
        flagged = tick(rules, 30.0 * k, [("n2/gpu0", "amdgpu", 12, "corrected", "umc block: 12 correctable hardware "
                                                                               "errors")])
        if "n2/gpu0" in flagged:
            break
    assert flagged["n2/gpu0"].level == State.SUBHEALTHY and "/h (limit 50/h)" in flagged["n2/gpu0"].reasons[0]
    quiet = RuleDetector(sbe_per_hour=50.0).fit()
    assert not tick(quiet, 0.0, [("n2/gpu0", "amdgpu", 2, "corrected", "umc block: 2 correctable hardware errors")])


def test_ascend_restart_business_codes_are_the_jobs_unless_one_npu_repeats_them():
    rules = RuleDetector().fit()
    seen = {}
    for k in range(3):
        seen = tick(rules, 3600.0 * k, [("n1/npu2", "ascend", 0x8C204E00, "error", "")])
    assert seen["n1/npu2"].level == State.SUSPECT and "repeated 3x" in seen["n1/npu2"].reasons[0]
    once = RuleDetector().fit()
    assert not tick(once, 0.0, [("n1/npu2", "ascend", 0x8C204E00, "error", "")])


def test_every_amd_field_id_has_a_verdict_by_its_severity():
    """AMD's AFID list (34 AFIDs, catalogs/amd_afid.csv): fail-to-init and fatal fail the GPU (the baseline too),
    uncorrected non-fatal is sub-healthy, corrected a watch, an undecodable record a telemetry watch; each with the
    repair raswarden asks for. An AFID not in the list is a counted watch."""
    cat = load_afid_catalog()
    assert sorted(cat) == list(range(1, 35))
    want = {"Fail-to-init": (State.FAILED, "inspect"), "Fatal": (State.FAILED, "reset"),
            "Uncorrected, Non-fatal": (State.SUBHEALTHY, "reset"), "Corrected": (State.SUSPECT, None),
            "ALL": (State.SUSPECT, None)}
    for afid, row in cat.items():
        v = afid_verdict(afid, cat)
        level, repair = want[row.severity]
        if row.type == "Bad Page Retirement Threshold":
            repair = "replace"
        assert (v.level, vendor_repair([v.reason]), v.hard) == (level, repair, level == State.FAILED), afid
        assert v.reason.startswith(f"AMD Field ID {afid}: {row.category}, {row.type}")
        assert (afid_verdict(afid, cat, baseline=True) is not None) == (level == State.FAILED), afid
    # node-scraper's sample event: AFID 22, on-die ECC, uncorrected non-fatal (the HBM's)
    assert (afid_verdict(22, cat).category, afid_verdict(10, cat).category) == ("gpu_memory", "scaleup_link")
    assert (afid_verdict(14, cat).category, afid_verdict(33, cat).category) == ("gpu_bus", "telemetry")
    unknown = afid_verdict(4242, cat)
    assert unknown.level == State.SUSPECT and unknown.unknown and afid_verdict(4242, cat, baseline=True) is None


def test_the_rule_detector_judges_amd_field_ids():
    rules = RuleDetector().fit()
    out = tick(rules, 100.0, [("n2/gpu0", "afid", 20, "error", ""), ("n2/gpu1", "afid", 22, "error", ""),
                              ("n2/gpu2", "afid", 24, "error", ""), ("n2/gpu3", "afid", 4242, "error", "")])
    assert (out["n2/gpu0"].level, out["n2/gpu0"].hard) == (State.FAILED, True)
    assert out["n2/gpu1"].level == State.SUBHEALTHY and out["n2/gpu1"].category == "gpu_memory"
    assert out["n2/gpu2"].level == State.SUSPECT and out["n2/gpu3"].level == State.SUSPECT
    assert rules.unknown_codes_ == {4242: 1}


# One line for each row of detectors/catalogs/amdgpu.csv, in the driver's formats (amdgpu_ras.c's error counts with
# the RAS core's socket/die prefix, amdgpu_ras.c's fatal-error interrupt, amdgpu_device.c's reset and health check,
# amdgpu_ras_eeprom.c's bad-page table, gmc_v9_0.c's page fault), by (event, block); "*" rows by a block no other
# row names.
_AMDGPU_LINES = {
    ("uncorrected", "umc"): "socket: 0, die: 0, 1 new uncorrectable hardware errors detected in umc block",
    ("uncorrected", "xgmi_wafl"): "socket: 0, die: 0, 2 new uncorrectable hardware errors detected in xgmi_wafl block",
    ("uncorrected", "pcie_bif"): "socket: 0, die: 0, 1 new uncorrectable hardware errors detected in pcie_bif block",
    ("uncorrected", "*"): "socket: 0, die: 0, 1 new uncorrectable hardware errors detected in gfx block",
    ("fatal", "*"): "uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!",
    ("lost", "*"): "device lost from bus!",
    ("bad_pages", "*"): "RAS records:513 exceed threshold:512",
    ("bad_pages_near", "*"): "RAS records:461 exceeds 90% of threshold:512",
    ("deferred", "umc"): "socket: 0, die: 0, 1 new deferred hardware errors detected in umc block",
    ("deferred", "*"): "socket: 0, die: 0, 1 new deferred hardware errors detected in sdma block",
    ("corrected", "umc"): "socket: 0, die: 0, 3 new correctable hardware errors detected in umc block",
    ("corrected", "xgmi_wafl"): "socket: 0, die: 0, 3 new correctable hardware errors detected in xgmi_wafl block",
    ("corrected", "*"): "socket: 0, die: 0, 3 new correctable hardware errors detected in mmhub block",
    ("info", "*"): "GPU reset begin!",
    ("application", "*"): "[gfxhub] page fault (src_id:0 ring:24 vmid:8 pasid:32770)",
}


def test_every_amdgpu_catalog_row_is_reached_by_a_line_of_its_own():
    """Generated from the catalog: each row has a line in the driver's format that the kernel-line reader reads as
    that row's event and block, and the verdict is that row's state and category (rate rows: counted toward the
    hourly limit; application rows: the job's)."""
    from daemon.ingest.formats.kernel_events import parse_kernel_message
    from detectors.vendor_events import load_amdgpu_catalog

    rows = load_amdgpu_catalog()
    assert {(r.event, r.block) for r in rows} == set(_AMDGPU_LINES)
    for r in rows:
        event = parse_kernel_message(f"amdgpu 0000:05:00.0: amdgpu: {_AMDGPU_LINES[(r.event, r.block)]}")
        assert (event.kind, event.severity, event.pci) == ("amdgpu", r.event, "0000:05:00"), r
        v = amdgpu_verdict(event.severity, event.message, event.code)
        assert v is not None and v.category == r.category, (r, v)
        if r.state == "rate":
            assert v.rate_key and v.level is None, r
        elif r.state == "application":
            assert v.application, r
        else:
            assert v.level == State.parse(r.state), r
