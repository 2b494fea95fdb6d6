"""The reject log: counted by kind of reason, so bad input cannot grow the metric or the log without bound."""

from daemon import metrics
from daemon.ingest.rejects import RejectLog, reason_kind


def test_a_reason_is_counted_under_its_kind_without_its_particulars():
    assert reason_kind("bad row: time data 'x' does not match format") == "bad row"
    assert reason_kind("xid code 99999999999 is out of range") == "xid code N is out of range"
    assert reason_kind("host 'a.b' is an address with no alias in the topology") == \
        "host … is an address with no alias in the topology"
    assert reason_kind("binary field cut short or damaged (its length does not frame it): skipped") == \
        "binary field cut short or damaged"


def test_ten_thousand_different_bad_values_are_one_series_and_five_log_lines(caplog):
    log = RejectLog()
    before = metrics.INPUT_REJECTED.labels("fuzz", "not a number")._value.get()
    for i in range(10_000):
        log.reject("fuzz", f"f.csv:{i}", f"not a number: '{i}x'")
    assert metrics.INPUT_REJECTED.labels("fuzz", "not a number")._value.get() == before + 10_000
    assert not [m for m in metrics.REGISTRY.collect() for s in m.samples
                if s.labels.get("source") == "fuzz" and s.labels.get("reason") != "not a number"]
    assert len(log.messages) == 5 and log.messages[0] == "f.csv:0: not a number: '0x'"
    assert log.counts == {("fuzz", "not a number"): 10_000}
