import json

from daemon.ingest.formats import QueryRangeReader, sniff
from tests.daemon.ingest.formats.conftest import read_all


def doc(values):
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "2", "Hostname": "sn01-b01"}, "values": values},
        {"metric": {"__name__": "node_infiniband_state_id", "device": "mlx5_0", "port": "1",
                    "instance": "10.0.1.11:9100"}, "values": [[1772409630, "4"]]},
        {"metric": {"__name__": "up", "instance": "10.0.1.11:9100"}, "values": [[1772409630, "1"]]},
    ]}}


def test_query_range_matrix(tmp_path, ctx):
    p = tmp_path / "q.json"
    p.write_text(json.dumps(doc([[1772409630, "41"], [1772409660.5, "42"], ["x", "1"], [1772409690, "NaN"]])))
    assert isinstance(sniff(p), QueryRangeReader)
    s = read_all(QueryRangeReader(), p, ctx).samples
    assert list(s["entity"]) == ["sn01-b01/gpu2", "sn01-b01/gpu2", "sn01-b01/mlx5_0:1"]
    assert list(s["value"]) == [41.0, 42.0, 4.0]
    assert ctx.rejects.total == 2
    assert ctx.rejects.messages[0].startswith(f"{p}:data.result[0].values[2]")


def test_truncated_json_keeps_complete_series(tmp_path, ctx):
    text = json.dumps(doc([[1772409630, "41"]]))
    p = tmp_path / "q.json"
    p.write_text(text[: text.index('"up"') + 3])
    s = read_all(QueryRangeReader(), p, ctx).samples
    assert len(s) == 2
    assert any("JSON ends or breaks early" in m for m in ctx.rejects.messages)


def test_instant_query_vectors_saved_one_a_scrape_interval(tmp_path, ctx):
    """``/api/v1/query`` answers a vector, one ``value`` a series (the shape of Prometheus' API docs); files of them
    saved one a scrape interval replay as a trace. A series with neither ``values`` nor ``value`` is rejected."""
    from daemon.replay import replay

    def vector(t: float, temp: str, state: str) -> dict:
        return {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "2", "Hostname": "sn01-b01"}, "value": [t, temp]},
            {"metric": {"__name__": "node_infiniband_state_id", "device": "mlx5_0", "port": "1",
                        "instance": "sn01-b01:9100"}, "value": [t, state]},
            {"metric": {"__name__": "DCGM_FI_DEV_POWER_USAGE", "gpu": "2", "Hostname": "sn01-b01"}}]}}

    for k, (temp, state) in enumerate([("41", "4"), ("42", "4"), ("42", "1")]):
        (tmp_path / f"q{k}.json").write_text(json.dumps(vector(1772409630 + 60 * k, temp, state)))
    assert isinstance(sniff(tmp_path / "q0.json"), QueryRangeReader)
    s = read_all(QueryRangeReader(), tmp_path / "q1.json", ctx).samples
    assert s[["entity", "metric", "ts", "value"]].values.tolist() == [
        ["sn01-b01/gpu2", "gpu_temp_c", 1772409690.0, 42.0], ["sn01-b01/mlx5_0:1", "port_state", 1772409690.0, 4.0]]
    assert "series without a 'values' list or a 'value'" in ctx.rejects.messages[0]
    import io

    out = io.StringIO()
    result = replay([tmp_path], findings_out=out)
    assert result.stats.samples == 6 and result.stats.first_ts == 1772409630.0
    assert {(f["entity"], f["state"]) for f in map(json.loads, out.getvalue().splitlines())} >= {
        ("sn01-b01/mlx5_0:1", "failed")}  # its port DOWN in the last answer


def test_an_ipmi_exporters_nan_is_its_na_not_bad_input(tmp_path, ctx):
    """A Prometheus keeps ipmi_exporter's NaN (a sensor FreeIPMI reads as N/A) as a sample: read back, it is counted
    as not read; a dcgm-exporter NaN in the same answer is still rejected."""
    answer = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "ipmi_sensor_state", "id": "2215", "name": "VBAT", "type": "Battery",
                    "node": "sn01-b01"}, "values": [[1772409630, "NaN"], [1772409660, "2"]]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "2", "Hostname": "sn01-b01"},
         "values": [[1772409630, "NaN"]]}]}}
    p = tmp_path / "q.json"
    p.write_text(json.dumps(answer))
    s = read_all(QueryRangeReader(), p, ctx).samples
    assert list(zip(s["entity"], s["metric"], s["value"])) == [("sn01-b01/bmc-2215-VBAT", "bmc_sensor_state", 2.0)]
    assert ctx.mapper.values_not_read == {"the exporter's N/A (no reading)": 1}
    assert ctx.rejects.total == 1 and "data.result[1].values[0]" in ctx.rejects.messages[0]
