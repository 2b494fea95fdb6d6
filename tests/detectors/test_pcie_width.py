"""A GPU's PCIe link narrower than it ran, or than its node's other GPUs: a watch, never more; a node built with
narrower slots, a GPU off the bus and the static baseline say nothing."""

from __future__ import annotations

import pandas as pd

from detectors.pcie_width import LinkWidths
from detectors.rules import RuleDetector
from detectors.schema import State
from tests.detectors.test_rules import run


def widths(node: str, current: list[float], most: float | None = 16.0) -> pd.DataFrame:
    rows = [(f"{node}/gpu{i}", "pcie_link_width", w) for i, w in enumerate(current)]
    rows += [(f"{node}/gpu{i}", "pcie_link_width_max", most) for i in range(len(current)) if most is not None]
    frame = pd.DataFrame(rows, columns=["entity", "metric", "last"])
    frame["max"] = frame["last"]
    return frame


def watched(evidence) -> dict[str, str]:
    return {e.entity: e.reasons[0] for e in evidence if e.level == State.SUSPECT and e.category == "gpu_bus"}


def test_a_gpu_narrower_than_its_node_is_watched():
    got = watched(LinkWidths().update(0.0, widths("n1", [16, 16, 8, 16, 16, 16, 16, 16])))
    assert list(got) == ["n1/gpu2"]
    assert got["n1/gpu2"].startswith("its PCIe link runs x8 of its x16 where 7 of its node's 8 GPUs run x16")


def test_a_node_built_narrow_and_a_gpu_off_the_bus_say_nothing():
    assert LinkWidths().update(0.0, widths("n1", [8] * 8)) == []  # slots wired x8: every GPU alike
    assert LinkWidths().update(0.0, widths("n1", [16, 0, 16, 16])) == []  # 0: no reading
    assert LinkWidths().update(0.0, widths("n1", [16, 8])) == []  # two GPUs: no majority to say which is usual
    assert LinkWidths().update(0.0, widths("n1", [16, 16, 8, 16], most=8)) == []  # at its own maximum


def test_a_link_that_trained_down_while_watched_is_watched_until_forgotten():
    """Judged every five minutes (widths do not move from scrape to scrape): between judgements, nothing new."""
    w = LinkWidths()
    assert w.update(0.0, widths("n1", [16])) == []
    assert w.update(30.0, widths("n1", [8])) is None  # not due
    got = watched(w.update(300.0, widths("n1", [8])))
    assert got["n1/gpu0"].startswith("its PCIe link runs x8 where it ran x16 while watched")
    assert watched(w.update(600.0, widths("n1", [8])))  # for as long as it runs so
    w.forget("n1")  # repaired: its link may be another now
    assert w.update(900.0, widths("n1", [8])) == []


def test_the_rules_carry_it_and_the_baseline_does_not():
    g = widths("n1", [16, 16, 4, 16])
    assert watched(run(RuleDetector().fit(), 30, gauges=g)) == {
        "n1/gpu2": "its PCIe link runs x4 of its x16 where 3 of its node's 4 GPUs run x16: a lane lost (reseat the "
                   "GPU or its riser), unless its slot is wired so; a watch"}
    assert run(RuleDetector(baseline=True).fit(), 30, gauges=g) == []
    det = RuleDetector().fit()
    run(det, 30, gauges=g)
    assert watched(run(det, 60))  # held between judgements, with no widths in the tick
    assert not watched(run(det, 400, gauges=widths("n1", [16, 16, 16, 16])))  # reseated: judged again, cleared


def test_amd_smi_gives_the_width_too():
    """amd-smi metric --json's ``pcie.width`` (the fixture's capture envelope, ROCm 7's form) is the reading."""
    from daemon.ingest.formats import ReadContext, SmiReader
    from daemon.ingest.naming import SeriesMapper
    from tests.conftest import ROOT
    from tests.daemon.ingest.formats.conftest import read_all

    ctx = ReadContext(mapper=SeriesMapper())
    s = read_all(SmiReader(), ROOT / "fixtures" / "exporters" / "smi-snapshots.jsonl", ctx).samples
    width = s[s["metric"] == "pcie_link_width"]
    assert len(width) > 0 and set(width["value"]) == {16.0}
