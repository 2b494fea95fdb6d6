"""The switch side: infiniband_exporter's per-guid counters joined to switch names, kept only for linked ports.

The exposition is the one infiniband_exporter's own switch collector test expects for its real perfquery
fixtures (treydock/infiniband_exporter collectors/switch_test.go; the perfquery outputs are in
fixtures/real/infiniband_exporter), trimmed to the families raswarden reads plus one it does not.
"""

import time

from daemon.ingest.collectors.infiniband import InfinibandExporterCollector, switch_names, with_switch_label
from daemon.ingest.formats.reader import ReadContext
from daemon.ingest.naming import SeriesMapper
from daemon.topology import Topology
from tests.conftest import REAL

EXPOSITION = """# HELP infiniband_switch_info Infiniband switch information
# TYPE infiniband_switch_info gauge
infiniband_switch_info{guid="0x506b4b03005c2740",lid="2052",switch="ib-i4l1s01"} 1
infiniband_switch_info{guid="0x7cfe9003009ce5b0",lid="1719",switch="ib-i1l1s01"} 1
# TYPE infiniband_switch_port_link_downed_total counter
infiniband_switch_port_link_downed_total{guid="0x506b4b03005c2740",port="1"} 1
infiniband_switch_port_link_downed_total{guid="0x7cfe9003009ce5b0",port="1"} 0
infiniband_switch_port_link_downed_total{guid="0x7cfe9003009ce5b0",port="2"} 0
# TYPE infiniband_switch_port_symbol_error_total counter
infiniband_switch_port_symbol_error_total{guid="0x506b4b03005c2740",port="1"} 0
infiniband_switch_port_symbol_error_total{guid="0x7cfe9003009ce5b0",port="1"} 0
infiniband_switch_port_symbol_error_total{guid="0x7cfe9003009ce5b0",port="2"} 0
infiniband_switch_port_symbol_error_total{guid="0xdeadbeef00000000",port="9"} 5
# TYPE infiniband_switch_port_transmit_wait_total counter
infiniband_switch_port_transmit_wait_total{guid="0x506b4b03005c2740",port="1"} 41864608
infiniband_switch_port_transmit_wait_total{guid="0x7cfe9003009ce5b0",port="1"} 22730501
# TYPE infiniband_switch_port_qp1_dropped_total counter
infiniband_switch_port_qp1_dropped_total{guid="0x7cfe9003009ce5b0",port="1"} 0
infiniband_switch_uplink_info{guid="0x7cfe9003009ce5b0",port="10",switch="ib-i1l1s01",uplink="o0001 HCA-1",uplink_guid="0x7cfe9003003b4bde",uplink_lid="134",uplink_port="1",uplink_type="CA"} 1
"""

TOPOLOGY = {"racks": [{"name": "r01", "nodes": [
    {"name": "o0001", "ports": [{"device": "mlx5_0", "port": 1, "switchport": "ib-i1l1s01/1"}]},
    {"name": "p0001", "ports": [{"device": "mlx5_0", "port": 1, "switchport": "ib-i4l1s01/1"}]},
]}]}


def test_the_shared_perfquery_fixture_matches_these_counters():
    text = (REAL / "infiniband_exporter" / "perfquery" / "0x7cfe9003009ce5b0.out").read_text()
    assert "PortXmitWait:....................22730501" in text


def test_switch_names_are_joined_by_guid():
    body = EXPOSITION.encode()
    assert switch_names(body)[b"0x7cfe9003009ce5b0"] == b"ib-i1l1s01"
    out = with_switch_label(body).decode()
    assert 'infiniband_switch_port_symbol_error_total{switch="ib-i1l1s01",guid="0x7cfe9003009ce5b0",port="1"} 0' in out
    assert 'switch="0xdeadbeef00000000",guid="0xdeadbeef00000000"' in out  # no info line: named by its guid


def test_collector_keeps_the_switch_ports_the_topology_links_to_a_node_port(http_server):
    addr, pages = http_server()
    pages.set("/metrics", EXPOSITION)
    mapper = SeriesMapper(topology=Topology.from_dict(TOPOLOGY))
    c = InfinibandExporterCollector("ib", ReadContext(mapper=mapper), targets=[addr])
    batch, outcome = c.collect(time.time())
    assert outcome.ok
    rows = {(e, m): v for e, m, v in zip(batch.samples["entity"], batch.samples["metric"], batch.samples["value"])}
    assert rows == {
        ("ib-i4l1s01/1", "link_downed_total"): 1, ("ib-i1l1s01/1", "link_downed_total"): 0,
        ("ib-i4l1s01/1", "symbol_error_total"): 0, ("ib-i1l1s01/1", "symbol_error_total"): 0,
        ("ib-i4l1s01/1", "xmit_wait_total"): 41864608, ("ib-i1l1s01/1", "xmit_wait_total"): 22730501,
    }
    # port 2 and the unnamed switch are links raswarden cannot attribute to a node: counted, not judged
    assert mapper.unlinked_switchports["ib-i1l1s01/2"] >= 1 and mapper.unlinked_switchports["0xdeadbeef00000000/9"]
    c.close()
