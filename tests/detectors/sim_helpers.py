"""Run a small simulated scenario through the real pipeline and collect findings (for detector tests)."""

import io
import json
from pathlib import Path

from daemon.replay import replay
from lab.sim.simulator import Simulator
from lab.sim.faults import load_library
from lab.sim.scenario import Scenario
from lab.sim.writer import simulate_to

LIBRARY = Path(__file__).resolve().parents[2] / "fixtures" / "faults"


def simulate_and_replay(tmp_path: Path, faults: list[dict], accelerators: int = 32, duration: str = "4h",
                        partial_share: float = 0.0, seed: int = 2) -> tuple[list[dict], list[dict]]:
    sc = Scenario.from_dict({"name": "t", "seed": seed, "topology": {"accelerators": accelerators},
                             "duration": duration, "resolution": "30s", "profile": "full",
                             "jobs": {"nodes_per_job": [2, 2], "duration": ["12h", "12h"], "gap": ["1m", "1m"],
                                      "partial_share": partial_share},
                             "faults": faults})
    out = tmp_path / "trace"
    simulate_to(Simulator(sc, load_library(LIBRARY)), out)
    buf = io.StringIO()
    replay([out], findings_out=buf)
    findings = [json.loads(x) for x in buf.getvalue().splitlines()]
    labels = [json.loads(x) for x in (out / "labels.jsonl").read_text().splitlines()]
    return findings, labels


def first_flag(findings: list[dict], entity: str, detector: str | None = None) -> dict | None:
    for f in findings:
        if f["entity"] == entity and f["state"] in ("subhealthy", "failed") and (detector is None
                                                                                 or f["detector"] == detector):
            return f
    return None
