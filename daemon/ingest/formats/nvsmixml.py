"""``nvidia-smi -q -x`` snapshots: the GPU report a node keeps without an exporter (a cron job's
``nvidia-smi -q -x >> <host>.nvidia-smi.xml``, or ``nvidia-smi -q -x -l 60``), one XML document per snapshot, as many
as the file holds. nvidia-smi names no host: the file's name does (``<host>.nvidia-smi.xml``), as for its CSV log.

Each document's ``<timestamp>`` (``Fri Aug  4 11:44:30 2023``, the node's local time without a zone) is read in the
context's zone, as the CSV log's. Each ``<gpu>`` is the GPU of that index (nvidia-smi lists them in index order; its
``id`` attribute is its PCI address), and each reading becomes the query field nvidia-smi's CSV log names
(:mod:`daemon.ingest.formats.nvsmicsv`), so one name table (``daemon/ingest/names/nvidia_gpu_exporter.csv``) reads
both: temperatures, power, clocks, utilisation, memory, ECC counts (the schema before driver 450 gives
``single_bit``/``double_bit`` totals, later ones ``sram_*``/``dram_*`` counts, summed here as the query field's total
sums them), retired pages, remapped rows, the clock event (throttle) reasons as NVML's bitmask, the PCIe replay
counter and the driver's recovery action (``gpu_recovery_action`` from R570; before it ``gpu_reset_status``'s
``reset_required`` and ``drain_and_reset_recommended``, read as NVML's GPU_RESET and DRAIN_AND_RESET).

``N/A``, ``Not Supported`` and ``Requested functionality has been deprecated`` are no reading. A document cut short
(the file copied while nvidia-smi wrote it), one the XML parser refuses, one with no timestamp and a value that is no
number are rejected with the file, the document's line and the element; the rest of the file is read.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

from daemon.ingest.batch import Batch
from daemon.ingest.formats.nvsmicsv import UNITS, GpuPoints, cell_value, named_host
from daemon.ingest.formats.reader import ReadContext, iter_lines, note_zoneless
from daemon.timetext import zoneless_epoch

FORMAT = "nvidia_smi_xml"
# (query field, its unit in the CSV header, the element paths under <gpu> that give it: the first with a reading)
FIELDS = (
    ("temperature.gpu", "", ("temperature/gpu_temp",)),
    ("temperature.memory", "", ("temperature/memory_temp",)),
    ("power.draw", "W", ("gpu_power_readings/power_draw", "gpu_power_readings/instant_power_draw",
                         "power_readings/power_draw", "power_readings/instant_power_draw")),
    ("clocks.current.sm", "MHz", ("clocks/sm_clock",)),
    ("clocks.current.memory", "MHz", ("clocks/mem_clock",)),
    ("utilization.gpu", "%", ("utilization/gpu_util",)),
    ("memory.used", "MiB", ("fb_memory_usage/used",)),
    ("memory.free", "MiB", ("fb_memory_usage/free",)),
    ("retired_pages.single_bit_ecc.count", "", ("retired_pages/multiple_single_bit_retirement/retired_count",)),
    ("retired_pages.double_bit.count", "", ("retired_pages/double_bit_retirement/retired_count",)),
    ("retired_pages.pending", "", ("retired_pages/pending_retirement",)),
    ("remapped_rows.correctable", "", ("remapped_rows/remapped_row_corr",)),
    ("remapped_rows.uncorrectable", "", ("remapped_rows/remapped_row_unc",)),
    ("remapped_rows.pending", "", ("remapped_rows/remapped_row_pending",)),
    ("remapped_rows.failure", "", ("remapped_rows/remapped_row_failure",)),
    ("remapped_rows.histogram.none", "", ("remapped_rows/row_remapper_histogram/row_remapper_histogram_none",)),
    ("pcie.replay_counter", "", ("pci/replay_counter",)),
    ("gpu_recovery_action", "", ("gpu_recovery_action",)),
)
# ECC totals: (query field, the schema's total, the later schema's counts summed)
ECC_TOTALS = tuple(
    (f"ecc.errors.{kind}.{scope}.total", f"ecc_errors/{scope}/{bits}/total",
     tuple(f"ecc_errors/{scope}/{part}" for part in parts))
    for scope in ("volatile", "aggregate")
    for kind, bits, parts in (
        ("corrected", "single_bit", ("sram_correctable", "dram_correctable")),
        ("uncorrected", "double_bit", ("sram_uncorrectable", "sram_uncorrectable_parity",
                                       "sram_uncorrectable_secded", "dram_uncorrectable"))))
# NVML's clock event reasons (nvmlClocksEventReason*), by the element's name after its prefix
EVENT_REASON_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
                     "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
                     "hw_power_brake_slowdown": 0x80, "display_clocks_setting": 0x100}
NO_READING = frozenset({"", "n/a", "[n/a]", "not supported", "[not supported]", "requested functionality has been "
                        "deprecated", "not available"})
_END = "</nvidia_smi_log>"
# a report of 8 GPUs is about 3,000 lines (their processes add a few each); a "report" far longer never ends
MAX_REPORT_LINES = 200_000
_START = re.compile(r"<\?xml|<nvidia_smi_log[\s>]")


def _cut_short(ctx: ReadContext, position: str, doc: list[str]) -> None:
    ctx.rejects.reject(FORMAT, position, f"a snapshot cut short (no </nvidia_smi_log> in its {len(doc)} lines): its "
                                         "readings are not read", doc[0].strip()[:120])


def _metric(field: str, unit: str) -> tuple[str, float]:
    """The exporter's metric for a query field and its factor (as the CSV log's header names it)."""
    suffix, factor = UNITS.get(unit, ("", 1.0))
    return "nvidia_smi_" + field.replace(".", "_") + suffix, factor


class NvidiaSmiXmlReader:
    """Reads ``nvidia-smi -q -x`` snapshots; see the module docstring."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        src = str(path)
        host = named_host(path, ctx, FORMAT, "xml")
        if not host:
            return
        state = _Snapshots(host, ctx)
        doc: list[str] = []
        start, opened = 0, False
        latest = -math.inf
        for first, lines in iter_lines(path, ctx.read_bytes, ctx.rejects, FORMAT):
            for offset, line in enumerate(lines):
                if not doc and not line.strip():
                    continue
                began = _START.match(line.lstrip()) is not None
                if doc and ((began and opened) or len(doc) >= MAX_REPORT_LINES):
                    _cut_short(ctx, f"{src}:{start}", doc)  # a report begun again before the last one ended
                    doc = []
                if not doc:
                    if not began:  # between reports (a cron job's own output, say): not nvidia-smi's
                        ctx.rejects.reject(FORMAT, f"{src}:{first + offset}", "a line outside any report",
                                           line.strip()[:120])
                        continue
                    start, opened = first + offset, False
                opened = opened or "<nvidia_smi_log" in line
                doc.append(line)
                if _END in line:
                    latest = max(latest, state.document("\n".join(doc), src, start))
                    doc = []
            if len(state.points.sids) >= ctx.chunk_rows:
                yield state.points.flush()
        if doc:
            _cut_short(ctx, f"{src}:{start}", doc)
        if state.points.sids:
            yield state.points.flush()
        if latest > -math.inf:
            note_zoneless(ctx, FORMAT, src, path, latest)


