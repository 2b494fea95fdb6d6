"""NVIDIA's Xid catalog as data: every code of the vendor's catalog judged, each departure said, and every row reached
by a kernel line of its own through the reader and the rule detector (the lines are generated from the catalog)."""

import pandas as pd
import pytest

from daemon.ingest.formats.kernel_events import parse_kernel_message
from detectors.contract import TickInput
from detectors.rules import RuleDetector
from detectors.schema import State, events_frame
from detectors.xid_catalog import (
                                   SXID_CLASSES,
                                   VENDOR_ACTIONS,
                                   decode_nvlink5,
                                   decode_state,
                                   load_decode_sheet,
                                   load_sxid_catalog,
                                   load_vendor_xids,
                                   load_xid_catalog,
                                   pattern_matches,
                                   vendor_judgement,
                                   )

CATALOG = load_xid_catalog()
VENDOR = load_vendor_xids()
SHEET = load_decode_sheet()
EMPTY_INC = pd.DataFrame({"entity": [], "metric": [], "increase": [], "resets": []})
EMPTY_G = pd.DataFrame({"entity": [], "metric": [], "last": [], "max": []})
LEVEL = {"failed": State.FAILED, "subhealthy": State.SUBHEALTHY, "suspect": State.SUSPECT, "ignore": State.HEALTHY,
         "application": State.HEALTHY}


def judge(lines: list[str], det: RuleDetector | None = None, now: float = 30.0) -> State:
    """The worst level the rule detector gives GPU 0 after the kernel lines (read as the journald reader does)."""
    det = det or RuleDetector().fit()
    rows = []
    for line in lines:
        ev = parse_kernel_message(line)
        assert ev is not None, line
        rows.append((now - 10, "n/gpu0", ev.kind, ev.code, ev.severity, ev.message, "kernel", None, None))
    evidence = det.update(TickInput(now, events_frame(rows), EMPTY_INC, EMPTY_G))
    levels = [e.level for e in evidence if e.entity == "n/gpu0"]
    return max(levels) if levels else State.HEALTHY


def xid_line(code: int, text: str) -> str:
    return f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, name=python3, {text}"


def nvlink_line(code: int, text: str) -> str:
    """The NVLink 5 Xids print no process: the unit, the severity, then the registers."""
    return f"NVRM: Xid (PCI:0000:3b:00): {code}, {text}"


def sample(pattern: str) -> int:
    """A register value the decode pattern matches (its free bits clear)."""
    return int(pattern.replace("-", "0"), 2)


def test_every_vendor_code_has_a_judgement_and_the_catalog_is_whole():
    assert sorted(VENDOR) == list(range(1, 173))  # NVIDIA documents 172 codes
    assert set(CATALOG) == set(VENDOR)
    assert sum(1 for v in VENDOR.values() if set(v.applies_to) == {"a100", "h100", "b100", "gb200"}) == 56
    assert sum(1 for v in VENDOR.values() if v.used) == 109  # applies to at least one of the four
    assert sum(len(rows) for rows in SHEET.values()) == 95 and set(SHEET) == set(range(144, 151))
    assert VENDOR[123].mnemonic == "SPI_PMU_RPC_WRITE_FAIL" and VENDOR[122].mnemonic == "SPI_PMU_RPC_READ_FAIL"


@pytest.mark.parametrize("code", sorted(CATALOG))
def test_each_row_follows_the_vendor_or_says_why(code):
    rule = CATALOG[code]
    follows = vendor_judgement(rule.vendor)
    if follows is None or follows != (rule.state, rule.repair):
        assert rule.departure, f"Xid {code}: {rule.state}/{rule.repair} differs from the vendor's {follows} unsaid"
    else:
        assert not rule.departure, f"Xid {code} follows the vendor but says it departs"
    if rule.vendor.immediate in ("IGNORE", "RESTART_APP"):
        assert rule.state not in ("failed",), f"Xid {code}: the vendor says {rule.vendor.immediate}; never failed"
    assert set(VENDOR_ACTIONS) >= {v.immediate for v in VENDOR.values()} - {"IGNORE", ""}


@pytest.mark.parametrize("code", sorted(c for c, r in CATALOG.items() if r.state in LEVEL))
def test_a_single_kernel_line_of_each_code_gets_its_catalog_state(code):
    rule = CATALOG[code]
    assert judge([xid_line(code, rule.vendor.description)]) == LEVEL[rule.state]


