"""raswarden evaluate's per-vendor split on a small mixed-vendor trace."""

from daemon.cli import main
from lab.evaluate import evaluate_trace_by_vendor
from lab.sim.simulator import Simulator
from lab.sim.faults import load_library
from lab.sim.scenario import Scenario
from lab.sim.writer import simulate_to
from tests.detectors.sim_helpers import LIBRARY


def test_each_vendors_faults_flags_and_node_days_are_scored_apart(tmp_path, capsys):
    sc = Scenario.from_dict({
        "name": "m", "seed": 8, "topology": {"preset": "scalex640-mixed", "accelerators": 72}, "duration": "3h",
        "resolution": "30s", "jobs": {"nodes_per_job": [3, 3], "duration": ["12h", "12h"], "gap": ["1m", "1m"]},
        "faults": [{"entity": "random", "vendor": v, "fault": "hbm_degradation", "template": "a", "onset": "20m",
                    "failure": "2h30m"} for v in ("nvidia", "amd", "ascend")]
        + [{"entity": "random", "vendor": "amd", "fault": "gpu_off_bus", "template": "a", "onset": "30m",
            "failure": "2h"}]})
    out = tmp_path / "t"
    simulate_to(Simulator(sc, load_library(LIBRARY)), out, fmt="parquet")
    ev = evaluate_trace_by_vendor(out, baseline=False)
    assert set(ev) == {"all", "nvidia", "amd", "ascend"}
    faults = {v: e.all_faults.faults for v, e in ev.items()}
    assert faults == {"all": 4, "nvidia": 1, "amd": 2, "ascend": 1}
    assert abs(sum(ev[v].node_days for v in ("nvidia", "amd", "ascend")) - ev["all"].node_days) < 1e-6
    assert ev["amd"].all_faults.recall == 1.0
    assert main(["evaluate", str(out)]) == 0
    assert "per vendor (raswarden / baseline)" in capsys.readouterr().out
