"""Fault-code gauges to events: dcgm-exporter's last Xid, npu-exporter's active Ascend codes and AMD
device-metrics-exporter's AFIDs of a GPU's last RAS event."""

import pandas as pd

from daemon.ingest.naming import SeriesMapper
from daemon.judgement.resolve import EventResolver


def rows(*r):
    return pd.DataFrame(r, columns=["entity", "metric", "ts", "value"])


def test_ascend_codes_are_events_when_they_appear_first_sight_included():
    res = EventResolver(SeriesMapper())
    out = res.code_gauge_events(rows(("n/npu0", "npu_error_code_0", 0.0, 0.0), ("n/npu1", "npu_error_code_0", 0.0,
                                                                               0x80E18402)))
    assert [(e[1], e[2], e[3]) for e in out] == [("n/npu1", "ascend", 0x80E18402)]
    # The same code still active: no new event; it moves to another slot as a second code arrives: none either.
    assert not res.code_gauge_events(rows(("n/npu1", "npu_error_code_0", 30.0, 0x80E18402)))
    out = res.code_gauge_events(rows(("n/npu1", "npu_error_code_0", 60.0, 0x80E18405),
                                     ("n/npu1", "npu_error_code_1", 60.0, 0x80E18402)))
    assert [e[3] for e in out] == [0x80E18405]
    # Cleared, then back: a new event.
    assert not res.code_gauge_events(rows(("n/npu1", "npu_error_code_0", 90.0, 0.0),
                                          ("n/npu1", "npu_error_code_1", 90.0, 0.0)))
    assert [e[3] for e in res.code_gauge_events(rows(("n/npu1", "npu_error_code_0", 120.0, 0x80E18402)))] == [
        0x80E18402]


def test_amd_field_ids_are_events_when_a_gpus_last_ras_event_names_new_ones():
    """gpu_afid_errors holds the AFIDs of the GPU's last RAS event, one series per afid_index, every scrape: an AFID
    is an event when it appears, not while it stays; a next event's AFIDs are new ones."""
    res = EventResolver(SeriesMapper())
    out = res.code_gauge_events(rows(("n/gpu0", "afid_code_0", 0.0, 0.0), ("n/gpu1", "afid_code_0", 0.0, 22.0),
                                     ("n/gpu1", "afid_code_1", 0.0, 24.0)))
    assert [(e[1], e[2], e[3], e[6]) for e in out] == [("n/gpu1", "afid", 22, "amd-device-metrics-exporter"),
                                                       ("n/gpu1", "afid", 24, "amd-device-metrics-exporter")]
    assert not res.code_gauge_events(rows(("n/gpu1", "afid_code_0", 30.0, 22.0), ("n/gpu1", "afid_code_1", 30.0, 24.0)))
    out = res.code_gauge_events(rows(("n/gpu1", "afid_code_0", 60.0, 20.0), ("n/gpu1", "afid_code_1", 60.0, 0.0),
                                     ("n/npu0", "npu_error_code_0", 60.0, 0x80E18402)))
    assert [(e[1], e[2], e[3]) for e in out] == [("n/gpu1", "afid", 20), ("n/npu0", "ascend", 0x80E18402)]


def test_a_slot_not_reported_for_a_while_is_forgotten():
    res = EventResolver(SeriesMapper(), slot_expiry_s=600.0)
    assert res.code_gauge_events(rows(("n/npu1", "npu_error_code_0", 0.0, 0x80E18402)))
    # Newer exporters stop reporting a slot once its code clears: an hour later the code is new again.
    assert res.code_gauge_events(rows(("n/npu1", "npu_error_code_0", 3600.0, 0x80E18402)))


def test_xid_gauge_keeps_its_own_rules_beside_npu_codes():
    res = EventResolver(SeriesMapper())
    out = res.code_gauge_events(rows(("n/gpu0", "xid_last", 0.0, 48.0), ("n/npu0", "npu_error_code_0", 0.0, 7.0)))
    assert [(e[1], e[2]) for e in out] == [("n/npu0", "ascend")]  # the first Xid seen is a baseline
    out = res.code_gauge_events(rows(("n/gpu0", "xid_last", 30.0, 79.0)))
    assert [(e[1], e[2], e[3]) for e in out] == [("n/gpu0", "xid", 79)]


def test_xid_gauge_over_ticks_that_share_their_name_categories():
    """The pipeline's ticks share one name array (its categorical dtype): the resolver's per-name state carries
    across them, and a name array seen again after another is read afresh."""
    names = pd.CategoricalDtype(pd.Index(["n/gpu0", "n/gpu1"], dtype=object))

    def tick(ts, gpu0, gpu1, dtype=names):
        return pd.DataFrame({"entity": pd.Categorical(["n/gpu0", "n/gpu1"], dtype=dtype),
                             "metric": ["xid_last", "xid_last"], "ts": [ts, ts], "value": [gpu0, gpu1]})

    res = EventResolver(SeriesMapper())
    assert not res.code_gauge_events(tick(0.0, 0.0, 13.0))  # first sight: a baseline
    assert not res.code_gauge_events(tick(30.0, 0.0, 13.0))  # unchanged
    assert [(e[1], e[3]) for e in res.code_gauge_events(tick(60.0, 79.0, 13.0))] == [("n/gpu0", 79)]
    assert not res.code_gauge_events(tick(90.0, 79.0, 0.0))  # cleared
    other = pd.CategoricalDtype(pd.Index(["n/gpu1", "n/gpu0", "n/gpu2"], dtype=object))
    assert [(e[1], e[3]) for e in res.code_gauge_events(tick(120.0, 79.0, 48.0, other))] == [("n/gpu1", 48)]
    assert [(e[1], e[3]) for e in res.code_gauge_events(tick(150.0, 31.0, 48.0))] == [("n/gpu0", 31)]


