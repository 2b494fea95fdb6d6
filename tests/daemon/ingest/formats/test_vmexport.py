"""VictoriaMetrics ``/api/v1/export`` JSON lines: series spanning lines, units, and every kind of bad line."""

from __future__ import annotations

import json

from daemon.ingest.formats import VmExportReader, sniff
from tests.daemon.ingest.formats.conftest import read_all

SERIES = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "sn01-b01", "UUID": "GPU-a"}


def line(metric: dict, values: list, stamps: list) -> str:
    return json.dumps({"metric": metric, "values": values, "timestamps": stamps}) + "\n"


def test_points_in_seconds_and_a_series_over_several_lines(ctx, tmp_path):
    path = tmp_path / "export.jsonl"
    path.write_text(line(SERIES, [41, 42.5], [1772409600000, 1772409630000])
                    + line({**SERIES, "gpu": "2"}, [60], [1772409600000])
                    + line(SERIES, [43], [1772409660000]))  # the same series again (an export in parts)
    assert isinstance(sniff(path), VmExportReader)
    samples = read_all(VmExportReader(), path, ctx).samples
    temp = samples[samples["entity"] == "sn01-b01/gpu0"]
    assert list(temp["value"]) == [41, 42.5, 43] and list(temp["ts"]) == [1772409600, 1772409630, 1772409660]
    assert samples[samples["entity"] == "sn01-b01/gpu2"]["value"].tolist() == [60]
    assert ctx.rejects.total == 0


def test_bad_lines_are_rejected_with_their_number_and_the_rest_is_read(ctx, tmp_path):
    path = tmp_path / "export.jsonl"
    path.write_text(
        line(SERIES, [41], [1772409600000])
        + '{"metric": {"__name__": "x"}, "values": [1]}\n'  # 2: no timestamps
        + line(SERIES, [1, 2], [1772409630000])  # 3: lengths differ
        + line(SERIES, ["41", "abc"], [1772409630000, 1772409660000])  # 4: not a number
        + line(SERIES, [float("nan"), 44], [1772409690000, 1772409720000])  # 5: NaN (a staleness marker)
        + "\n"
        + line({**SERIES, "__name__": "go_goroutines"}, [9], [1772409600000])  # 7: not a metric read
        + '{"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "sn01-b01"}, "values": [4')  # 8: cut
    samples = read_all(VmExportReader(), path, ctx).samples
    assert samples["value"].tolist() == [41, 44]
    where = sorted((m.split(": ", 1)[0].rsplit(":", 1)[1], m) for m in ctx.rejects.messages)
    assert [w for w, _ in where] == ["2", "3", "4", "5", "8"], where
    assert "2 values against 1 timestamps" in where[1][1] and "NaN or infinite" in where[3][1]
    assert ctx.mapper.unmapped_metrics["go_goroutines"] == 1
