"""ipmi_exporter's series (a node's BMC, daemon/ingest/names/ipmi_exporter.csv): sensor states per sensor, the chassis'
faults per node, and NaN as the exporter's "no reading" rather than bad input."""

from daemon.ingest.formats import ReadContext
from daemon.ingest.formats.openmetrics import parse_scrape
from tests.conftest import REAL


def _read(text: str, **labels: str):
    ctx = ReadContext(target_labels={"instance": "10.0.9.7:9290", **labels})
    return parse_scrape(text.encode(), ctx, {}, "scrape", 1.8e9).samples, ctx


def test_real_quoted_sensor_states_are_read_per_sensor():
    """Lines quoted in prometheus-community/ipmi_exporter issues 139 (a server's generic sensors: power supply and
    drive slot states) and 302 (a Dell's chassis, current and fan metrics)."""
    text = (REAL / "quoted" / "ipmi-exporter-139.prom").read_text() + \
        (REAL / "quoted" / "ipmi-exporter-302.prom").read_text()
    s, ctx = _read(text, node="gpu-node-3")
    got = dict(zip(zip(s["entity"].astype(str), s["metric"].astype(str)), s["value"]))
    assert ctx.rejects.total == 0
    assert got[("gpu-node-3/bmc-16-PSU1_PF_Failure", "bmc_power_supply_state")] == 0
    assert got[("gpu-node-3/bmc-17-PSU1_IN_Failure", "bmc_power_supply_state")] == 0
    assert got[("gpu-node-3/bmc-190-Drive_17", "bmc_sensor_state")] == 0
    assert got[("gpu-node-3/bmc-92-Current_2", "bmc_current_state")] == 0
    assert got[("gpu-node-3", "bmc_drive_fault")] == 0  # the exporter's 1 is "no fault"
    s, _ = _read('ipmi_up{collector="ipmi"} 0\nipmi_up{collector="bmc"} 1\n', node="gpu-node-3")
    assert list(zip(s["entity"].astype(str), s["metric"].astype(str), s["value"])) == [
        ("gpu-node-3", "bmc_unreachable", 1.0)]  # (the sensors' collector alone: the others say nothing of them)
    # readings and the chassis power state are not read: the states carry the BMC's own thresholds
    assert not any(m.startswith("ipmi_") for _, m in got) and len(got) == 20 + 2 + 1


def test_nan_is_the_exporters_na_counted_not_rejected():
    """ipmi_exporter writes NaN for a sensor FreeIPMI reads as N/A (every discrete sensor's value, many states): no
    bad input, counted as not read; a NaN of another exporter's metric is still rejected with its line."""
    text = ('ipmi_sensor_state{id="2215",name="VBAT",type="Battery"} NaN\n'
            'ipmi_sensor_value{id="2215",name="VBAT",type="Battery"} NaN\n'
            'ipmi_temperature_state{id="18",name="Inlet Temp"} NaN\n'
            'ipmi_temperature_state{id="19",name="Exhaust Temp"} 2\n'
            'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="gpu-node-3"} NaN\n')
    s, ctx = _read(text, node="gpu-node-3")
    assert list(zip(s["entity"].astype(str), s["metric"].astype(str), s["value"])) == [
        ("gpu-node-3/bmc-19-Exhaust_Temp", "bmc_temperature_state", 2.0)]
    assert ctx.mapper.values_not_read == {"the exporter's N/A (no reading)": 2}
    (message,) = ctx.rejects.messages
    assert "scrape:5" in message and "NaN" in message


def test_a_bmc_address_names_its_node_through_the_topologys_aliases():
    from daemon.ingest.naming import SeriesMapper
    from daemon.topology import Topology

    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [{"name": "gpu-node-3"}]}],
                               "aliases": {"10.0.9.7": "gpu-node-3"}})
    m = SeriesMapper(topology=topo)
    sid = m.series_id("ipmi_fan_speed_state", {"id": "12", "name": "Fan1A", "instance": "10.0.9.7"}, "f:1",
                      "openmetrics")
    ent, met, _ = m.series_table()
    assert (m.entities[ent[sid]], m.metrics[met[sid]]) == ("gpu-node-3/bmc-12-Fan1A", "bmc_fan_state")
