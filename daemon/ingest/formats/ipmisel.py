"""A BMC's System Event Log as ``ipmitool sel elist`` (or ``sel list``) and FreeIPMI's ``ipmi-sel`` print it: what the
BMC and the BIOS logged about a node, kept even when its OS crashed (sosreport saves ``ipmitool sel list``).

ipmitool prints one record a line, ``id | date | time | sensor | event | direction`` (``elist`` names the sensor from
the SDR, ``list`` by number; a threshold event adds the reading)::

       f | 12/05/26 | 18:31:45 UTC | Memory #0x88 | Uncorrectable ECC | Asserted
      33 | 11/15/2019 | 18:52:23 | Fan Processor 1 Fan | Lower Non-critical going low  | Asserted

(ipmitool 1.8.19 writes the year in two digits and the zone it printed in; older ones four digits and no zone).
``ipmi-sel`` prints a header and then ``ID | Date | Time | Name | Type | [State |] [Event Direction |] Event`` (``15 |
Dec-05-2026 | 18:31:45 | Sensor #136 | Memory | Uncorrectable memory error``), or the same separated by commas; only
with ``-v`` does it say which records are a condition's end (``Deassertion Event``), so without it a threshold
crossing (which the BMC logs again when it ends) is not read, and the summary says to record it with ``-v``.

A record becomes a ``sel`` event of the node the file is named for (``<host>.sel``), its code the IPMI sensor type
(IPMI 2.0, table 42-3), its message the sensor and the event; the rules judge it by
``detectors/catalogs/ipmi_sel.csv``; a record it does not judge (a presence detected, a boot's progress, a deassertion:
a condition ending) passes unread, and the summary counts those of the judged sensor types by their words (a vendor's
wording the catalog lacks shows there). One it judges that was stamped before the BMC knew the time (``Pre-Init``,
``PostInit``: a BIOS's memory errors at power-on) cannot be placed and is rejected saying so; a line of neither shape
is rejected with its number. A time without a zone is read in the context's zone, as the node's other local times are.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from daemon.ingest.batch import Batch
from daemon.ingest.formats.kernel_events import KernelEvent
from daemon.ingest.formats.kernellog import EventRows
from daemon.ingest.formats.reader import ReadContext, host_in_name, iter_lines, note_zoneless
from daemon.timetext import zoneless_epoch
from detectors.vendor_events import load_sel_catalog, sel_verdict

FORMAT = "ipmi_sel"
_IPMITOOL = re.compile(r"^\s*([0-9a-fA-F]+) \| ([^|]*?) *\|([^|]*)\| ([^|]*?) *\| ([^|]*?) *\| (Asserted|Deasserted)"
                       r"(?: \| .*)?\s*$")
# ipmitool's OEM records (types C0h-FFh: "7b | 04/20/2015 | 03:03:14 | OEM record c0 | 000000 | 3a1100ffffff", or
# "id | OEM record e0 | data" without a time): the vendor's own bytes, nothing the catalog judges; passed unread
_OEM = re.compile(r"^\s*[0-9a-fA-F]+ \|(?:[^|]*\|[^|]*\|)? OEM record [0-9a-fA-F]{2} \|")
_SEP = r"\s*[|,]\s*"
_HEADER = re.compile(rf"^ID{_SEP}Date{_SEP}Time{_SEP}Name{_SEP}Type{_SEP}(State{_SEP})?(Event Direction{_SEP})?"
                     r"Event\s*$")
_CROSSING = re.compile(r"(going high|going low)", re.IGNORECASE)
UNDIRECTED = ("ipmi-sel without -v does not say which records end a condition: its threshold crossings are not read "
              "(record it with 'ipmi-sel -v')")
_NOT_YET = ("Pre-Init", "PostInit")
# IPMI 2.0 table 42-3, the sensor types raswarden judges, as ipmitool and FreeIPMI name them
SENSOR_TYPES = {"Temperature": 0x01, "Voltage": 0x02, "Current": 0x03, "Fan": 0x04, "Processor": 0x07,
                "Power Supply": 0x08, "Memory": 0x0C, "Critical Interrupt": 0x13,
                "OS Critical Stop": 0x20, "OS Stop/Shutdown": 0x20, "Watchdog2": 0x23, "Watchdog 2": 0x23}
_TYPE_PREFIX = re.compile("^(" + "|".join(sorted(map(re.escape, SENSOR_TYPES), key=len, reverse=True)) + r")\b\s*")
_DATES = ("%m/%d/%y %H:%M:%S", "%m/%d/%Y %H:%M:%S", "%b-%d-%Y %H:%M:%S")
_UTC = {"UTC", "GMT", "Z"}


def looks_like(first: str) -> bool:
    """A SEL listing's first line: an ipmitool record or ipmi-sel's header."""
    return _IPMITOOL.match(first) is not None or _HEADER.match(first) is not None


def record_time(date: str, time: str, ctx: ReadContext) -> tuple[float | None, bool]:
    """A record's time in seconds (None when unreadable), and whether it named its zone (UTC or GMT, read as such; no
    word, or another, is read in the context's zone: abbreviations such as CET or IST name no zone for certain)."""
    words = time.split()
    utc = len(words) > 1 and words[1] in _UTC
    for form in _DATES:
        try:
            stamp = dt.datetime.strptime(f"{date} {words[0] if words else ''}", form)
        except ValueError:
            continue
        return zoneless_epoch(stamp, dt.UTC if utc else ctx.zone), utc
    return None, utc


