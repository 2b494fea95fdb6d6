"""OpenMetrics and Prometheus text exposition with timestamps, as scrapes or promtool dumps.

Timestamps are seconds in OpenMetrics (the file ends with ``# EOF``) and milliseconds in the
Prometheus text format. Both concatenated scrapes (time-major) and ``promtool tsdb
dump-openmetrics`` output (one series after another) are read the same way; ordering in time is
the job of :mod:`daemon.timeorder`. Histogram and summary series, and any metric not in the name
tables, are skipped by rule and counted; malformed lines are rejected with their position.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Iterator

import numpy as np

from daemon import metrics
from daemon.batch import Batch, samples_from_codes
from daemon.formats.base import ReadContext, iter_lines, read_tail
from daemon.naming import split_series

log = logging.getLogger("raswarden.formats.openmetrics")

FORMAT = "openmetrics"
_PLAUSIBLE_SECONDS = (9.0e8, 4.2e9)  # 1998 .. 2103


class OpenMetricsReader:
    """Streaming reader of exposition text; see the module docstring."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        mapper = ctx.mapper
        rejects = ctx.rejects
        tail = read_tail(path)
        # Compressed files cannot be read from the end: their unit is told by magnitude alone.
        scale: float | None = None if tail is None else (1.0 if b"# EOF" in tail else 0.001)
        scale_checked = False
        cache: dict[str, int] = {}
        sids: list[int] = []
        tss: list[float] = []
        vals: list[float] = []
        nonfinite = 0
        src = str(path)

        def flush() -> Batch:
            nonlocal sids, tss, vals
            ent_of, met_of, mask_of = mapper.series_table()
            sid = np.asarray(sids, dtype=np.int64)
            ts = np.asarray(tss, dtype=np.float64) * (scale or 1.0)
            value = np.asarray(vals, dtype=np.float64)
            masks = mask_of[sid]
            masked = masks >= 0
            if masked.any():
                value[masked] = ((value[masked].astype(np.int64) & masks[masked]) != 0).astype(np.float64)
            frame = samples_from_codes(ts, ent_of[sid], met_of[sid], value, mapper.entities, mapper.metrics)
            metrics.SAMPLES_INGESTED.labels(FORMAT).inc(len(frame))
            sids, tss, vals = [], [], []
            return Batch(samples=frame)

        for first, lines in iter_lines(path, ctx.read_bytes):
            last_key = None
            last_sid = -1
            for offset, line in enumerate(lines):
                if not line or line[0] == "#":
                    continue
                if "# {" in line:  # OpenMetrics exemplar: drop it
                    line = line[: line.index(" # {")] if " # {" in line else line
                close = line.rfind("}")
                if close == -1:
                    space = line.find(" ")
                    if space == -1:
                        rejects.reject(FORMAT, f"{src}:{first + offset}", "no value", line)
                        continue
                    key = line[:space]
                    rest = line[space:]
                else:
                    key = line[: close + 1]
                    rest = line[close + 1 :]
                if key != last_key:
                    sid = cache.get(key)
                    if sid is None:
                        sid = self._new_series(key, ctx, f"{src}:{first + offset}")
                        cache[key] = sid
                    last_key = key
                    last_sid = sid
                if last_sid < 0:
                    continue
                parts = rest.split()
                if len(parts) != 2:
                    why = "no timestamp" if len(parts) == 1 else "expected 'value timestamp'"
                    rejects.reject(FORMAT, f"{src}:{first + offset}", why, line)
                    continue
                try:
                    v = float(parts[0])
                    t = float(parts[1])
                except ValueError:
                    rejects.reject(FORMAT, f"{src}:{first + offset}", "value or timestamp is not a number", line)
                    continue
                if not (math.isfinite(v) and math.isfinite(t)):
                    nonfinite += 1
                    if not math.isfinite(t):
                        rejects.reject(FORMAT, f"{src}:{first + offset}", "timestamp is not finite", line)
                    else:
                        rejects.reject(FORMAT, f"{src}:{first + offset}", "value is NaN or infinite", line)
                    continue
                sids.append(last_sid)
                tss.append(t)
                vals.append(v)
            if not scale_checked and tss:
                scale = (0.001 if tss[0] > 1e11 else 1.0) if scale is None else self._check_scale(scale, tss[0], src)
                scale_checked = True
            if len(sids) >= ctx.chunk_rows:
                yield flush()
        if sids:
            yield flush()

    @staticmethod
    def _new_series(key: str, ctx: ReadContext, position: str) -> int:
        try:
            name, labels = split_series(key)
        except ValueError as exc:
            ctx.rejects.reject(FORMAT, position, f"malformed series: {exc}", key)
            return -1
        return ctx.mapper.series_id(name, labels, position, FORMAT)

    @staticmethod
    def _check_scale(scale: float, first_ts: float, src: str) -> float:
        """Guard against a file whose timestamps are in the other unit than its format implies."""
        lo, hi = _PLAUSIBLE_SECONDS
        if lo <= first_ts * scale <= hi:
            return scale
        other = 0.001 if scale == 1.0 else 1.0
        if lo <= first_ts * other <= hi:
            log.warning(
                "%s: timestamps look like %s although the file %s '# EOF'; reading them as %s",
                src, "milliseconds" if other == 0.001 else "seconds",
                "ends with" if scale == 1.0 else "does not end with",
                "milliseconds" if other == 0.001 else "seconds",
            )
            return other
        return scale
