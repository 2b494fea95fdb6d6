"""``journalctl -o verbose``: every field of every entry, the form a journal is often pasted or saved in.

An entry is a heading line (``Tue 2025-01-21 04:41:44.283302 UTC [s=...;i=...;b=...;m=...;t=...;x=...]``: its cursor,
whose ``t`` is the entry's realtime stamp in hexadecimal microseconds and ``b`` its boot id) and then its fields, one a
line indented by four spaces (``    MESSAGE=...``); a value that holds a newline goes on over lines indented to where it
began (after ``MESSAGE=``). Each entry goes through the same
:func:`~daemon.ingest.formats.kernellog.journal_entry` as a JSON export's record, kernel records only, at the time
its cursor gives (exact, whatever zone the heading was printed in). A line that is neither is rejected with its
number; an entry whose heading gives no time is rejected whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from daemon.ingest.batch import Batch
from daemon.ingest.formats.kernellog import EventRows, journal_entry
from daemon.ingest.formats.reader import ReadContext, iter_lines

FORMAT = "journal_verbose"
HEADING = re.compile(r"^\S.* \[s=[0-9a-f]+;i=[0-9a-f]+;b=([0-9a-f]+);m=[0-9a-f]+;t=([0-9a-f]+);x=[0-9a-f]+\]\s*$")
_FIELD = re.compile(r"^    ([A-Za-z0-9_]+)=(.*)$")


class JournalVerboseReader:
    """Kernel records of a ``journalctl -o verbose`` output; see the module docstring."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        rows = EventRows(ctx, FORMAT, "kernel")
        src = str(path)
        entry: dict[str, str] | None = None
        position, last_key = "", ""
        for first, lines in iter_lines(path, ctx.read_bytes, ctx.rejects, FORMAT):
            for offset, line in enumerate(lines):
                if not line.strip():
                    continue
                heading = HEADING.match(line)
                if heading:
                    if entry is not None:
                        journal_entry(entry, position, rows, entry.get("MESSAGE", "")[:120])
                    position, last_key = f"{src}:{first + offset}", ""
                    entry = {"__REALTIME_TIMESTAMP": str(int(heading.group(2), 16)), "_BOOT_ID": heading.group(1)}
                    continue
                field = _FIELD.match(line)
                if entry is not None and field:
                    last_key = field.group(1)
                    entry[last_key] = field.group(2)
                elif entry is not None and last_key and line.startswith(" " * (5 + len(last_key))):
                    entry[last_key] += "\n" + line[5 + len(last_key):]  # a value's later lines
                else:
                    ctx.rejects.reject(FORMAT, f"{src}:{first + offset}", "neither an entry's heading nor its field",
                                       line.strip()[:120])
            if len(rows.rows) >= ctx.chunk_rows:
                yield rows.take()
        if entry is not None:
            journal_entry(entry, position, rows, entry.get("MESSAGE", "")[:120])
        if rows.rows:
            yield rows.take()


def looks_like(first_line: str) -> bool:
    """Whether a file's first line is a ``journalctl -o verbose`` entry's heading."""
    return HEADING.match(first_line) is not None
