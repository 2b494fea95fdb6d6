"""Readers and writers of recorded telemetry (ARCHITECTURE §8), and the sniffing that picks one per file."""

from __future__ import annotations

import re
from pathlib import Path

from daemon.formats.base import ReadContext, Reader, open_binary
from daemon.formats.columnar import ColumnarReader, ColumnarWriter
from daemon.formats.kernellog import JournalJsonReader, TextLogReader
from daemon.formats.openmetrics import OpenMetricsReader
from daemon.formats.promjson import QueryRangeReader
from daemon.formats.rasdaemon import RasdaemonReader
from daemon.formats.smi import SmiReader

__all__ = [
    "ColumnarReader", "ColumnarWriter", "JournalJsonReader", "OpenMetricsReader", "QueryRangeReader",
    "RasdaemonReader", "ReadContext", "Reader", "SmiReader", "TextLogReader", "sniff",
]

_EXPOSITION = re.compile(rb"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{| )")


def sniff(path: Path) -> Reader | None:
    """Pick the reader for a file from its first bytes; None when no reader fits."""
    try:
        with open_binary(path) as fh:
            head = fh.read(4096)
    except OSError:
        return None
    if head.startswith(b"SQLite format 3\x00"):
        return RasdaemonReader()
    if head.startswith(b"PAR1"):
        return ColumnarReader()
    first = next((ln.strip() for ln in head.splitlines() if ln.strip()), b"")
    if first.startswith(b"{"):
        if b"__REALTIME_TIMESTAMP" in first or b"_TRANSPORT" in first:
            return JournalJsonReader()
        if b'"tool"' in first and b'"output"' in first:
            return SmiReader()
        return QueryRangeReader()
    if first.startswith(b"ts,"):
        return ColumnarReader()
    if first.startswith(b"#") or _EXPOSITION.match(first):
        if TextLogReader._detect(first.decode("utf-8", "replace")) is None:
            return OpenMetricsReader()
    if TextLogReader._detect(first.decode("utf-8", "replace")) is not None:
        return TextLogReader()
    return None
