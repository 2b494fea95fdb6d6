"""Readers and writers of recorded telemetry (docs/architecture.md §8), the sniffing that picks one per file, and what a
file no reader takes is (:func:`describe_unread`), so a replay can say why it skipped it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daemon.ingest.formats.reader import ReadContext, Reader, open_binary
from daemon.ingest.formats.columnar import ColumnarReader, ColumnarWriter
from daemon.ingest.formats.fabricmanager import STAMP as FABRIC_MANAGER_STAMP, FabricManagerReader
from daemon.ingest.formats.kernel_events import parse_kernel_message
from daemon.ingest.formats.kernellog import (JOURNAL_ANNOTATION, JOURNAL_SINCE_BOOT, UNKNOWN_MONTH_ADVICE,
                                             JournalJsonReader, TextLogReader, looks_like_journal_json, unknown_month)
from daemon.ingest.formats.openmetrics import OpenMetricsReader
from daemon.ingest.formats.promjson import QueryRangeReader
from daemon.ingest.formats.rasdaemon_sqlite import RasdaemonReader
from daemon.ingest.formats.smi import SmiReader
from daemon.ingest.formats import (ipmisel, journalexport, journalfile, journalverbose, nvsmicsv, nvsmireport,
                                   nvsmitable, rasmcctl, vmexport)
from daemon.ingest.formats.ipmisel import IpmiSelReader
from daemon.ingest.formats.journalexport import JournalExportReader
from daemon.ingest.formats.journalfile import JournalFileReader
from daemon.ingest.formats.journalverbose import JournalVerboseReader
from daemon.ingest.formats.nvsmicsv import NvidiaSmiCsvReader
from daemon.ingest.formats.nvsmireport import NvidiaSmiTextReader, NvidiaSmiXmlReader
from daemon.ingest.formats.nvsmitable import NvidiaSmiTableReader
from daemon.ingest.formats.rasmcctl import RasMcCtlReader
from daemon.ingest.formats.vmexport import VmExportReader

__all__ = [
    "ColumnarReader", "ColumnarWriter", "FabricManagerReader", "IpmiSelReader", "JournalExportReader",
    "JournalFileReader", "JournalJsonReader", "JournalVerboseReader", "NvidiaSmiCsvReader", "NvidiaSmiTableReader",
    "NvidiaSmiTextReader", "NvidiaSmiXmlReader", "OpenMetricsReader", "QueryRangeReader", "RasMcCtlReader",
    "RasdaemonReader",
    "ReadContext", "Reader", "SmiReader", "TextLogReader", "VmExportReader", "SHAPES", "Shape", "describe_unread",
    "sniff",
]

# A sample line: a metric name, its labels, a number (and a timestamp). "Tue 2025-01-21 04:41:44 UTC host kernel: ..."
# (journalctl -o short-full) starts with a name too: it is the number after it that tells them apart.
_EXPOSITION = re.compile(rb"^[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?[ \t]+"
                         rb"(?:[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|[Nn]a[Nn]|[Ii]nf))"
                         rb"(?:[ \t]+-?\d+(?:\.\d+)?)?[ \t]*$")
# A sample line whose name is in its labels, as ``promtool tsdb dump`` prints them (labels.String(): sorted, so
# ``Hostname`` comes before ``__name__``), not JSON (``{"``).
_LABELS_FIRST = re.compile(rb'^\{[a-zA-Z_][a-zA-Z0-9_]*="')
_KMSG = re.compile(r"^\d+,\d+,\d+,[^;]*;")  # /dev/kmsg: "6,3964,206764307,-;message"
_PSTORE_HEADER = re.compile(r"^(Panic|Oops|Emergency|Shutdown|Halt|Poweroff|Restart|Unknown)#\d+ Part\d+\s*$")
_LEVEL_RAW = re.compile(r"^<\d+>\[\s*\d+\.\d+\]")  # dmesg -r / pstore: "<6>[  201.650687] ..."
_RECORD_JOURNAL = "record it with 'journalctl -o short-iso' or '-o json'"


def _text(line: bytes) -> str:
    return line.decode("utf-8", "replace")


def _first_record(head: bytes, first: bytes) -> bytes:
    """A text log's first line that is a record: past journalctl's own lines ("-- Logs begin at ... --")."""
    if not JOURNAL_ANNOTATION.match(_text(first)):
        return first
    return next((ln.strip() for ln in head.splitlines() if ln.strip() and not JOURNAL_ANNOTATION.match(_text(ln))),
                b"")


@dataclass(frozen=True)
class Shape:
    """A kind of file :func:`sniff` tells: its name, the test on the file's first 4 KiB and first non-blank line,
    and the reader that takes it."""

    name: str
    matches: Callable[[bytes, bytes], bool]
    reader: Callable[[], Reader]


SHAPES: tuple[Shape, ...] = (
    Shape("rasdaemon SQLite", lambda head, first: head.startswith(b"SQLite format 3\x00"), RasdaemonReader),
    Shape("Parquet", lambda head, first: head.startswith(b"PAR1"), ColumnarReader),
    Shape("journal file", lambda head, first: journalfile.looks_like(head), JournalFileReader),
    # promtool tsdb dump: '{__name__="up", job="x"} 1 1700000000000'
    Shape("promtool dump", lambda head, first: _LABELS_FIRST.match(first) is not None, OpenMetricsReader),
    Shape("VictoriaMetrics export", lambda head, first: vmexport.looks_like(first), VmExportReader),
    Shape("journal export", lambda head, first: journalexport.looks_like(first), JournalExportReader),
    Shape("journal JSON", looks_like_journal_json, JournalJsonReader),
    Shape("smi snapshots", lambda head, first: first.startswith(b"{") and b'"tool"' in first and b'"output"' in first,
          SmiReader),
    Shape("Prometheus query_range", lambda head, first: first.startswith(b"{"), QueryRangeReader),
    Shape("columnar CSV", lambda head, first: first.startswith(b"ts,"), ColumnarReader),
    Shape("nvidia-smi CSV", lambda head, first: nvsmicsv.looks_like(_text(first)), NvidiaSmiCsvReader),
    Shape("nvidia-smi XML", lambda head, first: nvsmireport.looks_like_xml(head), NvidiaSmiXmlReader),
    Shape("nvidia-smi text", lambda head, first: nvsmireport.looks_like_text(_text(first)), NvidiaSmiTextReader),
    Shape("nvidia-smi table", nvsmitable.looks_like, NvidiaSmiTableReader),
    Shape("journal verbose", lambda head, first: journalverbose.looks_like(_text(first)), JournalVerboseReader),
    Shape("IPMI SEL", lambda head, first: ipmisel.looks_like(_text(first)), IpmiSelReader),
    Shape("ras-mc-ctl --errors", lambda head, first: rasmcctl.looks_like(_text(first)), RasMcCtlReader),
    # log shapes before exposition: "kern  :warn  : 2025-..." (dmesg --decode) also looks like a sample's name
    Shape("kernel log", lambda head, first: TextLogReader._detect(_text(_first_record(head, first))) is not None,
          TextLogReader),
    Shape("Fabric Manager log", lambda head, first: FABRIC_MANAGER_STAMP.match(_text(first)) is not None,
          FabricManagerReader),
    Shape("exposition", lambda head, first: first.startswith(b"#") or _EXPOSITION.match(first) is not None,
          OpenMetricsReader),
)
"""Every kind of file replay reads, in the order :func:`sniff` tries them (the first that matches takes it)."""


def sniff(path: Path) -> Reader | None:
    """Pick the reader for a file from its first bytes (:data:`SHAPES`, in order); None when no reader fits."""
    try:
        with open_binary(path) as fh:
            head = fh.read(4096)
    except OSError:
        return None
    first = next((ln.strip() for ln in head.splitlines() if ln.strip()), b"")
    return next((shape.reader() for shape in SHAPES if shape.matches(head, first)), None)


def describe_unread(path: Path) -> str:
    """What a file no reader takes is, and why it is not replayed (for the replay's summary)."""
    try:
        if path.stat().st_size == 0:
            return "empty"
        with open_binary(path) as fh:
            head = fh.read(1 << 20)
            cut = getattr(fh, "cut", None)
    except (OSError, EOFError) as exc:
        return f"unreadable: {exc}"
    if cut and not head:
        return f"a compressed file cut short before any of its data: {cut}"
    if b"\x00" in head[:4096]:
        return "a binary file of no format raswarden reads"
    lines = [ln for ln in head.decode("utf-8", "replace").splitlines() if ln.strip()]
    if not lines:
        return "blank lines only"
    ras = [parse_kernel_message(_KMSG.sub("", _LEVEL_RAW.sub("", ln)).strip()) for ln in lines[:20000]]
    ras = [e for e in ras if e is not None and e.kind != "boot"]
    held = ""
    if ras:
        shown = ", ".join(f"{e.kind}{'' if e.code is None else f' {e.code}'}"
                          f"{'' if not e.pci else f' at {e.pci}'}" for e in ras[:3])
        held = f"; it holds {len(ras)} hardware RAS line(s) ({shown}{', ...' if len(ras) > 3 else ''}), not replayed"
    if _KMSG.match(lines[0]):
        return ("a /dev/kmsg dump: its stamps count microseconds since boot and it gives no boot time; record the "
                "journal (journalctl -k -o json) or 'dmesg --time-format iso' instead" + held)
    if _PSTORE_HEADER.match(lines[0]) or (_LEVEL_RAW.match(lines[0]) and "erst" in path.name):
        return ("a pstore crash record: the kernel's last messages before a crash or reboot, stamped in seconds "
                "since that boot with no wall-clock time" + held)
    if _LEVEL_RAW.match(lines[0]):
        return ("raw dmesg with levels (dmesg -r): its stamps count seconds since boot and the file gives no boot "
                "time; record it with 'dmesg -T' or 'dmesg --time-format iso'" + held)
    if all(JOURNAL_ANNOTATION.match(ln) for ln in lines):
        return f"journalctl's output without a record (it says {lines[-1].strip()!r})"
    word = unknown_month(lines[0])
    if word is not None:
        return f"a kernel log whose stamps name a month, {word!r}, that {UNKNOWN_MONTH_ADVICE}" + held
    if JOURNAL_SINCE_BOOT.match(lines[0]):  # (short-monotonic is taken for raw dmesg by the reader, which says so)
        return ("journalctl -o short-delta: its stamps count seconds since boot and the file gives no boot time; "
                f"{_RECORD_JOURNAL}" + held)
    return f"not a telemetry format raswarden reads (it begins {lines[0][:60]!r})" + held
