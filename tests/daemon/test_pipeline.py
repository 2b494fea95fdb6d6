"""The tick's own logic: a link judged from both ends."""

import pandas as pd

from daemon.batch import Batch
from daemon.naming import SeriesMapper
from daemon.pipeline import Pipeline, PipelineConfig
from daemon.topology import Topology
from detectors.schema import empty_events

TOPOLOGY = {"racks": [{"name": "r01", "nodes": [
    {"name": f"n{i}", "ports": [{"device": "mlx5_0", "port": 1, "switchport": f"leaf01/{i}"}]} for i in range(1, 4)]}]}


def batch(ts: float, rows: list[tuple[str, str, float]]) -> Batch:
    cats_e = sorted({r[0] for r in rows})
    cats_m = sorted({r[1] for r in rows})
    return Batch(samples=pd.DataFrame({
        "ts": [ts] * len(rows),
        "entity": pd.Categorical([r[0] for r in rows], categories=cats_e),
        "metric": pd.Categorical([r[1] for r in rows], categories=cats_m),
        "value": [r[2] for r in rows]}), events=empty_events())


def test_errors_seen_only_at_the_switch_end_flag_the_node_port():
    p = Pipeline(SeriesMapper(topology=Topology.from_dict(TOPOLOGY)))
    flagged = []
    for k in range(60):  # 30 min; the switch end of n2's cable counts 600 symbol errors an hour
        rows = []
        for i in range(1, 4):
            rows += [(f"n{i}/mlx5_0:1", "symbol_error_total", 0.0), (f"n{i}/mlx5_0:1", "port_state", 4.0),
                     (f"leaf01/{i}", "symbol_error_total", 5.0 * k if i == 2 else 0.0)]
        flagged += [f for f in p.tick(30.0 * (k + 1), batch(30.0 * (k + 1), rows)).findings
                    if f.state in ("subhealthy", "failed")]
    ports = [f for f in flagged if f.kind == "port"]
    assert ports and {f.entity for f in ports} == {"n2/mlx5_0:1"}
    assert ports[0].reasons[0].startswith("switch end leaf01/2: ")
    assert "leaf01" not in p.node_seen and not any(f.entity.startswith("leaf01") for f in flagged)


def test_rules_only_runs_the_rules_and_nothing_learned():
    from detectors.rules import RuleDetector

    p = Pipeline(SeriesMapper(topology=Topology.from_dict(TOPOLOGY)), PipelineConfig(rules_only=True))
    assert [type(d) for d in p.detectors] == [RuleDetector] and p.features is None
    assert not p.rules.baseline
    p.use_model(None)
    assert [type(d) for d in p.detectors] == [RuleDetector]
    assert len(Pipeline(SeriesMapper(topology=Topology.from_dict(TOPOLOGY))).detectors) > 1
