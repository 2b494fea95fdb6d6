"""Fleet reliability figures from repair orders with known answers, and the HTML report in a real headless
Chromium."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from daemon.cli import main
from daemon.operations.reliability import figures
from daemon.store import RepairOrderRow, Store
from tests.conftest import require

DAY = 86400.0
T0 = 1_772_409_600.0  # 2026-03-02


def order(part: str, severity: str, opened: float, hours: float | None, rack: str = "r01", kind: str = "accelerator",
          model: str = "NVIDIA H100 80GB HBM3", caught: bool = False) -> RepairOrderRow:
    history = [{"ts": opened, "from": None, "to": "open", "by": "raswarden"}]
    if caught:
        history += [{"ts": opened + 60, "from": "repaired", "to": "validating", "by": "raswarden"},
                    {"ts": opened + 120, "from": "validating", "to": "open", "by": "raswarden"}]
    closed = None if hours is None else opened + hours * 3600
    return RepairOrderRow(incident_id=f"inc-{part}-{opened}", part=part, node=part.split("/")[0], rack=rack,
                          kind=kind, category="gpu_memory", severity=severity, expected="rma", state=(
                              "closed" if closed else "open"), priority=0, opened_at=opened, updated_at=opened,
                          closed_at=closed, where=[["rack", rack], ["model", model]] if kind == "accelerator" else
                          [["rack", rack]], history=history)


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'rw.db'}")
    s.upsert_entities([{"id": f"n{n}/gpu{g}", "kind": "accelerator", "node": f"n{n}", "rack": "r01",
                        "first_seen": 0.0, "attrs": {}} for n in range(2) for g in range(8)])
    s.upsert_entities([{"id": f"n{n}/mlx5_{p}:1", "kind": "port", "node": f"n{n}", "rack": "r01",
                        "first_seen": 0.0, "attrs": {}} for n in range(2) for p in range(4)])
    with s.session() as ses:
        for row in (order("n0/gpu3", "subhealthy", T0 + 1 * DAY, 4.0),
                    order("n0/gpu3", "subhealthy", T0 + 5 * DAY, 6.0),  # the same GPU again: a repeat offender
                    order("n1/gpu1", "failed", T0 + 2 * DAY, 10.0, rack="r02", caught=True),
                    order("n1/mlx5_2:1", "subhealthy", T0 + 3 * DAY, None, kind="port"),
                    order("n1/gpu0", "failed", T0 - 40 * DAY, 2.0)):  # before the period
            ses.add(row)
        ses.commit()
    yield s
    s.close()


def test_the_figures_have_their_known_answers(store):
    rel = figures(store, T0, T0 + 10 * DAY)
    t = rel.total
    assert (t.orders, t.before_failure, t.after_failure, t.closed, t.validation_failures) == (4, 3, 1, 3, 1)
    assert t.before_share == pytest.approx(0.75) and t.mttr_h == pytest.approx(6.0)  # median of 4, 6, 10 h
    acc = rel.by_class["accelerator"]
    assert acc.orders == 3 and rel.parts == {"accelerator": 16, "port": 8}
    assert rel.mtbf_h("accelerator") == pytest.approx(16 * 240 / 3)  # part-hours per order
    assert rel.repeat_offenders == [("n0/gpu3", 2)]
    assert rel.by_model["nvidia NVIDIA H100 80GB HBM3"].orders == 3 and rel.by_slot["gpu3"].orders == 2
    assert rel.by_rack["r02"].after_failure == 1
    assert [d for d, _, _ in rel.daily] == ["2026-03-03", "2026-03-04", "2026-03-05", "2026-03-07"]
    assert [r.part for r in rel.queue] == ["n1/mlx5_2:1"]


def test_the_report_renders_in_chromium(store, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", "--since", "3650d", "--out", str(out), "--db", f"sqlite:///{tmp_path / 'rw.db'}"]) == 0
    said = capsys.readouterr().out
    assert "5 repair orders (3 before failure, 2 after: 60 % before)" in said and "1 caught by validation" in said
    page = out.read_text()
    assert page.count("<svg") == 4 and "Repeat offenders" in page and "n0/gpu3" in page
    assert main(["report", "--since", "soon", "--out", str(out), "--db", f"sqlite:///{tmp_path / 'rw.db'}"]) == 2
    chromium = shutil.which("chromium")
    require(chromium is not None, "chromium is not installed (Debian package; scripts/test.sh installs it)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1200,1600"]
    shot = tmp_path / "report.png"
    subprocess.run([chromium, *flags, f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=120)
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    dom = subprocess.run([chromium, *flags, "--dump-dom", out.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert "Fleet reliability" in dom and "2026-03-03: 1 before failure, 0 after" in dom
    assert "Orders by slot" in dom and "gpu3: 2" in dom
