"""rasdaemon SQLite databases (``ras-mc_event.db``): mc_event, aer_event, mce_record, extlog_event, and where
rasdaemon was built with them (rasdaemon's ras-record.c) devlink_event (the devlink health reporters' reports: a
network adapter's firmware failing, ``fw_fatal``, is mlx5's "health compromised") and memory_failure_event (the
kernel's handling of a poisoned host memory page: contained, ``Recovered`` or ``Delayed``, is the deferred error it
was; not contained, ``Failed`` or ``Ignored``, an uncorrected one).

Each table is read incrementally by its ``id`` (``WHERE id > ? ORDER BY id LIMIT n``), so a reader can
resume where it stopped (the live collector persists the cursors). The database names no host: it
is taken from the file name (``<host>.db``, ``<host>.ras-mc_event.db``) or, for a plain
``ras-mc_event.db``, from its directory. Schema: rasdaemon 0.6.8 as Debian 12 ships it
(its ``ras-mc_event.db`` as ``rasdaemon --record`` creates it; fixtures/README.md).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path
from collections.abc import Iterator

from daemon import metrics
from daemon.ingest.batch import Batch
from daemon.ingest.formats.reader import ReadContext
from daemon.topology import is_address, normalize_pci, normalize_pci_function
from detectors.schema import events_frame

FORMAT = "rasdaemon"
TABLES = ("mc_event", "aer_event", "mce_record", "extlog_event", "devlink_event", "memory_failure_event")
PAGE = 10_000

_QUERIES = {
    "mc_event": "SELECT id, timestamp, err_count, err_type, err_msg, label FROM mc_event",
    "aer_event": "SELECT id, timestamp, dev_name, err_type, err_msg FROM aer_event",
    "mce_record": "SELECT id, timestamp, bank, error_msg, mcistatus_msg, mcgstatus_msg FROM mce_record",
    "extlog_event": "SELECT id, timestamp, etype, error_count, severity, fru_text FROM extlog_event",
    "devlink_event": "SELECT id, timestamp, bus_name, dev_name, driver_name, reporter_name, msg FROM devlink_event",
    "memory_failure_event": "SELECT id, timestamp, pfn, page_type, action_result FROM memory_failure_event",
}
# CPER section severities (UEFI spec, N.2.1): 0 recoverable, 1 fatal, 2 corrected, 3 informational.
_CPER_SEVERITY = {0: "uncorrected", 1: "fatal", 2: "corrected", 3: "info"}


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


def _event(table: str, row: tuple) -> tuple[str, int | None, str, str, str | None]:
    """(kind, code, severity, message, pci) for one row of a table."""
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
        return "mce", int(bank) if bank is not None else None, severity, f"bank {bank}: {error_msg or ''}".strip(), None
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
    _, _, etype, count, severity, fru = row
    message = f"extlog type {etype} {fru or ''}".strip()
    return "edac", int(count or 1), _CPER_SEVERITY.get(severity, "info"), message, None


def _parse_ts(text: str) -> float:
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
        while True:
            since = cursors.get(table)
            # from the first row whatever its id: rows with ids of 0 or below (a database edited or merged by hand)
            # were never read when the cursor started at 0 (issue 54)
            where = "WHERE id >= ?" if since is None else "WHERE id > ?"
            try:
                rows = conn.execute(f"{_QUERIES[table]} {where} ORDER BY id LIMIT ?",
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
                try:
                    ts = _parse_ts(str(row[1]))
                    kind, code, severity, message, pci = _event(table, row)
                except (ValueError, TypeError) as exc:
                    ctx.rejects.reject(FORMAT, position, "bad row", str(exc))
                    continue
                out.append((ts, node, kind, code, severity, message, f"rasdaemon:{table}", pci, None))
                metrics.EVENTS_INGESTED.labels(FORMAT, kind).inc()
            cursors[table] = last
            if out:
                yield Batch(events=events_frame(out))
