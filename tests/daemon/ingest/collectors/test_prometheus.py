"""PromQL instant queries against a real Prometheus that scrapes the live simulator; a server that answers
garbage and one that is gone are errors of the collection, never a crash."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from daemon.ingest.collectors.prometheus import PrometheusCollector, default_queries
from daemon.ingest.formats.reader import ReadContext
from daemon.ingest.naming import SeriesMapper, load_rules
from daemon.topology import Topology
from tests.conftest import require
from tests.daemon.service.conftest import Live, free_port


def test_default_queries_cover_every_name_table():
    queries = default_queries(load_rules())
    assert any("DCGM_FI_DEV_GPU_TEMP" in q for q in queries)
    assert any("node_infiniband_symbol_error_total" in q for q in queries)
    assert any("infiniband_switch_port_symbol_error_total" in q for q in queries)


@pytest.fixture
def prometheus(tmp_path):
    binary = shutil.which("prometheus")
    require(binary is not None, "prometheus is not installed (Debian package; scripts/test.sh installs it)")
    live = Live(tmp_path)
    port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 900ms}\n"
        "scrape_configs:\n"
        "  - job_name: sim\n"
        f"    file_sd_configs: [{{files: ['{live.sim_dir / 'prometheus-targets.json'}'], refresh_interval: 1s}}]\n")
    proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield live, f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)
    live.stop()


def test_instant_queries_name_entities_and_skip_unchanged_samples(prometheus):
    live, url = prometheus
    mapper = SeriesMapper(topology=Topology.load(live.sim_dir / "topology.yaml"))
    c = PrometheusCollector("prom", ReadContext(mapper=mapper), url=url)
    deadline = time.monotonic() + 60
    while True:
        batch, outcome = c.collect(time.time())
        ents = set(batch.samples["entity"]) if len(batch.samples) else set()
        if {"sn01-b01/gpu0", "sn01-b02/mlx5_0:1"} <= ents:
            break
        assert time.monotonic() < deadline, (outcome, sorted(ents)[:5])
        time.sleep(1)
    assert outcome.ok and outcome.targets_up == outcome.targets_total
    temps = batch.samples[batch.samples["metric"] == "gpu_temp_c"]
    assert 20 < temps["value"].min() and temps["value"].max() < 100
    assert (batch.samples["ts"] <= time.time()).all()  # Prometheus' own sample times
    again, _ = c.collect(time.time())
    first = {(e, m): t for e, m, t in zip(batch.samples["entity"], batch.samples["metric"], batch.samples["ts"])}
    for e, m, t in zip(again.samples["entity"], again.samples["metric"], again.samples["ts"]):
        assert t > first.get((e, m), 0), "a sample was read twice"  # only series Prometheus scraped anew
    assert c.probe() is None
    # a shard's instance asks for its own nodes only: here sn01-b01's exporters, by their address
    matcher = 'instance=~"127[.]1[.]0[.]1:.*"'
    mine = PrometheusCollector("shard", ReadContext(mapper=mapper), url=url, matchers=matcher)
    assert all(q.endswith(f", {matcher}}}") for q in mine.queries)
    batch, outcome = mine.collect(time.time())
    assert outcome.ok and {e.split("/", 1)[0] for e in batch.samples["entity"]} == {"sn01-b01"}
    # or its shard's matchers ([shards.NAME] matchers), on the labels the targets carry in file_sd
    for supernode in ("sn01", "sn02"):
        shard = PrometheusCollector("shard", ReadContext(mapper=mapper, shard_matchers=f'supernode="{supernode}"'),
                                    url=url)
        batch, outcome = shard.collect(time.time())
        nodes = {e.split("/", 1)[0] for e in batch.samples["entity"]} if len(batch.samples) else set()
        assert outcome.ok and (nodes >= {"sn01-b01", "sn01-b02"} if supernode == "sn01" else nodes == set())
    with pytest.raises(ValueError, match="matchers: only for the default queries"):
        PrometheusCollector("both", ReadContext(mapper=mapper), url=url, queries=["up"], matchers='job="x"')


def test_a_dead_server_is_a_collection_error():
    dead = PrometheusCollector("dead", ReadContext(), url=f"http://127.0.0.1:{free_port()}", timeout_s=1)
    batch, outcome = dead.collect(time.time())
    assert not outcome.ok and len(batch.samples) == 0 and dead.probe()


def test_an_error_status_and_a_non_vector_answer(http_server):
    addr, pages = http_server()
    pages.set("/api/v1/query", '{"status":"error","errorType":"bad_data","error":"parse error"}')
    c = PrometheusCollector("p", ReadContext(), url=f"http://{addr}", queries=["up"])
    _, outcome = c.collect(time.time())
    assert not outcome.ok and "status 'error'" in outcome.errors[0]
    pages.set("/api/v1/query", '{"status":"success","data":{"resultType":"matrix","result":[]}}')
    _, outcome = c.collect(time.time())
    assert "expected a vector" in outcome.errors[0]
    pages.set("/api/v1/query", '{"status":"success","data":{"resultType":"vector","result":[{"metric":'
                               '{"__name__":"DCGM_FI_DEV_GPU_TEMP","gpu":"0","Hostname":"n1"},"value":[1700000000.5,"NaN"]},'
                               '{"metric":{"__name__":"DCGM_FI_DEV_GPU_TEMP","gpu":"1","Hostname":"n1"},'
                               '"value":[1700000000.5,"41"]}, {"trunc')
    batch, outcome = c.collect(time.time())
    assert not outcome.ok and list(batch.samples["entity"]) == ["n1/gpu1"]  # what came before the cut is kept
    assert any("NaN" in m for m in c.ctx.rejects.messages)
    pages.set("/api/v1/query", '{"status":"success","data":{"resultType":"vector","result":[{"metric":'
                               '{"__name__":"DCGM_FI_DEV_GPU_TEMP","gpu":"1","Hostname":"n1"},"value":[1700000000.5,"41"]}]}}')
    batch, outcome = c.collect(time.time())
    assert outcome.ok and len(batch.samples) == 0  # the same sample again (Prometheus did not scrape anew)
    pages.set("/api/v1/query", '{"status":"success","data":{"resultType":"vector","result":[7, {"metric":{}},'
                               '{"metric":{"gpu":["0"]},"value":[1,"2"]}, {"metric":{"__name__":"DCGM_FI_DEV_GPU_TEMP",'
                               '"gpu":"2","Hostname":"n1"},"value":[1700000001,"40"]}]}}')
    batch, outcome = c.collect(time.time())
    assert outcome.ok and list(batch.samples["entity"]) == ["n1/gpu2"]  # three items that are no sample: rejected
    assert sum("result without labels" in m for m in c.ctx.rejects.messages) == 3


def test_an_ipmi_exporters_nan_is_counted_not_rejected(http_server):
    """A Prometheus answers ipmi_exporter's N/A states as NaN samples: counted as not read; a GPU's NaN is rejected."""
    addr, pages = http_server()
    pages.set("/api/v1/query", '{"status":"success","data":{"resultType":"vector","result":['
                               '{"metric":{"__name__":"ipmi_sensor_state","id":"7","name":"VBAT","type":"Battery",'
                               '"node":"n1"},"value":[1700000000.5,"NaN"]},'
                               '{"metric":{"__name__":"ipmi_fan_speed_state","id":"8","name":"FAN1","node":"n1"},'
                               '"value":[1700000000.5,"2"]},'
                               '{"metric":{"__name__":"DCGM_FI_DEV_GPU_TEMP","gpu":"0","Hostname":"n1"},'
                               '"value":[1700000000.5,"NaN"]}]}}')
    c = PrometheusCollector("p", ReadContext(), url=f"http://{addr}", queries=["{__name__=~'ipmi_.*|DCGM_.*'}"])
    batch, outcome = c.collect(time.time())
    assert outcome.ok and list(zip(batch.samples["entity"], batch.samples["value"])) == [("n1/bmc-8-FAN1", 2.0)]
    assert c.ctx.mapper.values_not_read == {"the exporter's N/A (no reading)": 1}
    assert c.ctx.rejects.total == 1 and "gpu" in c.ctx.rejects.messages[0]
