"""VictoriaMetrics' ``/api/v1/export`` JSON lines: one series a line, its points as two arrays.

``{"metric":{"__name__":"up","job":"x"},"values":[1,1],"timestamps":[1549891472010,1549891487724]}`` (timestamps
in milliseconds), what ``curl http://vm:8428/api/v1/export -d 'match[]={__name__!=""}'`` writes and
``/api/v1/import`` reads back: the way a fleet's long-term storage is copied out. Read a block of lines at a
time, so a file larger than memory works; each series' labels go through the same name tables as the exposition
readers, and a bad line is rejected with its number, the rest read on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from daemon.ingest.batch import Batch
from daemon.ingest.formats.openmetrics import samples_frame
from daemon.ingest.formats.reader import ReadContext, iter_lines

FORMAT = "vm_export"
_EXPORT_HEAD = re.compile(rb'\s*\{\s*"metric"\s*:\s*\{')


class VmExportReader:
    """Reads VictoriaMetrics ``/api/v1/export`` JSON lines; see the module docstring."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        src = str(path)
        cache: dict[str, int] = {}  # a series' ``metric`` object as written -> its id (a series may span lines)
        sids: list[np.ndarray] = []
        tss: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        pending = 0

        def flush() -> Batch:
            nonlocal sids, tss, vals, pending
            frame = samples_frame(ctx.mapper, np.concatenate(sids), np.concatenate(tss), np.concatenate(vals),
                                  FORMAT)
            sids, tss, vals, pending = [], [], [], 0
            return Batch(samples=frame)

        for first, lines in iter_lines(path, ctx.read_bytes, ctx.rejects, FORMAT):
            for offset, line in enumerate(lines):
                if not line.strip():
                    continue
                read = self._line(line, f"{src}:{first + offset}", ctx, cache)
                if read is not None:
                    sids.append(read[0])
                    tss.append(read[1])
                    vals.append(read[2])
                    pending += len(read[0])
            if pending >= ctx.chunk_rows:
                yield flush()
        if pending:
            yield flush()

    @staticmethod
    def _line(line: str, position: str, ctx: ReadContext,
              cache: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """One line's points as arrays (series id, seconds, value), or None (rejected, or a series not read)."""
        rejects = ctx.rejects
        try:
            row = json.loads(line)
            labels = row["metric"]
            values, stamps = row["values"], row["timestamps"]
            if not isinstance(labels, dict) or not isinstance(values, list) or not isinstance(stamps, list):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            rejects.reject(FORMAT, position, "not a {\"metric\", \"values\", \"timestamps\"} object", line[:120])
            return None
        if len(values) != len(stamps):
            rejects.reject(FORMAT, position, f"{len(values)} values against {len(stamps)} timestamps")
            return None
        key = json.dumps(labels, sort_keys=True)
        sid = cache.get(key)
        if sid is None:
            named = {str(k): str(v) for k, v in labels.items()}
            sid = cache[key] = ctx.mapper.series_id(named.pop("__name__", ""), named, position, FORMAT)
        if sid < 0 or not values:
            return None
        try:
            v = np.array([float(x) for x in values], dtype=np.float64)
            t = np.array([float(x) for x in stamps], dtype=np.float64) * 0.001
        except (TypeError, ValueError, OverflowError):
            rejects.reject(FORMAT, position, "a value or timestamp is not a number")
            return None
        ok = np.isfinite(v) & np.isfinite(t)
        if not ok.all():
            bad = int((~ok).sum())
            rejects.reject(FORMAT, position, f"{bad} value(s) NaN or infinite (a staleness marker, or no reading)"
                           if np.isfinite(t).all() else f"{bad} timestamp(s) not finite")
            v, t = v[ok], t[ok]
        return np.full(len(v), sid, dtype=np.int64), t, v


def looks_like(head: bytes) -> bool:
    """Whether a file beginning with ``head`` is an export (its first line may be cut: a line can hold a series'
    million points; VictoriaMetrics writes ``metric`` first)."""
    return _EXPORT_HEAD.match(head) is not None
