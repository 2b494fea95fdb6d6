"""A simulated trace through the real readers and pipeline; output parses with prometheus_client and promtool."""

import io
import json
import shutil
import subprocess

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from daemon.cli import main
from daemon.replay import replay
from detectors.schema import node_of
from tests.conftest import require
from tests.lab.sim.conftest import SCENARIOS


def test_mini_scenario_replays_hard_faults_failed_and_no_confounder_flags(tmp_path, capsys):
    out = tmp_path / "mini"
    assert main(["simulate", str(SCENARIOS / "mini.yaml"), "--out", str(out)]) == 0
    assert "simulated mini (seed 5): 32 accelerators" in capsys.readouterr().out
    buf = io.StringIO()
    result = replay([out], findings_out=buf)
    assert result.rejects.total == 0
    findings = [json.loads(x) for x in buf.getvalue().splitlines()]
    labels = [json.loads(x) for x in (out / "labels.jsonl").read_text().splitlines()]
    hard = [lb for lb in labels if not lb["fault"].startswith("benign_") and lb["failure"] is not None]
    for lb in hard:
        failed = [f for f in findings if f["entity"] == lb["entity"] and f["state"] == "failed"]
        assert failed and failed[0]["ts"] <= lb["failure"] + 30, lb
    faulty = {lb["entity"] for lb in labels if not lb["fault"].startswith("benign_")}
    allowed = faulty | {node_of(e) for e in faulty}
    flags = {f["entity"] for f in findings if f["state"] in ("subhealthy", "failed")}
    assert flags <= allowed, flags - allowed


def test_output_parses_with_prometheus_client_and_promtool(tmp_path, library):
    from lab.sim.writer import simulate_to
    from tests.lab.sim.conftest import make

    sim = make(library, [{"entity": "sn01-b01/gpu1", "fault": "gpu_off_bus", "template": "b", "onset": "10m",
                          "failure": "50m"}], accelerators=8, duration="1h")
    simulate_to(sim, tmp_path / "t")
    for name in ("dcgm-exporter.om", "node-exporter.om"):
        text = (tmp_path / "t" / name).read_text()
        families = list(text_string_to_metric_families(text))
        names = {s.name for f in families for s in f.samples}
        assert names, name
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" in {s.name for f in text_string_to_metric_families(
        (tmp_path / "t" / "dcgm-exporter.om").read_text()) for s in f.samples}
    promtool = shutil.which("promtool")
    require(promtool is not None, "promtool is not installed (Debian package prometheus; scripts/test.sh installs it)")
    for name in ("dcgm-exporter.om", "node-exporter.om"):
        r = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "t" / name),
                            str(tmp_path / f"tsdb-{name}")], capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr[-2000:]