@pytest.mark.parametrize("row", [r for rows in SHEET.values() for r in rows], ids=lambda r: f"{r.xid}-{r.unit}")
def test_each_decode_row_is_reached_by_its_line(row):
    """A line as the driver prints it (unit, severity, IntrInfo and the error status in parentheses), V2 and V1."""
    status = row.error_status[0] if row.error_status else 0
    unit = row.units[-1]
    word = "Fatal" if "fatal" in row.severity.lower() and not row.severity.lower().startswith("non") else "Nonfatal"
    want = decode_state(row.action, row.severity, row.investigatory)
    for pattern in (row.intrinfo_v2, row.intrinfo_v1):
        text = f"{unit} {word} XC0 i0 Link 07 (0x{sample(pattern):08x} 0x{status:08x} 0x00000000 0x00000000)"
        decoded = decode_nvlink5(row.xid, text, SHEET)
        assert decoded is not None and decoded.row.action == row.action and decoded.state == want, text
        assert judge([nvlink_line(row.xid, text)]) == LEVEL[want]
    if row.action2:  # the RXPIPE rows: the action-2 pattern asks for a reset
        text = f"{unit} Nonfatal XC0 i0 Link 07 (0x{sample(row.action2_v2):08x} 0x{status:08x} 0x0 0x0)"
        assert decode_nvlink5(row.xid, text, SHEET).action == row.action2


def test_the_vendors_act_codes_flag_their_gpu_from_one_line():
    """Issue 53's list: NVIDIA's catalog says reset the GPU or do hands-on work for each, and every peer acts."""
    for code in (46, 136, 155, 156, 158, 167, 169, 172, 54):
        assert judge([xid_line(code, "x")]) >= State.SUBHEALTHY, code


def test_the_vendors_ignore_codes_alone_flag_nothing():
    assert judge([xid_line(92, "High single-bit ECC error rate")]) < State.SUBHEALTHY
    assert judge([xid_line(157, "Resource Retirement Failure")]) < State.SUBHEALTHY
    assert judge(["NVRM: Xid (PCI:0000:3b:00): 147, TREX Nonfatal XC0 i0 Link 00 (0x0000000e 0x00000001 0x0 0x0)"]) \
        < State.SUBHEALTHY
    assert judge([xid_line(43, "Ch 00000018")]) == State.HEALTHY


def test_link_fatal_asks_for_a_drain_and_gpu_fatal_for_a_reset_now():
    link_down = "NETIR_LINK_EVT Fatal XC0 i0 Link 10 (0x02500011 0x00000000 0x00000000 0x00000000)"  # reason 100101
    assert judge([nvlink_line(149, link_down)]) == State.SUBHEALTHY
    mfde = "NETIR_MFDE_EVENT Fatal XC0 i0 Link 00 (0x00000014 0x00000001 0x00000000 0x00000000)"
    assert judge([nvlink_line(149, mfde)]) == State.FAILED
    host = "NETIR_LINK_EVT Fatal XC0 i0 Link 03 (0x02800011 0x00000000 0x0 0x0)"  # 101000: IGNORE, investigate host
    assert judge([nvlink_line(149, host)]) == State.SUSPECT


def test_a_link_down_seen_more_than_once_a_day_is_a_part_to_inspect_not_to_reset_again():
    """Xid 149's NETIR_LINK_DOWN row: RESET_GPU, investigate "REPORT_ISSUE (if seen >1 per day)"."""
    (row,) = [r for r in SHEET[149] if r.repeats_per_day is not None]
    assert row.repeats_per_day == 1 and row.action == "RESET_GPU"
    line = nvlink_line(149, f"NETIR_LINK_EVT Fatal XC0 i0 Link 04 (0x{sample(row.intrinfo_v2):08x} 0x0 0x0 0x0)")
    det = RuleDetector().fit()

    def reasons(now: float) -> list[str]:
        judge([line], det, now=now)
        return [r for e in det.update(TickInput(now + 1, events_frame([]), EMPTY_INC, EMPTY_G))
                if e.entity == "n/gpu0" for r in e.reasons]

    first = reasons(30.0)
    assert any(r.endswith("; repair: reset)") for r in first) and not any("times in 24 h" in r for r in first)
    again = reasons(30.0 + 20 * 3600)  # the same link down 20 hours later
    assert any("seen 2 times in 24 h" in r and r.endswith("; repair: inspect)") for r in again), again
    det.forget("n/gpu0")  # a replaced part starts afresh
    assert not any("times in 24 h" in r for r in reasons(30.0 + 21 * 3600))


def test_an_nvlink5_line_no_row_matches_falls_back_on_its_own_word_and_is_counted():
    det = RuleDetector().fit()
    odd = "SAW_MVB Fatal XC0 i0 Link 00 (0x00000001 0x00000400 0x0 0x0)"  # a status the sheet does not list
    assert judge([nvlink_line(144, odd)], det) == State.FAILED and det.undecoded_xids_[144] == 1