class _Snapshots:
    """Reads a file's reports into the points of its GPUs."""

    def __init__(self, host: str, ctx: ReadContext) -> None:
        self.host, self.ctx = host, ctx
        self.points = GpuPoints(ctx, FORMAT)
        for field, unit, _ in FIELDS:
            metric, _ = _metric(field, unit)
            if metric not in ctx.mapper.rules:
                ctx.mapper.unmapped_metrics[metric] += 1

    def document(self, text: str, src: str, line: int) -> float:
        """Read one snapshot, which begins at ``line`` of ``src``; its time, or -inf when it is rejected."""
        rejects = self.ctx.rejects
        position = f"{src}:{line}"
        try:
            root = ET.fromstring(text)
        except ET.ParseError as exc:
            row = exc.position[0]
            rejects.reject(FORMAT, f"{src}:{line + row - 1}", f"not well-formed XML: {exc}",
                           next(iter(text.splitlines()[row - 1:row]), "").strip()[:120])
            return -math.inf
        if root.tag != "nvidia_smi_log":
            rejects.reject(FORMAT, position, f"<{root.tag}> is not an nvidia-smi -q -x report")
            return -math.inf
        stamp = " ".join((root.findtext("timestamp") or "").split())
        try:
            ts = zoneless_epoch(dt.datetime.strptime(stamp, "%a %b %d %H:%M:%S %Y"), self.ctx.zone)
        except ValueError:
            rejects.reject(FORMAT, position, f"no timestamp it can read ({stamp or 'none'}): a snapshot cannot be "
                                             "placed in time without it", "")
            return -math.inf
        for index, gpu in enumerate(root.findall("gpu")):
            self._gpu(gpu, str(index), ts, position)
        return ts

    def _gpu(self, gpu: ET.Element, index: str, ts: float, position: str) -> None:
        labels = {"Hostname": self.host, "index": index}
        for label, text in (("uuid", gpu.findtext("uuid")), ("pci_bus_id", gpu.get("id")),
                            ("modelName", gpu.findtext("product_name"))):
            if text and text.strip().lower() not in NO_READING:
                labels[label] = text.strip()
        for field, value in _readings(gpu, position, self.ctx):
            metric, factor = _metric(*field)
            if metric in self.ctx.mapper.rules:
                self.points.add(metric, labels, ts, value * factor, position)


