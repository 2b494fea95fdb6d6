import json

from daemon.formats import QueryRangeReader, sniff
from tests.daemon.formats.conftest import read_all


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
