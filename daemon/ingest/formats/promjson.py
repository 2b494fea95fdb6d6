"""Prometheus HTTP API responses, streamed series by series: ``query_range`` (``resultType: matrix``, each series'
``values``) and instant ``query`` (``resultType: vector``, one ``value`` a series: a directory of them saved one a
scrape interval is a trace too).

A response can be larger than memory, so it is parsed incrementally with ijson; each series'
``metric`` labels go through the same name tables as the exposition readers.
"""

from __future__ import annotations

import math
from pathlib import Path
from collections.abc import Iterator

import ijson
import numpy as np

from daemon.ingest.batch import Batch
from daemon.ingest.formats.openmetrics import points_batch
from daemon.ingest.formats.reader import ReadContext, open_binary
from daemon.ingest.naming import reads_nan

FORMAT = "query_range"


def _point(point) -> tuple[float, float]:
    """``[time, "value"]`` to floats; raises ValueError for anything else."""
    if not isinstance(point, (list, tuple)) or len(point) != 2:
        raise ValueError("not a pair")
    return float(point[0]), float(point[1])


class QueryRangeReader:
    """Reads ``{"status":"success","data":{"resultType":"matrix"|"vector","result":[...]}}`` files."""

    format = FORMAT

    @staticmethod
    def _series(series, position: str, ctx: ReadContext, sids, tss, vals) -> None:
        if not isinstance(series, dict) or not isinstance(series.get("metric"), dict):
            ctx.rejects.reject(FORMAT, position, "series without a 'metric' object")
            return
        labels = {str(k): str(v) for k, v in series["metric"].items()}
        name = labels.pop("__name__", "")
        sid = ctx.mapper.series_id(name, labels, position, FORMAT)
        if sid < 0:
            return
        points = series.get("values")
        if points is None and "value" in series:  # an instant query's vector
            points = [series["value"]]
        if not isinstance(points, list):
            ctx.rejects.reject(FORMAT, position, "series without a 'values' list or a 'value'")
            return
        na = None  # (whether a NaN is its exporter's "no reading", asked at the series' first non-finite value)
        for j, point in enumerate(points):
            try:
                t, v = _point(point)
            except (TypeError, ValueError, OverflowError):
                ctx.rejects.reject(FORMAT, f"{position}.values[{j}]", "not a [time, \"value\"] pair")
                continue
            if math.isnan(v) and math.isfinite(t):
                if na is None:
                    na = bool(reads_nan(ctx.mapper, np.array([sid]))[0])
                if na:  # naming.NAN_MEANS_NA: counted as not read, not rejected
                    sids.append(sid)
                    tss.append(t)
                    vals.append(v)
                    continue
            if not (math.isfinite(t) and math.isfinite(v)):
                ctx.rejects.reject(FORMAT, f"{position}.values[{j}]", "value is NaN or infinite")
                continue
            sids.append(sid)
            tss.append(t)
            vals.append(v)

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        sids: list[int] = []
        tss: list[float] = []
        vals: list[float] = []
        src = str(path)

        def flush() -> Batch:
            """The points read so far as one batch (:func:`points_batch`: each series' transform applied; the points
            of a series whose accelerator no info series has named yet dropped and counted, naming.JOINS)."""
            nonlocal sids, tss, vals
            batch = points_batch(ctx.mapper, sids, tss, vals, FORMAT)
            sids, tss, vals = [], [], []
            return batch

        done = 0  # series handled, so a retry with another backend does not read them twice
        broken = False
        for backend in (ijson, ijson.get_backend("python")):
            with open_binary(path, ctx.rejects, FORMAT) as fh:
                try:
                    for index, series in enumerate(backend.items(fh, "data.result.item", use_float=True)):
                        if index < done:
                            continue
                        done = index + 1
                        self._series(series, f"{src}:data.result[{index}]", ctx, sids, tss, vals)
                        if len(tss) >= ctx.chunk_rows:
                            yield flush()
                    break
                except ijson.JSONError as exc:
                    if "overflow" in str(exc) and backend is ijson:
                        continue  # a number too large for the C parser: the pure-Python one takes it
                    ctx.rejects.reject(FORMAT, src, f"JSON ends or breaks early: {str(exc).splitlines()[0]}")
                    broken = True
                    break
        key = _first_key(path) if not done and not broken else "status"
        if key == "dmesg":
            ctx.rejects.refuse(FORMAT, src, "dmesg --json: its times count seconds since boot and the file gives no "
                                            "boot time; record it with 'dmesg --time-format iso' or 'journalctl -k -o "
                                            "json'")
        elif key not in _RESPONSE_KEYS:
            ctx.rejects.refuse(FORMAT, src, "JSON that is no Prometheus query response (no 'status' and 'data' at its "
                                            "top): nothing read")
        if tss:
            yield flush()


# the keys of a Prometheus HTTP API response's top object (its "Format overview")
_RESPONSE_KEYS = frozenset({"status", "data", "errorType", "error", "warnings", "infos"})


def _first_key(path: Path) -> str | None:
    """The first key of a JSON file's top object (None when it has none, or is no JSON), read no further: whether a
    file that gave no series is a Prometheus response (an empty result is one) or something else."""
    try:
        with open_binary(path) as fh:
            for prefix, event, value in ijson.parse(fh):
                if prefix == "" and event == "map_key":
                    return str(value)
                if prefix == "" and event != "start_map":
                    return None
    except (ijson.JSONError, OSError, EOFError):
        return None
    return None
