"""``nvidia-smi -q`` reports, as XML (``-q -x``) or as text: the GPU report a node keeps without an exporter (a cron
job's ``nvidia-smi -q -x >> <host>.nvidia-smi.xml``, ``nvidia-smi -q -l 60 > <host>.nvidia-smi.txt``), as many
reports as the file holds. nvidia-smi names no host: the file's name does (``<host>.nvidia-smi.xml``, ``.txt``), as
for its CSV log.

The two spellings are one report: the XML's ``<temperature><gpu_temp>`` is the text's ``Temperature`` / ``GPU Current
Temp``. Each report's timestamp (``Fri Aug  4 11:44:30 2023``, the node's local time without a zone) is read in the
context's zone, as the CSV log's. Each GPU is the GPU of that index (nvidia-smi lists them in index order; its heading
is its PCI address), and each reading becomes the query field nvidia-smi's CSV log names
(:mod:`daemon.ingest.formats.nvsmicsv`), so one name table (``daemon/ingest/names/nvidia_gpu_exporter.csv``) reads
all three: temperatures, power, clocks, utilisation, memory, ECC counts (the schema before driver 450 gives single-
and double-bit totals, later ones SRAM and DRAM counts, summed here as the query field's total sums them), retired
pages, remapped rows, the clock event (throttle) reasons as NVML's bitmask, the PCIe replay counter and the driver's
recovery action (``gpu_recovery_action`` from R570; before it the GPU reset status's ``reset_required`` and
``drain_and_reset_recommended``, read as NVML's GPU_RESET and DRAIN_AND_RESET).

``N/A``, ``Not Supported`` and ``Requested functionality has been deprecated`` are no reading. An XML report cut
short (the file copied while nvidia-smi wrote it) or not well-formed, a report with no timestamp, a value that is no
number and a line outside any report are rejected with the file and line; the rest of the file is read. (A text
report has no end to miss: one cut short gives the readings it holds.)
"""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path

from daemon.ingest.batch import Batch
from daemon.ingest.formats.nvsmicsv import GpuPoints, cell_value, exporter_metric, named_host
from daemon.ingest.formats.reader import ReadContext, iter_lines
from daemon.timetext import zoneless_epoch

XML_FORMAT = "nvidia_smi_xml"
TEXT_FORMAT = "nvidia_smi_text"
# (query field, its unit in the CSV header, the paths under a GPU that give it, as the XML report names them and as
# the text report does (lower case): the first with a reading)
FIELDS = (
    ("temperature.gpu", "", ("temperature/gpu_temp", "temperature/gpu current temp")),
    ("temperature.memory", "", ("temperature/memory_temp", "temperature/memory current temp")),
    ("power.draw", "W", ("gpu_power_readings/power_draw", "gpu_power_readings/instant_power_draw",
                         "power_readings/power_draw", "power_readings/instant_power_draw",
                         "gpu power readings/power draw", "gpu power readings/instantaneous power draw",
                         "power readings/power draw")),
    ("clocks.current.sm", "MHz", ("clocks/sm_clock", "clocks/sm")),
    ("clocks.current.memory", "MHz", ("clocks/mem_clock", "clocks/memory")),
    ("utilization.gpu", "%", ("utilization/gpu_util", "utilization/gpu")),
    ("memory.used", "MiB", ("fb_memory_usage/used", "fb memory usage/used")),
    ("memory.free", "MiB", ("fb_memory_usage/free", "fb memory usage/free")),
    ("retired_pages.single_bit_ecc.count", "", ("retired_pages/multiple_single_bit_retirement/retired_count",
                                                "retired pages/single bit ecc")),
    ("retired_pages.double_bit.count", "", ("retired_pages/double_bit_retirement/retired_count",
                                            "retired pages/double bit ecc")),
    ("retired_pages.pending", "", ("retired_pages/pending_retirement", "retired_pages/pending_blacklist",
                                   "retired pages/pending page retirement", "retired pages/pending page blacklist")),
    ("remapped_rows.correctable", "", ("remapped_rows/remapped_row_corr", "remapped rows/correctable error")),
    ("remapped_rows.uncorrectable", "", ("remapped_rows/remapped_row_unc", "remapped rows/uncorrectable error")),
    ("remapped_rows.pending", "", ("remapped_rows/remapped_row_pending", "remapped rows/pending")),
    ("remapped_rows.failure", "", ("remapped_rows/remapped_row_failure",
                                   "remapped rows/remapping failure occurred")),
    ("remapped_rows.histogram.none", "", ("remapped_rows/row_remapper_histogram/row_remapper_histogram_none",
                                          "remapped rows/bank remap availability histogram/none")),
    ("pcie.replay_counter", "", ("pci/replay_counter", "pci/replays since reset")),
    ("pcie.link.width.current", "", ("pci/pci_gpu_link_info/link_widths/current_link_width",
                                     "pci/gpu link info/link width/current")),
    ("pcie.link.width.max", "", ("pci/pci_gpu_link_info/link_widths/max_link_width",
                                 "pci/gpu link info/link width/max")),
    ("gpu_recovery_action", "", ("gpu_recovery_action", "gpu recovery action")),
)
# Before R570: (reset required, drain and reset recommended), as XML and as text
RESET_STATUS = (("gpu_reset_status/reset_required", "gpu_reset_status/drain_and_reset_recommended"),
                ("gpu reset status/reset required", "gpu reset status/drain and reset recommended"))