class IpmiSelReader:
    """Reads a BMC's event log as ipmitool or ipmi-sel print it; see the module docstring."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        src = str(path)
        host = host_in_name(path, ".sel")
        if not host:
            ctx.rejects.refuse(FORMAT, src, "a SEL listing names no host: name the file <host>.sel")
            return
        rows = EventRows(ctx, FORMAT, "bmc")
        catalog = load_sel_catalog()
        columns: list[str] | None = None  # ipmi-sel's, from its header
        latest = -math.inf  # (the latest time read in the context's zone, for the summary's note)
        unjudged: Counter = Counter()
        for first, lines in iter_lines(path, ctx.read_bytes, ctx.rejects, FORMAT):
            for offset, line in enumerate(lines):
                if not line.strip():
                    continue
                position = f"{src}:{first + offset}"
                header = _HEADER.match(line.strip())
                if header:
                    columns = [c.strip() for c in re.split(r"[|,]", line.strip())]
                    continue
                record = self._record(line, columns)
                if record is None and _OEM.match(line):
                    continue
                if record is None:
                    ctx.rejects.reject(FORMAT, position, "not a SEL record (ipmitool's or ipmi-sel's)", line[:120])
                    continue
                date, time, sensor, kind, event, asserted = record
                code = SENSOR_TYPES.get(kind)
                message = f"{sensor}: {event}"
                if not asserted or code is None:
                    continue  # (a condition's end; a boot's progress, a power unit: nothing to judge)
                if sel_verdict(code, message, catalog) is None:
                    unjudged[f"{kind}: {event}"] += 1  # (a presence detected; or words the catalog lacks: said)
                    continue
                if columns is not None and "Event Direction" not in columns and _CROSSING.search(event):
                    ctx.rejects.note(FORMAT, src, UNDIRECTED)  # (a crossing's end would read as a new one)
                    continue
                if date.strip() in _NOT_YET or time.strip() in _NOT_YET or not date.strip():
                    ctx.rejects.reject(FORMAT, position, "logged before the BMC knew the time: cannot be placed",
                                       line[:120])
                    continue
                ts, zoned = record_time(date.strip(), time.strip(), ctx)
                if ts is not None and not zoned:
                    latest = max(latest, ts)
                if ts is None:
                    ctx.rejects.reject(FORMAT, position, "date or time unreadable", line[:120])
                    continue
                rows.append_event(ts, host, KernelEvent("sel", code, "asserted", message), position)
            if len(rows.rows) >= ctx.chunk_rows:
                yield rows.take()
        if rows.rows:
            yield rows.take()
        if latest > -math.inf:
            note_zoneless(ctx, FORMAT, src, path, latest)
        if unjudged:
            shown = ", ".join(f"'{words}' x{n}" for words, n in unjudged.most_common(3))
            ctx.rejects.note(FORMAT, src, f"{sum(unjudged.values())} record(s) of judged sensor types passed unread, "
                                          f"their words not in the SEL catalog: {shown}")

    @staticmethod
    def _record(line: str, columns: list[str] | None) -> tuple[str, str, str, str, str, bool] | None:
        """(date, time, sensor, sensor type, event, asserted) of a record line, None when it is none."""
        m = _IPMITOOL.match(line)
        if m:
            sensor = m.group(4)
            typed = _TYPE_PREFIX.match(sensor)
            return (m.group(2), m.group(3), sensor, typed.group(1) if typed else "", m.group(5).strip(),
                    m.group(6) == "Asserted")
        if columns is None:
            return None
        cells = [c.strip() for c in line.split("," if "," in line and "|" not in line else "|", len(columns) - 1)]
        if len(cells) != len(columns):
            return None
        cell = dict(zip(columns, cells))
        event = cell["Event"].split(" ; ")[0]  # (a threshold's reading after it)
        asserted = cell.get("Event Direction", "Assertion Event") == "Assertion Event"
        return cell["Date"], cell["Time"], cell["Name"], cell["Type"], event, asserted