def test_xid_gauge_over_a_long_tick_gives_each_change_at_its_time():
    """A 5-minute tick reads ten samples of each GPU's gauge, interleaved: every change to a new non-zero Xid is an
    event at its sample's time (back to an earlier one too), a held value or a blank (NaN) none."""
    nan = float("nan")
    gpu0 = [13.0, 13.0, 79.0, 79.0, 79.0, 13.0, 13.0, 0.0, 0.0, 48.0]
    gpu1 = [0.0, nan, nan, 31.0, 31.0, nan, 31.0, 31.0, 31.0, 31.0]
    res = EventResolver(SeriesMapper())
    assert not res.code_gauge_events(rows(("n/gpu0", "xid_last", -30.0, 13.0), ("n/gpu1", "xid_last", -30.0, 0.0)))
    batch = rows(*[r for k in range(10) for r in (("n/gpu0", "xid_last", 30.0 * k, gpu0[k]),
                                                   ("n/gpu1", "xid_last", 30.0 * k, gpu1[k]))])
    out = res.code_gauge_events(batch)
    assert [(e[0], e[1], e[3]) for e in out] == [(60.0, "n/gpu0", 79), (90.0, "n/gpu1", 31), (150.0, "n/gpu0", 13),
                                                 (180.0, "n/gpu1", 31), (270.0, "n/gpu0", 48)]


def test_dcgm_exporters_count_of_each_xid_gives_its_new_xids():
    """DCGM_EXP_XID_ERRORS_COUNT (the real line of NVIDIA/dcgm-exporter pull request 239) counts each Xid in the
    exporter's window, one series per code: a rise of n is n Xids of that code, first sight included (the series
    comes with the Xid); Xids ageing out of the window are none. DCGM_EXP_XID_ERRORS_TOTAL counts since the exporter
    started: its first reading is a baseline, a fall an exporter restart."""
    from daemon.ingest.formats import ReadContext
    from daemon.ingest.formats.openmetrics import parse_scrape
    from tests.conftest import REAL

    text = (REAL / "quoted" / "dcgm-exporter-xid-count.prom").read_bytes()
    ctx = ReadContext()
    s = parse_scrape(text, ctx, {}, "scrape", 1000.0).samples
    assert s[["entity", "metric", "value"]].values.tolist() == [["workstation/gpu0", "xid_count_42", 1.0]]
    res = EventResolver(ctx.mapper)
    out = res.code_gauge_events(s[["entity", "metric", "ts", "value"]])
    assert [(e[0], e[1], e[2], e[3], e[5]) for e in out] == [
        (1000.0, "workstation/gpu0", "xid", 42, "reported by dcgm-exporter DCGM_EXP_XID_ERRORS_COUNT")]
    g = "workstation/gpu0"
    assert not res.code_gauge_events(rows((g, "xid_count_42", 1030.0, 1.0)))
    assert [(e[0], e[3]) for e in res.code_gauge_events(rows((g, "xid_count_42", 1060.0, 3.0),
                                                             (g, "xid_count_79", 1060.0, 1.0)))] == [
        (1060.0, 42), (1060.0, 42), (1060.0, 79)]
    assert not res.code_gauge_events(rows((g, "xid_count_42", 1400.0, 0.0)))  # aged out of the 5-minute window
    assert not res.code_gauge_events(rows((g, "xid_total_48", 1400.0, 5.0)))  # since the exporter started
    assert [e[3] for e in res.code_gauge_events(rows((g, "xid_total_48", 1430.0, 6.0)))] == [48]
    assert not res.code_gauge_events(rows((g, "xid_total_48", 1460.0, 0.0)))  # the exporter restarted
    assert ctx.rejects.total == 0
    bad = parse_scrape(b'DCGM_EXP_XID_ERRORS_COUNT{gpu="0",Hostname="h",xid="x"} 1\n', ctx, {}, "scrape", 1.0)
    assert bad.samples.empty and "its 'xid' label is no code: 'x'" in ctx.rejects.messages[-1]


def test_a_fault_code_gauge_reading_that_is_no_code_is_rejected_by_position_and_the_rest_goes_on():
    """Values no 32-bit fault code can have (1e30, a fraction) and a count series whose code label is no number:
    each reading is rejected naming the gauge, its part and its time, counted, and the good readings beside it still
    make their events (a 1e30 once overflowed the events' integer column and stopped the tick)."""
    mapper = SeriesMapper()
    res = EventResolver(mapper)
    res.code_gauge_events(rows(("n/gpu0", "xid_last", 0.0, 0.0)))
    out = res.code_gauge_events(rows(("n/gpu0", "xid_last", 30.0, 1e30), ("n/gpu1", "afid_code_0", 30.0, 22.7),
                                     ("n/gpu2", "afid_code_0", 30.0, 1e30), ("n/npu0", "npu_error_code_0", 30.0, 1e30),
                                     ("n/gpu3", "xid_count_99999999999999999999", 30.0, 1.0),
                                     ("n/gpu4", "afid_code_0", 30.0, 20.0)))
    assert [(e[1], e[2], e[3]) for e in out] == [("n/gpu4", "afid", 20)]
    assert mapper.rejects.total == 5
    assert "afid_code_0 of n/gpu1 at 30: not a fault code: 22.7 (a whole number from 1 to 4294967295)" in \
        mapper.rejects.messages
    assert [e[3] for e in res.code_gauge_events(rows(("n/gpu0", "xid_last", 60.0, 79.0)))] == [79]