# ECC totals: (query field, the schema's totals before 450, the later schema's counts summed), XML's and text's
ECC_TOTALS = tuple(
    (f"ecc.errors.{kind}.{scope}.total",
     (f"ecc_errors/{scope}/{bits}/total", f"ecc errors/{scope}/{bits.replace('_', ' ')}/total"),
     tuple(f"ecc_errors/{scope}/{p}" for p in parts) + tuple(f"ecc errors/{scope}/{p}" for p in text_parts))
    for scope in ("volatile", "aggregate")
    for kind, bits, parts, text_parts in (
        ("corrected", "single_bit", ("sram_correctable", "dram_correctable"),
         ("sram correctable", "dram correctable")),
        ("uncorrected", "double_bit",
         ("sram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded", "dram_uncorrectable"),
         ("sram uncorrectable", "sram uncorrectable parity", "sram uncorrectable sec-ded", "dram uncorrectable"))))
# NVML's clock event reasons (nvmlClocksEventReason*), by the XML's element name after its prefix or the text's key
EVENT_REASON_BITS = {"gpu_idle": 0x1, "idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
                     "hw_slowdown": 0x8, "sync_boost": 0x10, "sw_thermal_slowdown": 0x20,
                     "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80, "display_clocks_setting": 0x100,
                     "display_clock_setting": 0x100}
# the block of reasons (since driver 535 "event", before it "throttle") and the prefix of the XML's element names
EVENT_REASON_BLOCKS = (("clocks_event_reasons/", "clocks_event_reason_"),
                       ("clocks_throttle_reasons/", "clocks_throttle_reason_"),
                       ("clocks event reasons/", ""), ("clocks throttle reasons/", ""))
NO_READING = frozenset({"", "n/a", "[n/a]", "not supported", "[not supported]", "requested functionality has been "
                        "deprecated", "not available"})
# a report of 8 GPUs is about 3,000 lines (their processes add a few each); a "report" far longer never ends
MAX_REPORT_LINES = 200_000
_XML_END = "</nvidia_smi_log>"
_XML_START = re.compile(r"<\?xml|<nvidia_smi_log[\s>]")
TEXT_HEADING = re.compile(r"^=+NVSMI LOG=+\s*$")
_TEXT_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


