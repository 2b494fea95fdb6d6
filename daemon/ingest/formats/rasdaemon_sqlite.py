"""rasdaemon SQLite databases (``ras-mc_event.db``): mc_event, aer_event, mce_record, extlog_event, and where
rasdaemon was built with them (rasdaemon's ras-record.c) devlink_event (the devlink health reporters' reports: a
network adapter's firmware failing, ``fw_fatal``, is mlx5's "health compromised"), memory_failure_event (the
kernel's handling of a poisoned host memory page: contained, ``Recovered`` or ``Delayed``, is the deferred error it
was; not contained, ``Failed`` or ``Ignored``, an uncorrected one), arm_event (an Arm host's processor errors: Grace
in GH200/GB200, Kunpeng beside Ascend), non_standard_event (a firmware's vendor-specific error sections, HiSilicon's
and Ampere's among them) and disk_errors (the block layer's failed requests).

A table's columns are those the running rasdaemon created: arm_event gained its error information (whether the
error was corrected) in rasdaemon 0.8.1, so a column an older rasdaemon lacks reads as unknown.

Each table is read incrementally by its ``id`` (``WHERE id > ? ORDER BY id LIMIT n``), so a reader can
resume where it stopped (the live collector persists the cursors). The database names no host: it
is taken from the file name (``<host>.db``, ``<host>.ras-mc_event.db``) or, for a plain
``ras-mc_event.db``, from its directory. Schema: rasdaemon 0.6.8 as Debian 12 ships it
(its ``ras-mc_event.db`` as ``rasdaemon --record`` creates it; fixtures/README.md).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import uuid
from pathlib import Path
from collections.abc import Callable, Iterator

from daemon import metrics
from daemon.ingest.batch import Batch
from daemon.ingest.formats.reader import ReadContext
from daemon.topology import is_address, normalize_pci, normalize_pci_function
from detectors.schema import events_frame

FORMAT = "rasdaemon"
TABLES = ("mc_event", "aer_event", "mce_record", "extlog_event", "devlink_event", "memory_failure_event", "arm_event",
          "non_standard_event", "disk_errors")
PAGE = 10_000

_COLUMNS = {
    "mc_event": ("err_count", "err_type", "err_msg", "label"),
    "aer_event": ("dev_name", "err_type", "err_msg"),
    "mce_record": ("bank", "error_msg", "mcistatus_msg", "mcgstatus_msg"),
    "extlog_event": ("etype", "error_count", "severity", "fru_text"),
    "devlink_event": ("bus_name", "dev_name", "driver_name", "reporter_name", "msg"),
    "memory_failure_event": ("pfn", "page_type", "action_result"),
    "arm_event": ("error_count", "mpidr", "error_type", "error_flags", "error_info"),
    "non_standard_event": ("sec_type", "fru_text", "severity"),
    "disk_errors": ("dev", "sector", "nr_sector", "error", "rwbs"),
}
# CPER section severities (UEFI spec, N.2.1): 0 recoverable, 1 fatal, 2 corrected, 3 informational.
_CPER_SEVERITY = {0: "uncorrected", 1: "fatal", 2: "corrected", 3: "info"}
# the same, as rasdaemon's non-standard handler and ras-mc-ctl's Extlog section word them
GHES_SEVERITY = {"recoverable": "uncorrected", "fatal": "fatal", "corrected": "corrected", "informational": "info"}
# The ARM processor error information's error_info (UEFI spec, N.2.4.4.1): its low 16 bits say which fields are
# valid; processor context corrupt (valid bit 3) at bit 25, corrected (valid bit 4) at bit 26.
_ARM_VALID_CONTEXT_CORRUPT, _ARM_CONTEXT_CORRUPT = 1 << 3, 1 << 25
_ARM_VALID_CORRECTED, _ARM_CORRECTED = 1 << 4, 1 << 26
# The block layer's errors that say the device failed a request (rasdaemon's ras-diskerror-handler.c words them);
# the others (out of space, retries, resources, unsupported operations) say nothing of the disk's health.
_DISK_FAULTS = frozenset({"timeout error", "recoverable transport error", "critical target error",
                          "critical nexus error", "critical medium error", "protection error", "I/O error"})


def host_of_database(path: Path) -> str:
    """The host a rasdaemon database belongs to, from its file name (``<host>.db``, ``<host>.ras-mc_event.db``; a
    host name's first label, an address whole) or, for a plain ``ras-mc_event.db``, its directory."""
    name = path.name
    for suffix in (".ras-mc_event.db", ".db", ".sqlite3", ".sqlite"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    stem = name if is_address(name) else name.split(".", 1)[0]
    if stem in ("ras-mc_event", ""):
        return path.parent.name
    return stem


def _severity_of(err_type: str) -> str:
    text = (err_type or "").lower()
    if "fatal" in text and "non-fatal" not in text:
        return "fatal"
    if text.startswith("uncorrect"):
        return "uncorrected"
    if text.startswith("corrected"):
        return "corrected"
    if text.startswith("deferred"):  # an uncorrectable error the hardware contained (poisoned): AMD's Deferred
        return "deferred"
    return "info"


def row_event(table: str, row: tuple) -> tuple[str, int | None, str, str, str | None]:
    """(kind, code, severity, message, pci) for one row of a table (its id, time, then :data:`_COLUMNS`' columns);
    ``ras-mc-ctl --errors`` listings are read through it too (:mod:`rasmcctl`)."""
    if table == "mc_event":
        _, _, count, err_type, err_msg, label = row
        return "edac", int(count or 1), _severity_of(err_type), f"{err_type} {err_msg or ''} on {label or '?'}", None
    if table == "aer_event":
        _, _, dev, err_type, err_msg = row
        return "aer", None, _severity_of(err_type), f"{err_type}: {err_msg or ''}".strip(), normalize_pci(dev or "")
    if table == "mce_record":
        _, _, bank, error_msg, mci, mcg = row
        status = f"{mci or ''} {mcg or ''}"
        severity = "fatal" if ("Uncorrected" in status or "PCC" in status) else "corrected"
        code = int(bank) if bank is not None else None  # (None: ras-mc-ctl prints no bank 0)
        return "mce", code, severity, f"bank {'?' if code is None else code}: {error_msg or ''}".strip(), None
    if table == "devlink_event":
        _, _, bus, dev, driver, reporter, msg = row
        what = f"{driver or '?'} {reporter or '?'} health report: {msg or ''}".strip()
        pci = normalize_pci_function(dev or "") if bus == "pci" else None
        if reporter == "fw_fatal":  # the adapter's firmware failed (its ports went down; the driver recovers it)
            return "link", None, "error", f"{what}: its firmware failed, its ports are down", pci
        return "devlink", None, "info", what, pci  # (tx/rx queue timeouts, non-fatal firmware syndromes: said)
    if table == "memory_failure_event":
        _, _, pfn, page_type, result = row
        contained = (result or "").lower() in ("recovered", "delayed")
        return ("edac", 1, "deferred" if contained else "uncorrected",
                f"memory failure at page {pfn or '?'} ({page_type or '?'}): {result or '?'}", None)
    if table == "arm_event":
        return _arm_event(row)
    if table == "non_standard_event":
        _, _, sec_type, fru, severity = row
        section = _uuid_text(sec_type)
        return ("cper", None, GHES_SEVERITY.get((severity or "").strip().lower(), "info"),
                f"{severity or '?'} error in {fru or 'an unnamed part'} (section {section})", None)
    if table == "disk_errors":
        _, _, dev, sector, nr_sector, error, rwbs = row
        severity = "error" if error in _DISK_FAULTS else "info"
        return "disk", None, severity, f"disk {dev or '?'}: {error or '?'} ({rwbs or '?'} of {nr_sector or '?'} " \
                                       f"sectors at {sector if sector is not None else '?'})", None
    _, _, etype, count, severity, fru = row
    message = f"extlog type {etype} {fru or ''}".strip()
    return "edac", int(count or 1), _CPER_SEVERITY.get(severity, "info"), message, None


def _arm_event(row: tuple) -> tuple[str, int | None, str, str, str | None]:
    """An Arm processor error: corrected or not from its error information where rasdaemon recorded it (0.8.1 on);
    a corrupted processor context is fatal; without the information, a processor error of unknown severity, judged
    as a corrected one (a watch)."""
    _, _, count, mpidr, error_type, flags, info = row
    what = (error_type or "processor error").strip()
    where = f"MPIDR 0x{int(mpidr) & 0xFFFFFFFFFF:x}" if mpidr is not None else "an unnamed core"
    count = int(count) if count else 1
    if info is None:
        return "arm", count, "corrected", f"{what} on {where}, x{count} (severity not recorded)", None
    info = int(info)
    if info & _ARM_VALID_CONTEXT_CORRUPT and info & _ARM_CONTEXT_CORRUPT:
        severity = "fatal"
    elif info & _ARM_VALID_CORRECTED:
        severity = "corrected" if info & _ARM_CORRECTED else "uncorrected"
    else:
        severity = "corrected"
    flags = f", {flags.strip()}" if flags and flags.strip() else ""
    return "arm", count, severity, f"{what} on {where}, x{count}{flags}", None


def _uuid_text(value) -> str:
    """A CPER section type as rasdaemon stores it (16 bytes of a UUID, little-endian fields) as text."""
    if isinstance(value, bytes) and len(value) == 16:
        return str(uuid.UUID(bytes_le=value))
    return str(value) if value is not None else "?"


def _query(conn: sqlite3.Connection, table: str) -> str:
    """The table's SELECT, a column this rasdaemon did not create read as NULL."""
    present = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    columns = ", ".join(c if c in present else f"NULL AS {c}" for c in _COLUMNS[table])
    return f"SELECT id, timestamp, {columns} FROM {table}"


def append_record(out: list[tuple], ctx: ReadContext, where: tuple[str, str, str], node: str, table: str,
                  time_text: str, make: Callable[[str, tuple], tuple], row: tuple) -> None:
    """Append to ``out`` the event of one record of ``table`` (its time's text; ``make(table, row)`` its kind, code,
    severity, message and PCI address), or reject it where ``where`` (format, position, reason) says when either is
    unreadable."""
    try:
        ts = parse_time(time_text)
        kind, code, severity, message, pci = make(table, row)
    except (ValueError, TypeError) as exc:
        ctx.rejects.reject(where[0], where[1], where[2], str(exc))
        return
    out.append((ts, node, kind, code, severity, message, f"rasdaemon:{table}", pci, None))
    metrics.EVENTS_INGESTED.labels(where[0], kind).inc()


def parse_time(text: str) -> float:
    """A rasdaemon time (``2026-03-02 00:01:00 +0000``) in epoch seconds."""
    return dt.datetime.strptime(text.strip(), "%Y-%m-%d %H:%M:%S %z").timestamp()


class RasdaemonReader:
    """Reads every known table of a rasdaemon database from the given cursors onward."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext, cursors: dict[str, int] | None = None) -> Iterator[Batch]:
        """Yield event batches; ``cursors`` (table -> last id read) is updated in place."""
        cursors = cursors if cursors is not None else {}
        host = host_of_database(path)
        node = ctx.mapper.topology.resolve_host(host)
        if node is None:
            ctx.rejects.refuse(FORMAT, str(path), f"host {host!r} is an address with no alias in the topology")
            return
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.Error as exc:
            ctx.rejects.refuse(FORMAT, str(path), f"not a readable SQLite database: {exc}")
            return
        try:
            for table in TABLES:
                if table not in present:
                    continue
                yield from self._read_table(conn, table, path, node, ctx, cursors)
        finally:
            conn.close()

    def _read_table(self, conn, table, path, node, ctx, cursors) -> Iterator[Batch]:
        try:
            query = _query(conn, table)
        except sqlite3.Error as exc:
            ctx.rejects.refuse(FORMAT, f"{path}#{table}", f"cannot read table: {exc}")
            return
        while True:
            since = cursors.get(table)
            # from the first row whatever its id: rows with ids of 0 or below (a database edited or merged by hand)
            # were never read when the cursor started at 0 (issue 54)
            where = "WHERE id >= ?" if since is None else "WHERE id > ?"
            try:
                rows = conn.execute(f"{query} {where} ORDER BY id LIMIT ?",
                                    (-(2**63) if since is None else since, PAGE)).fetchall()
            except sqlite3.Error as exc:
                ctx.rejects.refuse(FORMAT, f"{path}#{table}", f"cannot read table: {exc}")
                return
            if not rows:
                return
            out, last = [], since
            for row in rows:
                position = f"{path}#{table}:{row[0]}"
                if not isinstance(row[0], int) or (last is not None and row[0] <= last):
                    # ids come in order or the table's b-tree is damaged: a query that returns an id again would
                    # be asked again for ever
                    ctx.rejects.refuse(FORMAT, position, "table damaged: its ids do not increase (the rest of the "
                                                         "table is not read; sqlite3 .recover can save it)")
                    if out:
                        yield Batch(events=events_frame(out))
                    return
                last = row[0]
                append_record(out, ctx, (FORMAT, position, "bad row"), node, table, str(row[1]), row_event, row)
            cursors[table] = last
            if out:
                yield Batch(events=events_frame(out))
