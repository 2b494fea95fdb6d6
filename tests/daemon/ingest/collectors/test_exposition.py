"""Scraping exporter endpoints: real HTTP servers on loopback, static and file_sd targets, failures per target."""

import json
import socket
import time

from daemon import metrics
from daemon.ingest.collectors.exposition import ExpositionCollector, instance_of, target_url
from daemon.ingest.formats.reader import ReadContext
from daemon.ingest.naming import SeriesMapper
from daemon.topology import Topology

DCGM = """# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",pci_bus_id="00000000:3B:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="sn01-b01"} 41
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",pci_bus_id="00000000:5D:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="sn01-b01"} 44
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",pci_bus_id="00000000:3B:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="sn01-b01"} 612.5
"""
NODE = """# TYPE node_infiniband_symbol_error_total counter
node_infiniband_symbol_error_total{device="mlx5_0",port="1"} 7
node_infiniband_state_id{device="mlx5_0",port="1"} 4
node_cpu_seconds_total{cpu="0",mode="idle"} 123
"""


def ctx(aliases: dict[str, list[str]] | None = None) -> ReadContext:
    nodes = [{"name": node, "aliases": addresses} for node, addresses in (aliases or {}).items()]
    topo = Topology.from_dict({"racks": [{"name": "r01", "nodes": nodes}]})
    return ReadContext(mapper=SeriesMapper(topology=topo))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_target_forms():
    assert target_url("10.0.0.1:9400") == "http://10.0.0.1:9400/metrics"
    assert target_url("https://x:1/m") == "https://x:1/m"
    assert instance_of("http://127.0.0.5:9100/metrics") == "127.0.0.5:9100"


def test_scrapes_dcgm_and_node_exporter_and_names_nodes_through_aliases(http_server):
    dcgm, dpages = http_server()
    node, npages = http_server()
    dpages.set("/metrics", DCGM)
    npages.set("/metrics", NODE)
    c = ExpositionCollector("exp", ctx({"sn01-b01": ["127.0.0.1"]}), targets=[dcgm, node])
    now = time.time()
    batch, outcome = c.collect(now)
    assert outcome.ok and outcome.errors == [] and outcome.targets_up == 2
    rows = {(e, m): v for e, m, v in zip(batch.samples["entity"], batch.samples["metric"], batch.samples["value"])}
    assert rows[("sn01-b01/gpu0", "gpu_temp_c")] == 41 and rows[("sn01-b01/gpu1", "gpu_temp_c")] == 44
    assert rows[("sn01-b01/gpu0", "power_w")] == 612.5
    # node_exporter names no host: the target's instance (127.0.0.1:port) goes through the alias table
    assert rows[("sn01-b01/mlx5_0:1", "symbol_error_total")] == 7
    assert (batch.samples["ts"] == now).all()
    assert metrics.SCRAPE_UP.labels("exp", dcgm)._value.get() == 1
    # a second scrape reuses the interned series
    batch2, _ = c.collect(now + 30)
    assert len(batch2.samples) == len(batch.samples)
    c.close()


def test_file_sd_targets_and_their_labels(http_server, tmp_path):
    addr, pages = http_server()
    pages.set("/metrics", NODE)
    sd = tmp_path / "targets.json"
    sd.write_text(json.dumps([{"targets": [addr], "labels": {"job": "node"}}]))
    c = ExpositionCollector("sd", ctx({"sn01-b02": ["127.0.0.1"]}), file_sd=[str(sd)])
    batch, outcome = c.collect(time.time())
    assert outcome.targets_total == 1 and set(batch.samples["entity"]) == {"sn01-b02/mlx5_0:1"}
    # a broken rewrite keeps the last good list and says so
    sd.write_text("[{not json")
    time.sleep(0.01)
    import os
    os.utime(sd, (time.time() + 5, time.time() + 5))
    batch, outcome = c.collect(time.time())
    assert outcome.targets_up == 1 and any("targets.json" in e for e in outcome.errors)
    c.close()


