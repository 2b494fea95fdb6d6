"""Kernel logs: journald JSON export, syslog/kern.log text, and ``dmesg -T`` / ``--time-format iso`` / ``reltime``.

Each record's message goes through :func:`daemon.ingest.formats.kernel_events.parse_kernel_message`;
only hardware RAS becomes an event. The node is the record's host (``_HOSTNAME``, the syslog host
field, or for dmesg, which has none, the file name ``<host>.dmesg[...]``), mapped through the
topology's aliases. Times without a zone (dmesg -T, classic syslog, dmesg's ISO times without an offset) are read in
the context's zone (:attr:`ReadContext.zone`: UTC unless the operator names the hosts' local zone). A raw dmesg
(``[ seconds]`` since boot, with no boot time) cannot be placed in time and is refused.

Shapes read besides the plain ones: ``dmesg --decode`` (``kern  :warn  : 2025-01-21T04:41:44,283302+00:00 ...``;
records of other facilities are passed over unless they carry a driver's RAS line, as a tool relaying the
driver's messages writes them: ``syslog:err   : ... NVRM: Xid (PCI:0000:04:00): 79, ...``), dmesg's indented
continuation lines (the later lines of a multi-line message, printed without a time), rsyslog's ``#012`` escapes
of the newlines inside one message, the caller id of ``CONFIG_PRINTK_CALLER`` kernels (``[  24.235980][  T511]``), and a
journal whose ``_BOOT_ID`` changes (a reboot: a ``boot`` event). RFC 3164 stamps carry no year: it is the year
that puts the file's first line nearest the rest of the trace (files with full stamps are read first), or,
for a trace of such files alone, the file's modification year, said in the summary; each later line takes the
year that puts it nearest its host's previous line (December to January, and a central syslog interleaving
hosts whose clocks differ across New Year). dmesg's reltime stamps (``dmesg -H``) carry no year either, and no
seconds: a record in a new minute is read at the middle of that minute, the records after it in the same minute by
their seconds since the record before.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import os
import re
from collections import Counter
from pathlib import Path
from collections.abc import Iterator

from daemon import metrics
from daemon.ingest.batch import Batch
from daemon.ingest.formats.reader import ReadContext, host_in_name, iter_lines, note_zoneless
from daemon.ingest.formats.kernel_events import CperRecords, KernelEvent, MessageJoiner, parse_kernel_message
from daemon.ingest.formats.locale_dates import MONTH_PATTERN, MONTHS, WEEKDAY_PATTERN
from daemon.timetext import zone_name, zoneless_epoch
from detectors.schema import events_frame

UTC = dt.UTC
_MONOTONIC_PREFIX = re.compile(r"^\s*\[\s*\d+\.\d+\](?:\[\s*[TC]\d+\])?\s?")
# dmesg --decode: "kern  :warn  : " (facility and level, padded) before the time
_DECODE = re.compile(r"^([a-z]+)\s*:([a-z]+)\s*: ")
# RFC 3164 as rsyslog's templates print it: also with fractions of a second and a severity word before the tag
# (SONiC's "Apr  9 21:05:38.106121 host INFO kernel: ...", sonic-net/sonic-buildimage#7310)
# A syslog line as received or stored raw keeps its "<PRI>" in front.
_RFC3164 = re.compile(rf"^(?:<\d{{1,3}}>)? *({MONTH_PATTERN}) +(\d{{1,2}}) (\d{{2}}):(\d{{2}}):(\d{{2}})"
                      r"(?:\.(?P<frac>\d{1,9}))? "
                      r"(?P<host>\S+) (?:(?:EMERG|ALERT|CRIT|ERR|ERROR|WARNING|WARN|NOTICE|INFO|DEBUG) )?"
                      r"(?P<ident>[^:\[]+)(?:\[\d+\])?: (?P<msg>.*)$")
_RFC3339 = re.compile(
    r"^(?:<\d{1,3}>)?(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?) (\S+) ([^:\[]+)"
    r"(?:\[\d+\])?: (.*)$"
)
# RFC 5424 (rsyslog's RSYSLOG_SyslogProtocol23Format, syslog-ng, network collectors), with or without its
# "<PRI>VERSION": TIMESTAMP HOST APP-NAME PROCID MSGID STRUCTURED-DATA MSG, "-" for what is not given
# ("2022-12-26T07:44:45.000000+01:00 server02 kernel - - - BTRFS critical ...", quoted on linux-kernel)
_RFC5424 = re.compile(r"^(?:<\d{1,3}>\d{1,2} )?(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"
                      r" (\S+) ([^\s:\[]+) (\S+) (\S+) (-|(?:\[(?:[^\]\\]|\\.)*\])+)(?: (.*))?$")
# journalctl -o short-full ("Tue 2025-01-21 04:41:44 UTC host kernel: ...", the zone's abbreviation: UTC and GMT
# say their offset, another only as the hosts' zone's name at that time, _short_full_zone) and -o short-unix
# ("1737434504.283302 host kernel: ...")
_SHORT_FULL = re.compile(r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?) (\S+) "
                         r"(\S+) ([^:\[]+)(?:\[\d+\])?: (.*)$")
_SHORT_UNIX = re.compile(r"^(\d{9,11}\.\d+) (\S+) ([^:\[]+)(?:\[\d+\])?: (.*)$")
# dmesg -T ("[Thu Jun 12 09:14:02 2025]"), weekday and month in the host's language ("[六 12月  5 ...]": locale_dates)
_DMESG_T = re.compile(rf"^\[(?:{WEEKDAY_PATTERN}) +({MONTH_PATTERN}) +(\d{{1,2}}) (\d{{2}}):(\d{{2}}):(\d{{2}}) "
                      r"(\d{4})\] ?(.*)$")
_DMESG_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:[+-]\d{2}:?\d{2}|Z)?) (.*)$")
# dmesg --time-format reltime (and -H, which uses it): a record in a minute other than the last one's stamped with
# that minute, no year and no seconds (strftime's "%b%e %H:%M": "[Dec 5 02:39]", "[Dec15 02:39]"), the records after
# it in the same minute with their time since the record before ("[  +0.000013]", "[ +12.500000]"; "[  +0,000013]"
# under a locale whose decimal mark is a comma)
_DMESG_RELTIME = re.compile(rf"^\[({MONTH_PATTERN}) ?(\d{{1,2}}) (\d{{2}}):(\d{{2}})\] ?(.*)$")
_DMESG_DELTA = re.compile(r"^\[ *\+(\d+[.,]\d+)\] ?(.*)$")  # a decimal comma in the hosts' language (de_DE)
RELTIME_IN_MINUTE_S = 30.0
"""Where in its minute a reltime stamp is read: the middle, so that no record is more than 30 s off (the seconds are
not printed; the records after it in the same minute are exact from there)."""
_DMESG_RAW = re.compile(r"^\[\s*\d+\.\d+\] ")
# journalctl -o short-monotonic and short-delta: seconds since boot, then the host and the identifier
# ("[    0.000001] host kernel: ...", "[    1.000001 <    1.000000>] host kernel: ...")
JOURNAL_SINCE_BOOT = re.compile(r"^\[\s*\d+\.\d+\s*(?:<\s*\d+\.\d+>)?\s*\] \S+ [^:\[\s]+(?:\[\d+\])?: ")
# The line shapes a file is tried for, in order: RFC 5424 before RFC 3339 (an RFC 5424 line would pass for one, with
# "kernel - - - ..." as its tag), journalctl's short-full before RFC 3164.
_STYLES = (("raw", _DMESG_RAW), ("rfc5424", _RFC5424), ("short-full", _SHORT_FULL), ("short-unix", _SHORT_UNIX),
           ("rfc3339", _RFC3339), ("rfc3164", _RFC3164), ("dmesg-T", _DMESG_T), ("dmesg-iso", _DMESG_ISO),
           ("dmesg-reltime", _DMESG_RELTIME))
# A syslog or dmesg -T stamp with any word for its month: to say so when the word is not one of MONTHS
_ANY_MONTH = re.compile(r"^(?:<\d{1,3}>)? *(?:\[[^\s\]]+ +)?([^\s\d\[][^\s]*(?: \d{1,2})?) +\d{1,2} \d{2}:\d{2}:\d{2}"
                        r"(?:\.\d+)? (?:\S+ \S[^:]*: |\d{4}\] )")


# journalctl's own lines among its records: "-- Logs begin at ..., end at ... --" heading the output (systemd before
# 246, RHEL 8's and Ubuntu 20.04's), "-- Journal begins at ... --" (246 to 249), "-- Reboot --" and "-- Boot ID --"
# between boots, "-- No entries --", and -x's catalog text, every line of it "-- ..."; no kernel line begins so
JOURNAL_ANNOTATION = re.compile(r"^--(?: |$)")


#: what to do about a month word in no language read (a line's reject, a file's skip)
UNKNOWN_MONTH_ADVICE = ("is in no language raswarden reads (daemon/ingest/formats/locale_dates.csv): record with "
                        "'journalctl -o short-iso' (or LC_ALL=C)")


def unknown_month(line: str) -> str | None:
    """The month word of a line stamped as syslog or dmesg -T that is in no locale raswarden reads (a host whose
    language is not among locale_dates'), else None."""
    m = _ANY_MONTH.match(line)
    return m.group(1) if m and m.group(1) not in MONTHS else None


def not_a_log_line(line: str) -> str:
    """Why a line of a kernel log is not read: its month word named where that is the reason."""
    word = unknown_month(line)
    if word is None and _DMESG_DELTA.match(line):
        return ("dmesg reltime's time since the record before, with no stamped record before it (the file begins "
                "within a minute): its time is unknown")
    if word is None:
        return "not a syslog or dmesg line"
    return f"a stamp whose month {word!r} {UNKNOWN_MONTH_ADVICE}"


def _strip_decode(line: str) -> tuple[str, str | None]:
    """A line without ``dmesg --decode``'s facility and level, and the facility (None when absent)."""
    m = _DECODE.match(line)
    if m is None:
        return line, None
    return line[m.end():], m.group(1)


def _iso_to_epoch(text: str, zone: dt.tzinfo = UTC) -> float:
    return zoneless_epoch(dt.datetime.fromisoformat(text.replace(",", ".").replace("Z", "+00:00")), zone)


def _names_no_zone(style: str, line: str) -> bool:
    """Whether a file of this style, whose first line this is, stamps its lines without a zone."""
    if style in ("rfc3164", "dmesg-T", "dmesg-reltime"):
        return True
    pattern = {"rfc5424": _RFC5424, "rfc3339": _RFC3339, "dmesg-iso": _DMESG_ISO}.get(style)
    m = pattern.match(_strip_decode(line)[0]) if pattern else None
    return bool(m) and re.search(r"(?:Z|[+-]\d{2}:?\d{2})$", m.group(1)) is None


def _short_full_zone(stamp: str, abbreviation: str, zone: dt.tzinfo) -> dt.tzinfo | None:
    """The zone a journalctl short-full stamp (``2025-01-21 04:41:44 CST``) is in: UTC for UTC and GMT, the hosts'
    ``zone`` where it goes by the stamp's abbreviation at that time (Asia/Shanghai's CST, Europe/Berlin's CET and
    CEST), else None (an abbreviation alone does not say its offset: CST is China's and America's)."""
    if abbreviation in ("UTC", "GMT"):
        return UTC
    try:
        local = dt.datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return zone if zone is not UTC and zone.tzname(local) == abbreviation else None


_INT64 = (-(2**63), 2**63)
# an Xid or SXid is a 32-bit number in the driver; other kinds' codes (Ascend's, amdgpu's error counts) fit an int64
_CODE_RANGE = {"xid": (0, 2**32), "sxid": (0, 2**32)}


class EventRows:
    """Accumulates event rows for one file and resolves the record's host to a node."""

    def __init__(self, ctx: ReadContext, fmt: str, source: str):
        self.ctx = ctx
        self.fmt = fmt
        self.source = source
        self.rows: list[tuple] = []
        self.joiner = MessageJoiner()
        self.cper = CperRecords()
        self.boot_ids: dict[str, str] = {}

    def add(self, ts: float, host: str, message: str, position: str) -> None:
        if CperRecords.matches(message):
            event = self.cper.feed(host, message)
        else:
            event = parse_kernel_message(self.joiner.feed(host, ts, message))
        if event is None:
            return
        self.append_event(ts, host, event, position)

    def boot_id(self, ts: float, host: str, boot_id: str, position: str) -> None:
        """A journal record's ``_BOOT_ID``: a host whose boot id changes has rebooted (a ``boot`` event)."""
        before = self.boot_ids.get(host)
        self.boot_ids[host] = boot_id
        if before is not None and before != boot_id:
            self.append_event(ts, host, KernelEvent("boot", None, "info", f"new boot id {boot_id[:8]}"), position)

    def append_event(self, ts: float, host: str, event: KernelEvent, position: str) -> None:
        """Add one event of ``host`` at ``ts`` (the host mapped through the topology's aliases)."""
        lo, hi = _CODE_RANGE.get(event.kind, _INT64)
        if event.code is not None and not lo <= event.code < hi:
            # a corrupt line ("Xid (PCI:0000:2a:00): 99999999999999999999, ..."): rejected alone, the records around
            # it are kept (it raised OverflowError in the events frame and cost the whole read before, issue 54)
            self.ctx.rejects.reject(self.fmt, position, f"{event.kind} code {event.code} is out of range",
                                    event.message)
            return
        node = self.ctx.mapper.topology.resolve_host(host)
        if node is None:
            self.ctx.rejects.reject(self.fmt, position, f"host {host!r} is an address with no alias in the topology")
            return
        self.rows.append(
            (ts, node, event.kind, event.code, event.severity, event.message, event.source or self.source, event.pci,
             event.device)
        )
        metrics.EVENTS_INGESTED.labels(self.fmt, event.kind).inc()

    def take(self) -> Batch:
        batch = Batch(events=events_frame(self.rows))
        self.rows = []
        return batch


def journal_record(line: str, position: str, rows: EventRows) -> dict | None:
    """Read one ``journalctl -o json`` line into ``rows`` (kernel records only); the record, or None when bad.

    Bad lines are rejected with their position; records of other transports are returned and ignored.
    """
    try:
        record = json.loads(line)
        if not isinstance(record, dict):
            raise ValueError("not an object")
    except ValueError:
        rows.ctx.rejects.reject(rows.fmt, position, "not a JSON object", line)
        return None
    return journal_entry(record, position, rows, line)


def journal_entry(record: dict, position: str, rows: EventRows, text: str = "") -> dict | None:
    """Read one journal entry (its fields as a dict, from any of journalctl's outputs) into ``rows``, kernel records
    only; the entry, or None when bad (rejected with its position and ``text``, what it was read from)."""
    ctx, fmt = rows.ctx, rows.fmt
    if record.get("_TRANSPORT") != "kernel" and record.get("SYSLOG_IDENTIFIER") != "kernel":
        return record
    message = record.get("MESSAGE")
    if isinstance(message, (list, bytes)):  # journald exports non-UTF-8 messages as byte arrays
        try:
            message = bytes(message).decode("utf-8", errors="replace")
        except (TypeError, ValueError):
            message = None
    host = record.get("_HOSTNAME")
    try:
        ts = int(record["__REALTIME_TIMESTAMP"]) / 1e6
    except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: more digits than a float holds
        ctx.rejects.reject(fmt, position, "missing or bad __REALTIME_TIMESTAMP", text)
        return None
    if not isinstance(message, str) or not isinstance(host, str) or not host:
        ctx.rejects.reject(fmt, position, "kernel record without MESSAGE or _HOSTNAME", text)
        return None
    boot = record.get("_BOOT_ID")
    if isinstance(boot, str) and boot:
        rows.boot_id(ts, host, boot, position)
    rows.add(ts, host, message, position)
    return record


class JournalJsonReader:
    """journalctl's JSON outputs, kernel records only: ``-o json`` (an object a line), ``-o json-seq`` (each headed by
    RFC 7464's record separator), ``-o json-sse`` (``data: {...}`` lines) and ``-o json-pretty`` (an object over
    lines, ``{`` and ``}`` alone on theirs)."""

    format = "journald"
    MAX_PRETTY_LINES = 100_000  # a json-pretty object never closed is a damaged file, not an entry to hold on to

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        rows = EventRows(ctx, self.format, "kernel")
        src = str(path)
        pretty: list[str] = []  # the lines of a json-pretty object read so far
        start = 0
        for first, lines in iter_lines(path, ctx.read_bytes, ctx.rejects, self.format):
            for offset, line in enumerate(lines):
                text = unframed(line)
                if not text.strip():
                    continue
                # an object begun before the last one closed: that one was cut short (so a lone "{", a damaged
                # line of a file of one-line objects, costs itself alone, not the lines after it)
                if pretty and text.startswith("{"):
                    journal_record("\n".join(pretty), f"{src}:{start}", rows)
                    pretty = []
                if text.rstrip() == "{":
                    pretty, start = [text], first + offset
                elif pretty:
                    pretty.append(text)
                    if text.rstrip() == "}" or len(pretty) >= self.MAX_PRETTY_LINES:
                        journal_record("\n".join(pretty), f"{src}:{start}", rows)
                        pretty = []
                else:
                    journal_record(text, f"{src}:{first + offset}", rows)
            if len(rows.rows) >= ctx.chunk_rows:
                yield rows.take()
        if pretty:
            journal_record("\n".join(pretty), f"{src}:{start}", rows)
        if rows.rows:
            yield rows.take()


def unframed(line: str) -> str:
    """A line of journalctl's JSON output without its framing: json-seq's record separator, json-sse's ``data: ``."""
    text = line.lstrip("\x1e")
    return text[6:] if text.startswith("data: ") else text


def looks_like_journal_json(head: bytes, first: bytes) -> bool:
    """Whether a file is one of journalctl's JSON outputs (:class:`JournalJsonReader`), from its first bytes and its
    first non-blank line."""
    text = unframed(first.decode("utf-8", "replace"))
    if text.startswith("{") and ("__REALTIME_TIMESTAMP" in text or "_TRANSPORT" in text):
        return True
    return text == "{" and (b'"__REALTIME_TIMESTAMP"' in head or b'"__CURSOR"' in head)


class TextLogReader:
    """syslog / kern.log (RFC 3164, RFC 3339 or RFC 5424), journalctl's short output modes, and dmesg -T /
    --time-format iso text (:data:`_STYLES`)."""

    format = "kernlog"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        rows = EventRows(ctx, self.format, "kernel")
        src = str(path)
        style: str | None = None
        file_host = self._host_from_name(path)
        year: int | None = None
        # RFC 3164: each line takes the year that puts it nearest its host's previous line (a central syslog
        # interleaves hosts whose clocks differ), or the file's previous line for a host's first
        last_ts: dict[str, float] = {}
        file_last: float | None = None
        previous: tuple[float, str] | None = None  # the last record's time and host, for continuation lines
        zoneless = False  # the file's stamps name no zone: read in ctx.zone, said in the summary
        latest = -math.inf
        chunks = iter_lines(path, ctx.read_bytes, ctx.rejects, self.format)
        head = next(chunks, None)
        expected = self._file_style(head[1], ctx) if head else None
        for first, lines in itertools.chain([head] if head else [], chunks):
            for offset, line in enumerate(lines):
                if not line.strip() or JOURNAL_ANNOTATION.match(line):
                    continue
                position = f"{src}:{first + offset}"
                line, facility = _strip_decode(line)
                if style is None:
                    style = self._detect(line)
                    if expected is not None and style != expected:  # a damaged line cannot fix the file's style
                        style = None
                        ctx.rejects.reject(self.format, position, not_a_log_line(line), line)
                        continue
                    if style == "raw":
                        ctx.rejects.refuse(self.format, position, (
                            "journalctl -o short-monotonic: its stamps count seconds since boot and the file gives no "
                            "boot time; record it with 'journalctl -o short-iso' or '-o json'"
                        ) if JOURNAL_SINCE_BOOT.match(line) else (
                            "raw dmesg timestamps count seconds since boot and the file gives no boot time; "
                            "record it with 'dmesg -T' or 'dmesg --time-format iso', or use journald"))
                        return
                    if style is None:
                        ctx.rejects.reject(self.format, position, not_a_log_line(line), line)
                        continue
                    zone = _SHORT_FULL.match(line) if style == "short-full" else None
                    if zone and _short_full_zone(zone.group(1), zone.group(2), ctx.zone) is None:
                        ctx.rejects.refuse(
                            self.format, position,
                            f"journalctl -o short-full stamps name their zone ({zone.group(2)}) but not its offset, "
                            f"and the hosts' zone ({zone_name(ctx.zone)}) does not go by that name: give the hosts' "
                            "zone (--timezone, timezone: in topology.yaml), or record with 'journalctl -o short-iso' "
                            "(or TZ=UTC), or as journalctl -o json",
                        )
                        return
                    if self._parse(style, line, 1970, ctx.zone) is None:  # damaged: it only begins like one
                        style = None
                        ctx.rejects.reject(self.format, position, not_a_log_line(line), line)
                        continue
                    zoneless = _names_no_zone(style, line)
                    if style.startswith("dmesg") and file_host is None:
                        ctx.rejects.refuse(
                            self.format, position,
                            "dmesg output names no host: name the file '<host>.dmesg' (or '<host>.dmesg.log')",
                        )
                        return
                if style in ("rfc3164", "dmesg-reltime") and year is None:
                    year = self._year(path, line, ctx, position)
                if line[:1].isspace() and style.startswith("dmesg") and previous is not None:
                    # dmesg prints the later lines of a multi-line message indented and without a time
                    rows.add(previous[0], previous[1], line.strip(), position)
                    continue
                # dmesg --decode shows what programs wrote to /dev/kmsg too (facility user, daemon, syslog): only a RAS
                # fact the drivers print is kept from those (NVRM lines show up as "syslog:err" where a tool relays the
                # driver's messages, as leptonai/gpud PR 870 quotes), the rest is not the kernel's
                other_facility = facility is not None and facility != "kern"
                delta = _DMESG_DELTA.match(line) if style == "dmesg-reltime" else None
                if delta and previous is not None:  # reltime: the time since the record before
                    parsed = (previous[0] + float(delta.group(1).replace(",", ".")), None, None, delta.group(2), 0)
                else:
                    parsed = self._parse(style, line, year or 1970, ctx.zone)
                if parsed is None:
                    why = f"line does not match the file's {style} format"
                    ctx.rejects.reject(self.format, position, why if unknown_month(line) is None else
                                       not_a_log_line(line), line)
                    continue
                ts, host, ident, message, month = parsed
                host = host or file_host or ""
                if month:
                    ref = last_ts.get(host, file_last)
                    if ref is not None:  # December -> January (and a host a little behind across New Year)
                        ref_year = dt.datetime.fromtimestamp(ref, UTC).year
                        options = [p[0] for p in (self._parse(style, line, y, ctx.zone)
                                                  for y in (ref_year - 1, ref_year, ref_year + 1)) if p]
                        ts = min(options, key=lambda t: abs(t - ref))
                    last_ts[host] = file_last = ts
                if ident is not None and ident.strip() != "kernel":
                    continue
                previous = (ts, host)
                latest = max(latest, ts)
                message = _MONOTONIC_PREFIX.sub("", message)
                if "#012" in message:  # rsyslog's escape of a newline inside one message
                    message = message.replace("#012", "\n")
                if other_facility and parse_kernel_message(message) is None:
                    continue
                rows.add(ts, host, message, position)
            if len(rows.rows) >= ctx.chunk_rows:
                yield rows.take()
        if rows.rows:
            yield rows.take()
        if zoneless and latest > -math.inf:
            note_zoneless(ctx, self.format, src, path, latest)

    @staticmethod
    def _year(path: Path, line: str, ctx: ReadContext, position: str) -> int:
        """The year of an RFC 3164 (or dmesg reltime) file: nearest the span of the trace's stamped data, else its
        modification year."""
        m = _RFC3164.match(line) or _DMESG_RELTIME.match(line)
        span = ctx.span
        if m and m.group(1) in MONTHS and span is not None:
            lo, hi = span
            best, best_gap = None, math.inf
            for y in range(dt.datetime.fromtimestamp(hi, UTC).year + 1,
                           dt.datetime.fromtimestamp(lo, UTC).year - 2, -1):
                try:
                    t = dt.datetime(y, MONTHS[m.group(1)], int(m.group(2)), tzinfo=UTC).timestamp()
                except ValueError:  # Feb 29 of a common year
                    continue
                gap = 0.0 if lo - 86400 <= t <= hi + 86400 else min(abs(t - lo), abs(t - hi))
                if gap < best_gap:
                    best, best_gap = y, gap
            if best is not None:
                return best
        year = dt.datetime.fromtimestamp(os.stat(path).st_mtime, UTC).year
        ctx.rejects.note("kernlog", position,
                         f"its stamps carry no year and nothing else in the trace dates them: took {year}, "
                         "the file's modification year")
        return year

    @staticmethod
    def _host_from_name(path: Path) -> str | None:
        return host_in_name(path, ".dmesg")

    def _file_style(self, lines: list[str], ctx: ReadContext) -> str | None:
        """The style most of a file's first lines have and parse in (None: none does), so that one damaged line at
        its head (a cut, a bad byte that makes a dmesg -T line read as syslog) cannot decide it."""
        votes: Counter[str] = Counter()
        for line in lines[:64]:
            if line.strip():
                style = self._detect(line)
                if style == "raw" or (style is not None and self._parse(style, _strip_decode(line)[0], 1970,
                                                                        ctx.zone) is not None):
                    votes[style] += 1
        return votes.most_common(1)[0][0] if votes else None

    @staticmethod
    def _detect(line: str) -> str | None:
        """The style of a file's first line (:data:`_STYLES`, first match), None for no log line."""
        line = _strip_decode(line)[0]
        return next((style for style, pattern in _STYLES if pattern.match(line)), None)

    @staticmethod
    def _parse(style: str, line: str, year: int, zone: dt.tzinfo = UTC):
        """(ts, host, ident, message, month) or None; a stamp without a zone is read in ``zone``."""
        try:
            if style == "short-full":
                m = _SHORT_FULL.match(line)
                in_zone = _short_full_zone(m.group(1), m.group(2), zone) if m else None
                if in_zone is None:
                    return None
                return _iso_to_epoch(m.group(1), in_zone), m.group(3), m.group(4), m.group(5), 0
            if style == "short-unix":
                m = _SHORT_UNIX.match(line)
                return (float(m.group(1)), m.group(2), m.group(3), m.group(4), 0) if m else None
            if style == "rfc5424":
                m = _RFC5424.match(line)
                return (_iso_to_epoch(m.group(1), zone), m.group(2), m.group(3), (m.group(7) or "").lstrip("\ufeff"),
                        0) if m else None
            if style == "rfc3339":
                m = _RFC3339.match(line)
                return (_iso_to_epoch(m.group(1), zone), m.group(2), m.group(3), m.group(4), 0) if m else None
            if style == "rfc3164":
                m = _RFC3164.match(line)
                if not m or m.group(1) not in MONTHS:
                    return None
                month = MONTHS[m.group(1)]
                stamp = dt.datetime(year, month, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)))
                frac = float(f"0.{m['frac']}") if m["frac"] else 0.0
                return zoneless_epoch(stamp, zone) + frac, m["host"], m["ident"], m["msg"], month
            if style == "dmesg-T":
                m = _DMESG_T.match(line)
                if not m:
                    return None
                stamp = dt.datetime(int(m.group(6)), MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)),
                                    int(m.group(4)), int(m.group(5)))
                return zoneless_epoch(stamp, zone), None, None, m.group(7), 0
            if style == "dmesg-reltime":
                m = _DMESG_RELTIME.match(line)
                if not m:
                    return None
                month = MONTHS[m.group(1)]
                stamp = dt.datetime(year, month, int(m.group(2)), int(m.group(3)), int(m.group(4)))
                return zoneless_epoch(stamp, zone) + RELTIME_IN_MINUTE_S, None, None, m.group(5), month
            if style == "dmesg-iso":
                m = _DMESG_ISO.match(line)
                return (_iso_to_epoch(m.group(1), zone), None, None, m.group(2), 0) if m else None
        except ValueError:
            return None
        return None