def test_power_smoothing_back_ends_its_watch():
    det = RuleDetector().fit()
    assert judge([xid_line(163, "Power Smoothing HW Circuitry capability disengaged")], det, now=30) == State.SUSPECT
    assert judge([xid_line(162, "Power Smoothing HW Circuitry capability reengaged")], det, now=60) == State.HEALTHY


def test_one_jobs_application_storm_on_77_nodes_flags_nothing():
    """A job's three crashes: Xid 13, 43 and 45 twenty times a GPU on 8 GPUs of each of 77 nodes."""
    det = RuleDetector().fit()
    worst = State.HEALTHY
    for crash, t in enumerate((600.0, 4200.0, 7800.0)):
        rows = []
        for node in range(77):
            for gpu in range(8):
                for k in range(20):
                    for code in (13, 43, 45):
                        line = xid_line(code, f"Ch 0000001{k % 10}").replace("4242", str(9000 + crash))
                        ev = parse_kernel_message(line)
                        rows.append((t + k, f"n{node:02d}/gpu{gpu}", ev.kind, ev.code, ev.severity, ev.message,
                                     "kernel", None, None))
        evidence = det.update(TickInput(t + 30, events_frame(rows), EMPTY_INC, EMPTY_G))
        worst = max([worst, *(e.level for e in evidence)])
    assert worst < State.SUBHEALTHY


def test_pattern_matching_reads_the_most_significant_bit_first():
    assert pattern_matches("-" * 25 + "0000001", 1) and not pattern_matches("-" * 25 + "0000001", 3)
    assert pattern_matches("------100101" + "-" * 20, 0x25 << 20)
    assert not pattern_matches("short", 0)


def sxid_line(code: int, severity: str, text: str = "Link 32 error") -> str:
    return f"nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): {code}, {severity}, {text}"


def test_every_sxid_the_fabric_manager_guide_lists_is_judged_by_its_class():
    sxids = load_sxid_catalog()
    assert len(sxids) == 92
    assert {r.klass for r in sxids.values()} == {"non-fatal", "fatal", "always-fatal", "other"}
    for r in sxids.values():
        if r.klass in SXID_CLASSES and SXID_CLASSES[r.klass] == (r.state, r.repair):
            assert not r.departure, r.code
        else:
            assert r.departure, f"SXid {r.code} departs from its class {r.klass} unsaid"


def test_an_sxid_by_its_class_and_a_fatal_line_always_failed():
    assert judge([sxid_line(11012, "Non-fatal", "Single bit ECC error")]) == State.SUSPECT
    assert judge([sxid_line(12022, "Fatal", "egress input ECC DBE error")]) == State.FAILED
    assert judge([sxid_line(23001, "Non-fatal")]) == State.FAILED  # always fatal, whatever the line says
    assert judge([sxid_line(20012, "Fatal")]) == State.FAILED  # the line's own word wins upward
    det = RuleDetector().fit()
    assert judge([sxid_line(10004, "Non-fatal", "thermal event start")], det, now=30) == State.SUSPECT
    assert judge([sxid_line(10005, "Non-fatal", "thermal event end")], det, now=60) == State.HEALTHY


def test_an_sxid_the_guide_does_not_list_is_judged_by_its_line_and_counted():
    det = RuleDetector().fit()
    assert judge([sxid_line(31999, "Non-fatal")], det) == State.SUSPECT
    assert det.take_unjudged() == {("sxid", 31999): 1} and det.take_unjudged() == {}


def test_docs_list_every_departure_from_the_vendor():
    from pathlib import Path

    rules_md = (Path(__file__).resolve().parents[2] / "docs" / "rules.md").read_text()
    for code, rule in [*CATALOG.items(), *load_sxid_catalog().items()]:
        if rule.departure:
            assert f"\n| {code} | " in rules_md, f"docs/rules.md does not list the departure of {code}"


def test_the_repair_a_code_calls_for_is_read_back_from_its_reason():
    from detectors.xid_catalog import vendor_repair

    for code, repair in ((46, "reset"), (54, "reseat"), (79, "reboot"), (64, "reset")):
        det = RuleDetector().fit()
        ev = det.update(TickInput(30.0, events_frame([(20.0, "n/gpu0", "xid", code, "error", "x", "kernel", None,
                                                       None)]), EMPTY_INC, EMPTY_G))
        assert vendor_repair(ev[0].reasons) == repair, ev[0].reasons
    assert vendor_repair(["symbol errors 300/h (limit 120/h)"]) is None
