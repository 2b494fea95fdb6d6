"""A node's BMC end to end: OpenIPMI's ipmi_sim as the board's BMC (lab/bmc.py), the real FreeIPMI and
prometheus-community/ipmi_exporter built from its Go module reading it (scripts/bmc-lab.sh), raswarden scraping the
exporter per BMC as Prometheus does (/ipmi?target=...) and judging what the BMC says of its sensors."""

from __future__ import annotations

import json

from daemon.ingest.collectors.exposition import ExpositionCollector
from daemon.ingest.formats.reader import ReadContext
from daemon.ingest.naming import SeriesMapper
from daemon.judgement.pipeline import Pipeline
from daemon.topology import Topology
from lab.bmc import BmcConsole

def test_a_failed_fan_and_power_supply_the_bmc_reports_flag_their_node(bmc_lab, tmp_path):
    env, lab_dir = bmc_lab
    bmc = f"127.0.0.1:{env['BMC_LAB_PORT']}"
    target = f"http://127.0.0.1:{env['BMC_LAB_EXPORTER']}/ipmi?target={bmc}"
    sd = tmp_path / "bmc.json"  # as an operator lists BMCs for Prometheus: the node each one belongs to as a label
    sd.write_text(json.dumps([{"targets": [target], "labels": {"node": "gpu-node-1", "job": "ipmi"}}]))
    topology = Topology.from_dict({"racks": [{"name": "r1", "nodes": [{"name": "gpu-node-1"}]}]})
    ctx = ReadContext(mapper=SeriesMapper(topology=topology))
    collector = ExpositionCollector("ipmi", ctx, file_sd=[str(sd)], timeout_s=30.0)
    pipeline = Pipeline(ctx.mapper)
    console = BmcConsole(int(env["BMC_LAB_CONSOLE"]))

    def tick(now: float) -> dict[str, str]:
        batch, outcome = collector.collect(now)
        assert outcome.targets_up == 1, (outcome.errors, (lab_dir / "ipmi_exporter.log").read_text()[-2000:])
        pipeline.tick(now, batch)
        sensors = ("2-FAN1", "4-PSU1_Status", "1-Inlet_Temp", "3-12V")  # (their SDR records, lab/bmc.py)
        entities = ["gpu-node-1", *(f"gpu-node-1/bmc-{sensor}" for sensor in sensors)]
        return {e: pipeline.health.state_of(e).name.lower() for e in entities}

    try:
        for k in range(3):  # a healthy board: every sensor nominal
            states = tick(1.8e9 + 60 * k)
        assert set(states.values()) == {"healthy"}, states
        assert ctx.rejects.total == 0

        console.set_reading(2, 3)  # FAN1 at 300 RPM, under its lower critical threshold (500)
        console.set_state(4, 1)  # PSU1: "Power Supply Failure detected"
        for k in range(3, 6):
            states = tick(1.8e9 + 60 * k)
        assert states["gpu-node-1/bmc-2-FAN1"] == states["gpu-node-1/bmc-4-PSU1_Status"] == "subhealthy"
        assert states["gpu-node-1/bmc-1-Inlet_Temp"] == "healthy" and states["gpu-node-1/bmc-3-12V"] == "healthy"
        # the node shows it (its roll-up) and each part has an incident, alerted; none is the node's own, so no
        # playbook drains it for what its BMC says alone (docs/rules.md, "A node's BMC")
        assert pipeline.reported["gpu-node-1"].label == "subhealthy"
        opened = {(i.entity, i.kind, i.category) for i in pipeline.incidents.open.values()}
        assert opened == {("gpu-node-1/bmc-2-FAN1", "component", "cooling"),
                          ("gpu-node-1/bmc-4-PSU1_Status", "component", "host")}
        assert pipeline.health.state_of("gpu-node-1").name == "HEALTHY"

        console.log_event(0x0C, 0x01)  # the BIOS logs an uncorrectable memory error in the BMC's SEL
        tick(1.8e9 + 60 * 6)
        tick(1.8e9 + 60 * 7)
        node = pipeline.health.entities["gpu-node-1"]
        assert node.state.name == "SUSPECT" and "1 critical event(s) in its SEL" in node.top.reasons[0]
    finally:
        collector.close()
