"""rasdaemon's ``ras-mc-ctl --errors`` listing: what a host's rasdaemon recorded, as operators keep it and sosreport
saves it (``sos_commands/rasdaemon/ras-mc-ctl_--errors``) where its database was not kept.

ras-mc-ctl prints the database's tables one section after the other, each a header and one record a line, or one line
saying it has none (rasdaemon's ``util/ras-mc-ctl.in``, ``sub errors``)::

    Memory controller events:
    1 2026-03-02 00:01:00 +0000 3 Corrected error(s): memory read error at CPU_SrcID#0_MC#0_Chan#1_DIMM#0 location: ...

    PCIe AER events:
    1 2026-03-02 00:02:00 +0000 0000:3a:00.0 Uncorrected (Fatal) error: Surprise Down Error

    No Extlog errors.

    MCE events:
    1 2026-03-02 00:03:00 +0000 error: Corrected error, no action required., CPU 2, bank Unified Memory ..., mci CECC...

A record of the tables the database reader reads (memory controller, PCIe AER, MCE, Arm processor, Extlog, devlink,
disk and memory failure events) is the event that reader makes of its row (:mod:`rasdaemon_sqlite`), rebuilt from the
words ras-mc-ctl prints; the listing says less than the database in two places: an MCE of bank 0 prints no bank (its
code is then unknown), and an Arm processor error prints no error information (a watch, as an older rasdaemon's row).
The sections of other tables (CXL, signals, vendor tables) pass unread, counted in the summary; a line of a read
section in no record's shape is rejected with its number. The listing names no host: the file's name does
(``<host>.ras-mc-ctl``, ``<host>.ras-mc-ctl.txt``), or in a sosreport the report's ``hostname`` file.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from daemon.ingest.batch import Batch
from daemon.ingest.formats.rasdaemon_sqlite import GHES_SEVERITY, append_record, row_event
from daemon.ingest.formats.reader import ReadContext, host_in_name, iter_lines
from detectors.schema import events_frame

FORMAT = "ras-mc-ctl"
# each section's header, and the table it lists (the database reader's name for it)
SECTIONS = {"Memory controller events:": "mc_event", "PCIe AER events:": "aer_event",
            "ARM processor events:": "arm_event", "Extlog events:": "extlog_event",
            "Devlink events:": "devlink_event", "Disk errors:": "disk_errors",
            "Memory failure events:": "memory_failure_event", "MCE events:": "mce_record"}
FIRST_LINES = ("Memory controller events:", "No Memory errors.")  # (the memory controller's section comes first)
_HEADER = re.compile(r"^[A-Z][A-Za-z0-9 ]* (?:events|errors|events summary):$")
_NONE = re.compile(r"^No [A-Za-z0-9 ]+\.$")  # "No PCIe AER errors.", "No SIGNAL event."
_RECORD = re.compile(r"^(\d+) (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}) (.*)$")
# the rest of a record after its id and time, per table, as ras-mc-ctl prints it
_REST = {
    "mc_event": re.compile(r"^(\d+) (\S+) error\(s\): (.*?) at (.*?) location: "),
    "aer_event": re.compile(r"^(\S+) (.+?) error: (.*)$"),
    "arm_event": re.compile(r"^error: (?:error_count=(\d+), )?affinity_level=[^,]*, mpidr=0x([0-9a-fA-F]+),"),
    "extlog_event": re.compile(r"^error: type=(.*?), severity=(.*?), address=0x[0-9a-fA-F]+, fru_id=[^,]*, "
                               r"fru_text='(.*?)',"),
    "devlink_event": re.compile(r"^error: bus_name=(.*?), dev_name=(.*?), driver_name=(.*?), reporter_name=(.*?), "
                                r"message='(.*)',$"),
    "disk_errors": re.compile(r"^error: dev=(.*?), sector=(.*?), nr_sector=(.*?), error='(.*?)', rwbs='(.*?)',"),
    "memory_failure_event": re.compile(r"^error: pfn=(.*?), page_type=(.*?), action_result=(.*?)\s*$"),
    "mce_record": re.compile(r"^error: (.*)$"),
}
# where an MCE's message ends: the first of the fields ras-mc-ctl prints after it
_MCE_FIELDS = re.compile(r", (?:CPU \d+|bank |mcg |mci |mca )")


def looks_like(first: str) -> bool:
    """A ``ras-mc-ctl --errors`` listing's first line."""
    return first.strip() in FIRST_LINES


