"""Prometheus HTTP API ``query_range`` responses (``resultType: matrix``), streamed series by series.

A response can be larger than memory, so it is parsed incrementally with ijson; each series'
``metric`` labels go through the same name tables as the exposition readers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

import ijson
import numpy as np

from daemon import metrics
from daemon.batch import Batch, samples_from_codes
from daemon.formats.base import ReadContext, open_binary

FORMAT = "query_range"


class QueryRangeReader:
    """Reads ``{"status":"success","data":{"resultType":"matrix","result":[...]}}`` files."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        mapper = ctx.mapper
        ents: list[int] = []
        mets: list[int] = []
        tss: list[float] = []
        vals: list[float] = []
        src = str(path)

        def flush() -> Batch:
            nonlocal ents, mets, tss, vals
            frame = samples_from_codes(np.asarray(tss), np.asarray(ents, dtype=np.int64),
                                       np.asarray(mets, dtype=np.int64), np.asarray(vals),
                                       mapper.entities, mapper.metrics)
            metrics.SAMPLES_INGESTED.labels(FORMAT).inc(len(frame))
            ents, mets, tss, vals = [], [], [], []
            return Batch(samples=frame)

        with open_binary(path) as fh:
            try:
                for index, series in enumerate(ijson.items(fh, "data.result.item", use_float=True)):
                    position = f"{src}:data.result[{index}]"
                    if not isinstance(series, dict) or not isinstance(series.get("metric"), dict):
                        ctx.rejects.reject(FORMAT, position, "series without a 'metric' object")
                        continue
                    labels = {str(k): str(v) for k, v in series["metric"].items()}
                    name = labels.pop("__name__", "")
                    sid = mapper.series_id(name, labels, position, FORMAT)
                    if sid < 0:
                        continue
                    ent_of, met_of, mask_of = mapper.series_table()
                    ent, met, mask = int(ent_of[sid]), int(met_of[sid]), int(mask_of[sid])
                    for j, point in enumerate(series.get("values") or []):
                        try:
                            t = float(point[0])
                            v = float(point[1])
                        except (TypeError, ValueError, IndexError):
                            ctx.rejects.reject(FORMAT, f"{position}.values[{j}]", "not a [time, \"value\"] pair")
                            continue
                        if not (math.isfinite(t) and math.isfinite(v)):
                            ctx.rejects.reject(FORMAT, f"{position}.values[{j}]", "value is NaN or infinite")
                            continue
                        if mask >= 0:
                            v = float((int(v) & mask) != 0)
                        ents.append(ent)
                        mets.append(met)
                        tss.append(t)
                        vals.append(v)
                    if len(tss) >= ctx.chunk_rows:
                        yield flush()
            except ijson.JSONError as exc:
                ctx.rejects.reject(FORMAT, src, f"JSON ends or breaks early: {exc}")
        if tss:
            yield flush()
