"""``nvidia-smi --query-gpu=timestamp,index,... --format=csv -l N`` logs: the GPU log a node keeps without an
exporter, ``<host>.nvidia-smi.csv`` (nvidia-smi names no host: the file's name does, as for dmesg).

The header names the query fields and their units (``timestamp, index, uuid, temperature.gpu, power.draw [W],
memory.used [MiB], ...``); with ``--format=csv`` the values carry their units too (``631.95 W``), with
``csv,nounits`` they do not; ``[N/A]`` and ``[Not Supported]`` are no reading. ``timestamp`` is the node's local
time without a zone (``2026/03/02 00:00:30.123``): read in the context's zone (UTC unless the operator names the
hosts' local zone), as dmesg's. Each field becomes the metric
utkuozdemir/nvidia_gpu_exporter would export for it (its name with dots as underscores and the unit's suffix and
factor, its value words as numbers: internal/exporter/exporter.go, internal/nvidiasmi/transform.go), so the one
name table (``daemon/ingest/names/nvidia_gpu_exporter.csv``) reads both. A header without ``timestamp`` or without
``index`` is refused saying what to add; a bad line is rejected with its number.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterator
from pathlib import Path

from daemon.ingest.batch import Batch
from daemon.ingest.formats.openmetrics import points_batch
from daemon.ingest.formats.reader import ReadContext, host_in_name, iter_lines, note_zoneless
from daemon.timetext import zoneless_epoch

FORMAT = "nvidia_smi_csv"
# nvidia-smi's unit suffixes in the header -> the exporter's metric suffix and factor (knownUnitSuffixes)
UNITS = {"W": ("_watts", 1.0), "MHz": ("_clock_hz", 1e6), "MiB": ("_bytes", 1048576.0), "%": ("_ratio", 0.01),
         "us": ("_seconds", 1e-6), "ms": ("_seconds", 1e-3), "seconds": ("_seconds", 1.0)}
# short names nvidia-smi takes for a field (nvidia-smi --help-query-gpu: "clocks.current.sm" or "clocks.sm")
ALIASES = {"clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory",
           "clocks.gr": "clocks.current.graphics", "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
           "retired_pages.dbe": "retired_pages.double_bit.count"}
WORDS = {"enabled": 1.0, "yes": 1.0, "active": 1.0, "disabled": 0.0, "no": 0.0, "not active": 0.0}
# gpu_recovery_action's words (nvidia-smi prints None, Reset, Reboot, ...) as NVML's numbers
# (nvmlDeviceGpuRecoveryAction_t); NVML's own names are taken too. Compared lower-case, letters and digits only.
RECOVERY_ACTION_WORDS = {"none": 0.0, "reset": 1.0, "gpureset": 1.0, "reboot": 2.0, "nodereboot": 2.0,
                         "drainp2p": 3.0, "drainandreset": 4.0, "gpuresetbus": 5.0, "resetbus": 5.0}
# the fields whose value is a word of their own vocabulary (not the Enabled/Yes/Active of WORDS)
FIELD_WORDS = {"gpu_recovery_action": RECOVERY_ACTION_WORDS}
LABEL_FIELDS = {"uuid": "uuid", "pci.bus_id": "pci_bus_id", "name": "modelName"}
_HEADER = re.compile(r"\s*timestamp\s*,.*\bindex\b|\s*index\s*,.*\btimestamp\b")
_FIELD = re.compile(r"([a-z0-9_.]+)(?:\s*\[([^\]]+)\])?$")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def exporter_metric(field: str, unit: str = "") -> tuple[str, float]:
    """The metric nvidia_gpu_exporter names a query field by (dots as underscores, the unit's suffix) and the factor
    its value takes (``memory.used`` in MiB: ``nvidia_smi_memory_used_bytes``, times 1048576)."""
    suffix, factor = UNITS.get(unit, ("", 1.0))
    return "nvidia_smi_" + field.replace(".", "_") + suffix, factor


def named_host(path: Path, ctx: ReadContext, fmt: str, extension: str) -> str | None:
    """The host a file of nvidia-smi's output is named for (nvidia-smi names none); None, the file refused saying how
    to name it, when its name gives none."""
    host = host_in_name(path, ".nvidia-smi")
    if not host:
        ctx.rejects.refuse(fmt, str(path), f"nvidia-smi names no host: name the file <host>.nvidia-smi.{extension}")
    return host


class GpuPoints:
    """The points a reader of nvidia-smi's output has collected, its series by (metric, GPU index, uuid), and the
    latest time it read (for the summary's note of the zone its times, which name none, were read in)."""

    def __init__(self, ctx: ReadContext, fmt: str) -> None:
        self.ctx, self.fmt = ctx, fmt
        self.cache: dict[tuple[str, str, str], int] = {}
        self.sids: list[int] = []
        self.tss: list[float] = []
        self.vals: list[float] = []
        self.latest = -math.inf

    def add(self, metric: str, labels: dict[str, str], ts: float, value: float, position: str) -> None:
        """One reading of a GPU (``labels`` hold its ``index`` and, where known, ``uuid``)."""
        key = (metric, labels["index"], labels.get("uuid", ""))
        sid = self.cache.get(key)
        if sid is None:
            sid = self.cache[key] = self.ctx.mapper.series_id(metric, labels, position, self.fmt)
        if sid >= 0:
            self.sids.append(sid)
            self.tss.append(ts)
            self.vals.append(value)

    def flush(self) -> Batch:
        """The points collected since the last flush, as one batch."""
        if self.tss:
            self.latest = max(self.latest, max(self.tss))
        batch = points_batch(self.ctx.mapper, self.sids, self.tss, self.vals, self.fmt)
        self.sids, self.tss, self.vals = [], [], []
        return batch

    def finish(self, src: str, path: Path) -> Iterator[Batch]:
        """The points not yielded yet, and the summary's note of the zone the file's times were read in."""
        if self.sids:
            yield self.flush()
        if self.latest > -math.inf:
            note_zoneless(self.ctx, self.fmt, src, path, self.latest)


class NvidiaSmiCsvReader:
    """Reads ``nvidia-smi --query-gpu ... --format=csv`` logs; see the module docstring."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        src = str(path)
        host = named_host(path, ctx, FORMAT, "csv")
        if not host:
            return
        columns: list[tuple[str, str, float]] | None = None  # per column: field, exporter metric, factor
        points = GpuPoints(ctx, FORMAT)
        for first, lines in iter_lines(path, ctx.read_bytes, ctx.rejects, FORMAT):
            for offset, line in enumerate(lines):
                if not line.strip():
                    continue
                position = f"{src}:{first + offset}"
                cells = [c.strip() for c in line.split(",")]
                if columns is None or cells[0] in ("timestamp", "index"):
                    columns = self._columns(cells, position, ctx)
                    known = [metric in ctx.mapper.rules for _, metric, _ in columns or []]
                    if columns is None:
                        return
                    continue
                self._row(cells, columns, known, host, position, ctx, points)
            if len(points.sids) >= ctx.chunk_rows:
                yield points.flush()
        yield from points.finish(src, path)

    @staticmethod
    def _columns(cells: list[str], position: str, ctx: ReadContext) -> list[tuple[str, str, float]] | None:
        """The header's columns, or None (refused) when it is no header this reader can use."""
        names = []
        for cell in cells:
            m = _FIELD.match(cell)
            if not m:
                ctx.rejects.refuse(FORMAT, position, f"header field {cell!r} is not a query field")
                return None
            field = ALIASES.get(m.group(1), m.group(1))
            names.append((field, *exporter_metric(field, m.group(2) or "")))
        fields = {f for f, _, _ in names}
        for field, metric, _ in names:
            if field not in ("timestamp", "index", *LABEL_FIELDS) and metric not in ctx.mapper.rules:
                ctx.mapper.unmapped_metrics[metric] += 1
        if not {"timestamp", "index"} <= fields:
            ctx.rejects.refuse(FORMAT, position, "no timestamp or index column: log with "
                                                 "--query-gpu=timestamp,index,uuid,... --format=csv")
            return None
        return names

    @staticmethod
    def _row(cells: list[str], columns: list[tuple[str, str, float]], known: list[bool], host: str, position: str,
             ctx: ReadContext, points: GpuPoints) -> None:
        if len(cells) != len(columns):
            ctx.rejects.reject(FORMAT, position, f"{len(cells)} fields against the header's {len(columns)}",
                               ",".join(cells)[:120])
            return
        row = {field: cell for (field, _, _), cell in zip(columns, cells)}
        try:
            ts = zoneless_epoch(dt.datetime.strptime(row["timestamp"].split(".")[0], "%Y/%m/%d %H:%M:%S"), ctx.zone)
            ts += float("0." + row["timestamp"].split(".")[1]) if "." in row["timestamp"] else 0.0
            index = str(int(row["index"]))
        except (ValueError, IndexError):
            ctx.rejects.reject(FORMAT, position, "bad timestamp or index", ",".join(cells)[:120])
            return
        labels = {"Hostname": host, "index": index}
        labels.update({label: row[f] for f, label in LABEL_FIELDS.items() if row.get(f, "[N/A]")[:1] not in ("[", "")})
        for (field, metric, factor), cell, read in zip(columns, cells, known):
            if not read or cell.startswith("["):
                continue  # a field no table reads (counted at the header); [N/A], [Not Supported]: no reading
            value = cell_value(field, cell, factor)
            if value is None:
                ctx.rejects.reject(FORMAT, position, f"{field}: {cell!r} is not a number")
                continue
            points.add(metric, labels, ts, value, position)


def cell_value(field: str, cell: str, factor: float = 1.0) -> float | None:
    """A query field's value as the exporter reads it: hex, a word (Enabled, Yes, Active; gpu_recovery_action's
    Reset, Reboot, ...), else its one number times ``factor``; None when it is none of these."""
    text = cell.strip().lower()
    words = FIELD_WORDS.get(field)
    if words is not None and not _NUMBER.fullmatch(text):
        return words.get(re.sub(r"[^a-z0-9]", "", text))
    if text.startswith("0x"):
        try:
            return float(int(text, 16))
        except ValueError:
            return None
    if text in WORDS:
        return WORDS[text]
    numbers = _NUMBER.findall(text)
    return float(numbers[0]) * factor if len(numbers) == 1 else None


def looks_like(first_line: str) -> bool:
    """Whether a file's first line is a query-gpu CSV header with a timestamp and an index."""
    return _HEADER.match(first_line) is not None