def report_time(text: str, ctx: ReadContext) -> float | None:
    """A report's timestamp (``Fri Aug  4 11:44:30 2023``, the node's local time) in seconds, None when unreadable."""
    try:
        return zoneless_epoch(dt.datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y"), ctx.zone)
    except ValueError:
        return None


class _Reports:
    """The points of a file's reports: each GPU's readings (a flat map of its paths to their text) by its index."""

    def __init__(self, host: str, ctx: ReadContext, fmt: str) -> None:
        self.host, self.ctx, self.fmt = host, ctx, fmt
        self.points = GpuPoints(ctx, fmt)
        for field, unit, _ in FIELDS:
            metric, _ = exporter_metric(field, unit)
            if metric not in ctx.mapper.rules:
                ctx.mapper.unmapped_metrics[metric] += 1

    def stamped(self, stamp: str, position: str) -> float | None:
        """A report's time, or None (rejected) when it has none that can be read."""
        ts = report_time(stamp, self.ctx)
        if ts is None:
            self.ctx.rejects.reject(self.fmt, position, f"no timestamp it can read ({stamp or 'none'}): a report "
                                                        "cannot be placed in time without it")
        return ts

    def gpu(self, values: dict[str, str], index: int, bus_id: str, ts: float, position: str,
            lines: dict[str, int] | None = None) -> None:
        """One GPU of a report: ``values`` by their paths (:data:`FIELDS`); a bad value is rejected at ``position``
        (the GPU's) or, where ``lines`` gives it, at its own line of the same file."""
        labels = {"Hostname": self.host, "index": str(index)}
        for label, text in (("uuid", values.get("uuid") or values.get("gpu uuid")), ("pci_bus_id", bus_id),
                            ("modelName", values.get("product_name") or values.get("product name"))):
            if text and text.lower() not in NO_READING:
                labels[label] = text
        src = position.rsplit(":", 1)[0]

        def where(path: str) -> str:
            return f"{src}:{lines[path]}" if lines and path in lines else position

        for (field, unit), value in _readings(values, where, self.ctx, self.fmt):
            metric, factor = exporter_metric(field, unit)
            if metric in self.ctx.mapper.rules:
                self.points.add(metric, labels, ts, value * factor, position)



def _readings(values: dict[str, str], where: Callable[[str], str], ctx: ReadContext,
              fmt: str) -> Iterator[tuple[tuple[str, str], float]]:
    """One GPU's readings as ((query field, unit), value before the unit's factor); a value that is no number is
    rejected with its path, at ``where(path)``."""

    def value(field: str, path: str) -> float | None:
        text = values.get(path, "")
        if text.lower() in NO_READING:
            return None
        got = cell_value(field, text)
        if got is None:
            ctx.rejects.reject(fmt, where(path), f"{path}: {text[:60]!r} is not a number")
        return got

    for field, unit, paths in FIELDS:
        got = next((v for v in (value(field, p) for p in paths if p in values) if v is not None), None)
        if got is not None:
            yield (field, unit), got
    if "gpu_recovery_action" not in values and "gpu recovery action" not in values:  # before R570
        for required, drain in RESET_STATUS:
            reset = value("", required) if required in values else None
            if reset is not None:
                yield ("gpu_recovery_action", ""), 4.0 if value("", drain) else 1.0 if reset else 0.0
    for field, totals, parts in ECC_TOTALS:
        total = next((t for t in totals if t in values), None)
        if total is not None:
            got = value(field, total)
        else:
            counts = [c for c in (value(field, p) for p in parts if p in values) if c is not None]
            got = sum(counts) if counts else None
        if got is not None:
            yield (field, ""), got
    for block, prefix in EVENT_REASON_BLOCKS:
        mask, read = 0, False
        for path, text in values.items():
            if not path.startswith(block):
                continue
            name = path.rsplit("/", 1)[-1].removeprefix(prefix).replace(" ", "_")
            bit, state = EVENT_REASON_BITS.get(name), text.lower()
            if bit is not None and state not in NO_READING:
                read = True
                mask |= bit if state == "active" else 0
        if read:
            yield ("clocks_event_reasons.active", ""), float(mask)
            break


def _flatten(element: ET.Element, prefix: str, out: dict[str, str],
             only: frozenset[str] | None = None) -> dict[str, str]:
    """An XML element's descendants as a flat map of their paths (``temperature/gpu_temp``) to their text; of its
    children only those named in ``only``, where given."""
    for child in element:
        if only is not None and child.tag not in only:
            continue
        path = prefix + child.tag
        out[path] = (child.text or "").strip()
        _flatten(child, path + "/", out)
    return out


# the elements of a GPU the readings come from (a report's supported clocks, processes and MIG devices are most of
# its lines: not walked)
_READ_ELEMENTS = frozenset(
    [p.split("/")[0] for _, _, paths in FIELDS for p in paths]
    + [p.split("/")[0] for pair in RESET_STATUS for p in pair]
    + [p.split("/")[0] for _, totals, parts in ECC_TOTALS for p in (*totals, *parts)]
    + [block.rstrip("/") for block, _ in EVENT_REASON_BLOCKS] + ["uuid", "product_name"])


class NvidiaSmiXmlReader:
    """Reads ``nvidia-smi -q -x`` reports; see the module docstring."""

    format = XML_FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        src = str(path)
        host = named_host(path, ctx, XML_FORMAT, "xml")
        if not host:
            return
        reports = _Reports(host, ctx, XML_FORMAT)
        doc: list[str] = []
        start, opened = 0, False
        for first, lines in iter_lines(path, ctx.read_bytes, ctx.rejects, XML_FORMAT):
            for offset, line in enumerate(lines):
                if not doc and not line.strip():
                    continue
                # (the "in" tests first: most lines of a report are neither its start nor its end)
                began = ("<?xml" in line or "<nvidia_smi_log" in line) and _XML_START.match(line.lstrip()) is not None
                if doc and ((began and opened) or len(doc) >= MAX_REPORT_LINES):
                    _cut_short(ctx, f"{src}:{start}", doc)  # a report begun again before the last one ended
                    doc = []
                if not doc:
                    if not began:  # between reports (a cron job's own output, say): not nvidia-smi's
                        ctx.rejects.reject(XML_FORMAT, f"{src}:{first + offset}", "a line outside any report",
                                           line.strip()[:120])
                        continue
                    start, opened = first + offset, False
                opened = opened or "<nvidia_smi_log" in line
                doc.append(line)
                if _XML_END in line:
                    self._report("\n".join(doc), src, start, reports)
                    doc = []
            if len(reports.points.sids) >= ctx.chunk_rows:
                yield reports.points.flush()
        if doc:
            _cut_short(ctx, f"{src}:{start}", doc)
        yield from reports.points.finish(src, path)

    @staticmethod
    def _report(text: str, src: str, line: int, reports: _Reports) -> None:
        """Read one report, which begins at ``line`` of ``src``."""
        rejects = reports.ctx.rejects
        position = f"{src}:{line}"
        try:
            root = ET.fromstring(text)
        except ET.ParseError as exc:
            row = exc.position[0]
            rejects.reject(XML_FORMAT, f"{src}:{line + row - 1}", f"not well-formed XML: {exc}",
                           next(iter(text.splitlines()[row - 1:row]), "").strip()[:120])
            return
        if root.tag != "nvidia_smi_log":
            rejects.reject(XML_FORMAT, position, f"<{root.tag}> is not an nvidia-smi -q -x report")
            return
        ts = reports.stamped(root.findtext("timestamp") or "", position)
        if ts is None:
            return
        for index, gpu in enumerate(root.findall("gpu")):
            reports.gpu(_flatten(gpu, "", {}, _READ_ELEMENTS), index, gpu.get("id", ""), ts, position)


def _cut_short(ctx: ReadContext, position: str, doc: list[str]) -> None:
    ctx.rejects.reject(XML_FORMAT, position, f"a report cut short (no </nvidia_smi_log> in its {len(doc)} lines): "
                                             "its readings are not read", doc[0].strip()[:120])


class NvidiaSmiTextReader:
    """Reads ``nvidia-smi -q`` text reports (``==============NVSMI LOG==============`` heads each); see the module
    docstring. A key's path is its sections' and its own names in lower case (``remapped rows/pending``)."""

    format = TEXT_FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        src = str(path)
        host = named_host(path, ctx, TEXT_FORMAT, "txt")
        if not host:
            return
        reports = _Reports(host, ctx, TEXT_FORMAT)
        ts: float | None = None
        in_report = False
        # the GPU being read: its values, index, bus id, heading's position and its values' line numbers
        gpu: tuple[dict[str, str], int, str, str, dict[str, int]] | None = None
        sections: list[tuple[int, str]] = []  # (indent, path) of the sections the line is in
        index, stamp_read = 0, False
        for first, lines in iter_lines(path, ctx.read_bytes, ctx.rejects, TEXT_FORMAT):
            for offset, line in enumerate(lines):
                stripped = line.lstrip(" ")
                if not stripped.strip():
                    continue
                if len(stripped) == len(line) and line[0] in "=G":  # (cheap tests first: most lines are keys)
                    if TEXT_HEADING.match(line):
                        if gpu is not None and ts is not None:
                            reports.gpu(*gpu[:3], ts, *gpu[3:])
                        in_report, ts, gpu, index, stamp_read = True, None, None, 0, False
                        continue
                    heading = _TEXT_GPU.match(line) if in_report else None
                    if heading:
                        position = f"{src}:{first + offset}"
                        if gpu is not None and ts is not None:
                            reports.gpu(*gpu[:3], ts, *gpu[3:])
                        elif gpu is None and not stamp_read:  # the report's first GPU, and no time given before it
                            reports.stamped("", position)
                        gpu, sections = ({}, index, heading.group(1), position, {}), []
                        index += 1
                        continue
                if not in_report:
                    ctx.rejects.reject(TEXT_FORMAT, f"{src}:{first + offset}", "a line outside any report",
                                       stripped.strip()[:120])
                    continue
                colon = stripped.find(":")
                key = (stripped if colon < 0 else stripped[:colon]).rstrip().lower()
                if gpu is None:  # the report's own lines: its timestamp, driver, count of GPUs
                    if key == "timestamp" and not stamp_read and colon >= 0:
                        ts = reports.stamped(stripped[colon + 1:].strip(), f"{src}:{first + offset}")
                        stamp_read = True
                    continue
                indent = len(line) - len(stripped)
                while sections and sections[-1][0] >= indent:
                    sections.pop()
                key_path = f"{sections[-1][1]}/{key}" if sections else key
                if colon >= 0:
                    gpu[0][key_path] = stripped[colon + 1:].strip()
                    gpu[4][key_path] = first + offset
                sections.append((indent, key_path))
            if len(reports.points.sids) >= ctx.chunk_rows:
                yield reports.points.flush()
        if gpu is not None and ts is not None:
            reports.gpu(*gpu[:3], ts, *gpu[3:])
        yield from reports.points.finish(src, path)


def looks_like_xml(head: bytes) -> bool:
    """Whether a file's first bytes are an ``nvidia-smi -q -x`` report."""
    return head.lstrip().startswith((b"<?xml", b"<nvidia_smi_log", b"<!DOCTYPE nvidia_smi_log")) and \
        b"nvidia_smi_log" in head


def looks_like_text(first_line: str) -> bool:
    """Whether a file's first line heads an ``nvidia-smi -q`` text report."""
    return TEXT_HEADING.match(first_line) is not None