def host_of_listing(path: Path) -> str | None:
    """The host a listing belongs to: its name's (``<host>.ras-mc-ctl...``), or in a sosreport
    (``.../sos_commands/rasdaemon/ras-mc-ctl_--errors``) the report's ``hostname`` file; None when neither says."""
    host = host_in_name(path, ".ras-mc-ctl")
    if host:
        return host
    if path.parent.name == "rasdaemon" and path.parent.parent.name == "sos_commands":
        root = path.parent.parent.parent
        for name in (root / "hostname", root / "sos_commands" / "host" / "hostname"):
            try:
                first = name.read_text(errors="replace").strip().splitlines()
            except OSError:
                continue
            if first and first[0].strip():
                return first[0].strip().split(".", 1)[0]
    return None


def _row(table: str, rest: str) -> tuple | None:
    """The database row (its columns after id and time) a record's words give; None when they are in no shape."""
    m = _REST[table].match(rest)
    if m is None:
        return None
    if table == "mc_event":
        count, err_type, msg, label = m.groups()
        return int(count), err_type, msg, label
    if table == "arm_event":
        count, mpidr = m.groups()
        return int(count) if count else None, int(mpidr, 16), None, None, None
    if table == "mce_record":
        text = m.group(1)
        msg = _MCE_FIELDS.split(text, maxsplit=1)[0]
        bank = re.search(r", bank=0x([0-9a-fA-F]+)(?:,|$)", text)
        mci, mcg = re.search(r", mci ([^,]*)", text), re.search(r", mcg ([^,]*)", text)
        return (int(bank.group(1), 16) if bank else None, msg, mci.group(1) if mci else None,
                mcg.group(1) if mcg else None)
    return m.groups()


def _record_event(table: str, row: tuple) -> tuple[str, int | None, str, str, str | None]:
    """(kind, code, severity, message, pci) of a record, as the database reader makes it of the same row."""
    if table == "extlog_event":  # (printed by name: the type's and severity's words, not their numbers)
        etype, severity, fru = row
        return "edac", 1, GHES_SEVERITY.get(severity.strip().lower(), "info"), f"extlog {etype} {fru}".strip(), None
    return row_event(table, (None, None, *row))


class RasMcCtlReader:
    """Reads a ``ras-mc-ctl --errors`` listing; see the module docstring."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        src = str(path)
        host = host_of_listing(path)
        if not host:
            ctx.rejects.refuse(FORMAT, src, "a ras-mc-ctl listing names no host: name the file <host>.ras-mc-ctl")
            return
        node = ctx.mapper.topology.resolve_host(host)
        if node is None:
            ctx.rejects.refuse(FORMAT, src, f"host {host!r} is an address with no alias in the topology")
            return
        table: str | None = None
        unread: Counter = Counter()  # (another table's section: its records)
        section = ""
        out: list[tuple] = []
        for first, lines in iter_lines(path, ctx.read_bytes, ctx.rejects, FORMAT):
            for offset, line in enumerate(lines):
                text = line.strip()
                if not text:
                    continue
                if _NONE.match(text):  # (a table with no records: the section before it has ended)
                    section, table = "", None
                    continue
                position = f"{src}:{first + offset}"
                if _HEADER.match(text):
                    section, table = text[:-1], SECTIONS.get(text)
                    continue
                record = _RECORD.match(text)
                if table is None:
                    if record:
                        unread[section or "before any section"] += 1
                    continue  # (another table's section, its continuation lines too: CXL's header logs)
                row = _row(table, record.group(3)) if record else None
                if row is None:
                    ctx.rejects.reject(FORMAT, position, f"not a record of ras-mc-ctl's {section!r}", text[:120])
                    continue
                append_record(out, ctx, (FORMAT, position, "bad record"), node, table, record.group(2),
                              _record_event, row)
            if len(out) >= ctx.chunk_rows:
                yield Batch(events=events_frame(out))
                out = []
        if out:
            yield Batch(events=events_frame(out))
        if unread:
            shown = ", ".join(f"{name!r} x{n}" for name, n in unread.most_common(3))
            ctx.rejects.note(FORMAT, src, f"{sum(unread.values())} record(s) of sections raswarden does not read "
                                          f"passed unread: {shown}")
