"""A node's BMC (ipmi_exporter's sensor states and chassis faults) judged by the rules: a critical fan, power supply,
voltage or current is a part to repair, a critical temperature or fan the node's cooling (never a drain by itself),
a warning or a generic sensor a watch, nominal nothing; the static baseline does not read them."""

import pandas as pd

from detectors.rules import RuleDetector
from detectors.schema import State
from detectors.xid_catalog import vendor_repair
from tests.detectors.test_rules import run


def _gauges(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    return pd.DataFrame({"entity": [r[0] for r in rows], "metric": [r[1] for r in rows],
                         "last": [r[2] for r in rows], "max": [r[2] for r in rows]})


def test_bmc_states():
    g = _gauges([("n/bmc-1-Inlet_Temp", "bmc_temperature_state", 2.0), ("n/bmc-2-FAN1", "bmc_fan_state", 3.0),
                 ("n/bmc-4-PSU1_Status", "bmc_power_supply_state", 2.0), ("n/bmc-3-12V", "bmc_voltage_state", 1.0),
                 ("n/bmc-91-Current_1", "bmc_current_state", 0.0), ("n/bmc-90-Pwr_Consumption", "bmc_power_state", 2.0),
                 ("n/bmc-146-NIC1-1_Link_Down", "bmc_sensor_state", 1.0),
                 ("n/bmc-123-Sec._Log_Full", "bmc_sensor_state", 2.0),
                 ("m", "bmc_cooling_fault", 1.0), ("k", "bmc_cooling_fault", 0.0), ("m", "bmc_drive_fault", 1.0),
                 ("j", "bmc_unreachable", 1.0), ("k", "bmc_unreachable", 0.0)])
    ev = run(RuleDetector().fit(), 30, gauges=g)
    got = {(e.entity, e.category): (e.level, vendor_repair(e.reasons)) for e in ev}
    assert got == {
        ("n/bmc-1-Inlet_Temp", "cooling"): (State.SUBHEALTHY, "inspect"),
        ("n/bmc-2-FAN1", "cooling"): (State.SUBHEALTHY, "replace"),
        ("n/bmc-4-PSU1_Status", "host"): (State.SUBHEALTHY, "replace"),
        ("n/bmc-3-12V", "host"): (State.SUSPECT, None),
        ("n/bmc-90-Pwr_Consumption", "host"): (State.SUSPECT, None),
        ("n/bmc-123-Sec._Log_Full", "host"): (State.SUSPECT, None),
        ("m", "cooling"): (State.SUBHEALTHY, "inspect"),
        ("m", "host"): (State.SUSPECT, None),
        ("j", "telemetry"): (State.SUSPECT, None)}
    reasons = {e.entity: e.reasons[0] for e in ev}
    assert reasons["j"] == "BMC: it does not answer its exporter (ipmi_up 0): its sensors are not read"
    assert reasons["n/bmc-1-Inlet_Temp"].startswith("BMC: temperature sensor 'Inlet Temp' critical")
    assert "'FAN1' non-recoverable" in reasons["n/bmc-2-FAN1"]
    # a sensor name with a dash keeps it (the record's number is cut at the first)
    assert "'NIC1-1 Link Down'" in run(RuleDetector().fit(), 30, gauges=_gauges([
        ("n/bmc-146-NIC1-1_Link_Down", "bmc_sensor_state", 2.0)]))[0].reasons[0]
    assert run(RuleDetector(baseline=True).fit(), 30, gauges=g) == []


def test_critical_entries_in_the_bmcs_event_log_are_a_watch_on_the_node():
    inc = pd.DataFrame({"entity": ["n", "m"], "metric": ["bmc_sel_critical_total"] * 2, "increase": [2.0, 0.0],
                        "resets": [0, 0]})
    ev = run(RuleDetector().fit(), 30, inc=inc)
    assert [(e.entity, e.level, e.category) for e in ev] == [("n", State.SUSPECT, "host")]
    assert "2 critical event(s) in its SEL" in ev[0].reasons[0]
    assert run(RuleDetector(baseline=True).fit(), 30, inc=inc) == []