def _readings(gpu: ET.Element, position: str, ctx: ReadContext) -> Iterator[tuple[tuple[str, str], float]]:
    """One GPU's readings as ((query field, unit), value before the unit's factor); a value that is no number is
    rejected with the element."""

    def value(field: str, elem_path: str) -> float | None:
        text = (gpu.findtext(elem_path) or "").strip()
        if text.lower() in NO_READING:
            return None
        got = cell_value(field, text)
        if got is None:
            ctx.rejects.reject(FORMAT, position, f"<{elem_path}>: {text[:60]!r} is not a number")
        return got

    for field, unit, paths in FIELDS:
        for elem_path in paths:
            got = value(field, elem_path) if gpu.find(elem_path) is not None else None
            if got is not None:
                yield (field, unit), got
                break
    if gpu.find("gpu_recovery_action") is None:  # before R570
        reset = value("", "gpu_reset_status/reset_required") if gpu.find("gpu_reset_status") is not None else None
        drain = value("", "gpu_reset_status/drain_and_reset_recommended") if reset is not None else None
        if reset is not None:
            yield ("gpu_recovery_action", ""), 4.0 if drain else 1.0 if reset else 0.0
    for field, total, parts in ECC_TOTALS:
        if gpu.find(total) is not None:
            got = value(field, total)
        else:
            counts = [value(field, p) for p in parts if gpu.find(p) is not None]
            counts = [c for c in counts if c is not None]
            got = sum(counts) if counts else None
        if got is not None:
            yield (field, ""), got
    for block, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                          ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        reasons = gpu.find(block)
        if reasons is None or not len(reasons):
            continue
        mask, read = 0, False
        for reason in reasons:
            bit = EVENT_REASON_BITS.get(reason.tag.removeprefix(prefix))
            state = (reason.text or "").strip().lower()
            if bit is None or state in NO_READING:
                continue
            read = True
            if state == "active":
                mask |= bit
        if read:
            yield ("clocks_event_reasons.active", ""), float(mask)
        break


def looks_like(head: bytes) -> bool:
    """Whether a file's first bytes are an ``nvidia-smi -q -x`` report."""
    return head.lstrip().startswith((b"<?xml", b"<nvidia_smi_log", b"<!DOCTYPE nvidia_smi_log")) and \
        b"nvidia_smi_log" in head
