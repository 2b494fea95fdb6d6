"""nvidia-smi's table (its default output, what ``nvidia-smi -l 60 > <host>.nvidia-smi.txt`` or a pasted check saves):
each GPU's temperature, power, memory, utilisation and volatile uncorrected ECC count.

nvidia-smi prints the node's local time above each table (``Mon Jan 20 10:18:26 2025``), read in the context's zone
as its other outputs are; a table without it (a paste that cut it off) cannot be placed in time and is rejected
saying so. A GPU is two lines of the table::

    |   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off |                    0 |
    | N/A   27C    P0             72W /  700W |       1MiB /  81559MiB |      0%      Default |

(index, name, persistence mode | bus id, display | volatile uncorrected ECC; fan, temperature, performance state,
power and its cap | memory used and total | utilisation, compute mode), each reading as the query field nvidia-smi's
CSV log names (:mod:`daemon.ingest.formats.nvsmicsv`, its name table). ``N/A`` is no reading; ``ERR!`` (what
nvidia-smi prints for a reading it could not take, as a failing GPU shows) is rejected with its line, so that it is
seen; the processes table below is passed over. The host is the file's name's, as for the CSV log.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from daemon.ingest.batch import Batch
from daemon.ingest.formats.nvsmicsv import GpuPoints, cell_value, exporter_metric, named_host
from daemon.ingest.formats.nvsmireport import report_time
from daemon.ingest.formats.reader import ReadContext, iter_lines

FORMAT = "nvidia_smi_table"
_TIME = re.compile(r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4}\s*$")
_HEADER = "| NVIDIA-SMI "
_BUS_ID = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_FIRST = re.compile(rf"^\|\s+(\d+)\s+(.*?)\s+(On|Off)\s*\|\s*({_BUS_ID})\s+\S+\s*\|\s*(\S+)\s*\|\s*$")
_SECOND = re.compile(r"^\|\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*\S+\s*\|\s*(\S+)\s*/\s*\S+\s*\|\s*(\S+)\s+.*\|\s*$")
# the second line's readings: (group, query field, unit)
_READINGS = ((2, "temperature.gpu", ""), (4, "power.draw", "W"), (5, "memory.used", "MiB"), (6, "utilization.gpu", "%"))
_ECC = "ecc.errors.uncorrected.volatile.total"


class NvidiaSmiTableReader:
    """Reads nvidia-smi's default table output; see the module docstring."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        src = str(path)
        host = named_host(path, ctx, FORMAT, "txt")
        if not host:
            return
        points = GpuPoints(ctx, FORMAT)
        ts: float | None = None
        fresh = False  # a time line read since the last table began
        gpu: tuple[dict[str, str], str, int] | None = None  # the labels and ECC of a GPU whose second line is next
        for first, lines in iter_lines(path, ctx.read_bytes, ctx.rejects, FORMAT):
            for offset, line in enumerate(lines):
                number = first + offset
                if _TIME.match(line):
                    ts, fresh = report_time(line, ctx), True
                    continue
                if line.startswith(_HEADER):
                    if not fresh:
                        ts = None
                        ctx.rejects.reject(FORMAT, f"{src}:{number}", "a table without the time nvidia-smi prints "
                                           "above it (cut off?): cannot be placed in time")
                    fresh = False
                    continue
                if gpu is not None:
                    self._second(line, gpu, ts, f"{src}:{number}", ctx, points)
                    gpu = None
                    continue
                row = _FIRST.match(line)
                if row and ts is not None:
                    labels = {"Hostname": host, "index": row.group(1), "pci_bus_id": row.group(4)}
                    if not row.group(2).endswith("..."):  # (a long name is cut short in the table)
                        labels["modelName"] = row.group(2)
                    gpu = (labels, row.group(5), number)
            if len(points.sids) >= ctx.chunk_rows:
                yield points.flush()
        yield from points.finish(src, path)

    @staticmethod
    def _second(line: str, gpu: tuple[dict[str, str], str, int], ts: float, position: str, ctx: ReadContext,
                points: GpuPoints) -> None:
        """A GPU's second line, with the ECC count its first gave."""
        labels, ecc, _ = gpu
        row = _SECOND.match(line)
        if row is None:
            ctx.rejects.reject(FORMAT, position, "a GPU's first line without its second", line.strip()[:120])
            return
        cells = [(_ECC, "", ecc)] + [(field, unit, row.group(group)) for group, field, unit in _READINGS]
        for field, unit, cell in cells:
            if cell.upper() in ("N/A", "[N/A]"):
                continue
            value = cell_value(field, cell)
            if value is None:
                ctx.rejects.reject(FORMAT, position, f"{field}: {cell!r} is no reading"
                                   + (" (nvidia-smi could not read it)" if cell == "ERR!" else ""))
                continue
            metric, factor = exporter_metric(field, unit)
            if metric in ctx.mapper.rules:
                points.add(metric, labels, ts, value * factor, position)


def looks_like(head: bytes, first: bytes) -> bool:
    """Whether a file is nvidia-smi's table, from its first bytes and first non-blank line."""
    return _HEADER.encode() in head and (first.startswith(b"+-") or _TIME.match(first.decode("utf-8", "replace"))
                                         is not None)