def test_a_dead_target_is_an_error_of_that_target_only(http_server):
    good, pages = http_server()
    pages.set("/metrics", DCGM)
    dead = f"127.0.0.1:{free_port()}"
    slow, spages = http_server()
    spages.set("/metrics", DCGM, delay=2.0)
    missing, mpages = http_server()  # answers 404
    c = ExpositionCollector("mix", ctx(), targets=[good, dead, slow, missing], timeout_s=0.5)
    started = time.perf_counter()
    batch, outcome = c.collect(time.time())
    assert time.perf_counter() - started < 2.0  # scraped concurrently, each within its timeout
    assert outcome.ok and outcome.targets_up == 1 and len(outcome.errors) == 3
    assert any(dead in e for e in outcome.errors) and any("HTTP 404" in e for e in outcome.errors)
    assert any(slow in e and "timed out" in e for e in outcome.errors)
    assert len(batch.samples) == 3
    assert c.probe() is None
    c.close()
    c = ExpositionCollector("dead", ctx(), targets=[dead], timeout_s=0.5)
    _, outcome = c.collect(time.time())
    assert not outcome.ok and "none of 1 targets" in c.probe()
    c.close()


def test_malformed_lines_are_rejected_with_url_and_line_and_the_rest_is_read(http_server):
    addr, pages = http_server()
    pages.set("/metrics", DCGM + 'DCGM_FI_DEV_GPU_TEMP{gpu="2",Hostname="sn01-b01"} hot\n'
              'DCGM_FI_DEV_GPU_TEMP{gpu="3",Hostname="sn01-b01" 40\n'
              'DCGM_FI_DEV_GPU_TEMP{gpu="4",Hostname="sn01-b01"} NaN\n'
              'DCGM_FI_DEV_GPU_TEMP{gpu="5",Hostname="sn01-b01"} 39 1700000000000\n')
    c0 = ctx()
    c = ExpositionCollector("bad", c0, targets=[addr])
    batch, outcome = c.collect(1700000030.0)
    ents = dict(zip(batch.samples["entity"], batch.samples["ts"]))
    assert {"sn01-b01/gpu0", "sn01-b01/gpu1", "sn01-b01/gpu5"} <= set(ents)
    assert ents["sn01-b01/gpu5"] == 1700000000.0  # its own timestamp, in milliseconds as the text format says
    assert "sn01-b01/gpu2" not in ents and "sn01-b01/gpu4" not in ents
    text = "\n".join(c0.rejects.messages)
    assert f"http://{addr}/metrics:8: value or timestamp is not a number" in text
    assert f"http://{addr}/metrics:10: value is NaN or infinite" in text
    assert "malformed series" in text
    c.close()


def test_an_unmapped_address_is_reported_not_invented_into_a_node(http_server):
    addr, pages = http_server()
    pages.set("/metrics", NODE)
    c0 = ctx()  # no alias for 127.0.0.1
    c = ExpositionCollector("noalias", c0, targets=[addr])
    batch, outcome = c.collect(time.time())
    assert outcome.ok and len(batch.samples) == 0
    assert any("no alias in the topology" in m for m in c0.rejects.messages)
    c.close()


def test_series_named_from_many_threads_at_once_keep_their_own_ids():
    """64 scrape threads name new series in one shared mapper; each id must point at its own series."""
    from concurrent.futures import ThreadPoolExecutor

    mapper = SeriesMapper()

    def name(i: int) -> tuple[int, str]:
        return mapper.canonical_series(f"n{i}/gpu0", "gpu_temp_c"), f"n{i}/gpu0"

    with ThreadPoolExecutor(64) as pool:
        named = list(pool.map(name, range(5000)))
    ent_of, _, _ = mapper.series_table()
    assert all(mapper.entities[ent_of[sid]] == entity for sid, entity in named)
    assert len({sid for sid, _ in named}) == 5000
