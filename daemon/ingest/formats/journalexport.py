"""systemd's journal export format (``journalctl -o export``): the form journals are moved in between machines
(what systemd-journal-remote and ``journalctl --file`` tools take).

An entry is its fields, one a line (``KEY=value``), and a blank line after it; a value that holds a newline or
non-text bytes is written as its name alone on a line, its length as a little-endian 64-bit number, the bytes and
a newline (systemd's JOURNAL_EXPORT_FORMATS document). Read a line at a time; each entry goes through the same
:func:`~daemon.ingest.formats.kernellog.journal_entry` as a JSON export's record, kernel records only. A binary field
whose length does not frame it (a damaged or cut file, a line that lost its ``=``) costs its entry: the bytes it
claimed are read again as lines, from the next blank line on.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path

from daemon.ingest.batch import Batch
from daemon.ingest.formats.kernellog import EventRows, journal_entry
from daemon.ingest.formats.reader import ReadContext, open_binary

FORMAT = "journal_export"
_FIELD = re.compile(rb"[A-Z0-9_]+")
_HEAD = re.compile(rb"(?:__CURSOR|__REALTIME_TIMESTAMP|__MONOTONIC_TIMESTAMP|_BOOT_ID)=")
_MAX_FIELD = 64 << 20  # journald's own limit on an entry is far below; a larger length is a damaged file


class _Lines:
    """A binary file read by lines and lengths, with bytes that can be put back to be read again."""

    def __init__(self, fh):
        self.fh, self.back, self.at = fh, b"", 0

    def readline(self) -> bytes:
        if self.at < len(self.back):
            end = self.back.find(b"\n", self.at)
            if end >= 0:
                line, self.at = self.back[self.at:end + 1], end + 1
                return line
            line, self.back, self.at = self.back[self.at:], b"", 0
            return line + self.fh.readline()
        return self.fh.readline()

    def read(self, size: int) -> bytes:
        out = self.back[self.at:self.at + size]
        self.at += len(out)
        return out + (self.fh.read(size - len(out)) if len(out) < size else b"")

    def put_back(self, data: bytes) -> None:
        self.back, self.at = data + self.back[self.at:], 0


class JournalExportReader:
    """Kernel records of a ``journalctl -o export`` file; see the module docstring."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        rows = EventRows(ctx, FORMAT, "kernel")
        src = str(path)
        entry: dict[str, str | bytes] = {}
        n = 1
        with open_binary(path, ctx.rejects, FORMAT) as raw:
            fh = _Lines(raw)
            while True:
                line = fh.readline()
                if not line or line == b"\n":  # the end of an entry (or of the file)
                    if entry:
                        journal_entry(entry, f"{src} entry {n}", rows, str(entry.get("MESSAGE", ""))[:120])
                        entry, n = {}, n + 1
                        if len(rows.rows) >= ctx.chunk_rows:
                            yield rows.take()
                    if not line:
                        break
                    continue
                key, eq, value = line.rstrip(b"\n").partition(b"=")
                if not _FIELD.fullmatch(key):
                    ctx.rejects.reject(FORMAT, f"{src} entry {n}", "not a FIELD=value line", line[:120].decode(
                        "utf-8", "replace"))
                    continue
                if eq:
                    entry[key.decode()] = value.decode("utf-8", "replace")
                    continue
                size = fh.read(8)  # a binary field: its length, the bytes, a newline
                length = struct.unpack("<Q", size)[0] if len(size) == 8 else -1
                data = fh.read(length + 1) if 0 <= length <= _MAX_FIELD else b""
                if len(data) != length + 1 or not data.endswith(b"\n"):
                    ctx.rejects.reject(FORMAT, f"{src} entry {n}", "binary field cut short or damaged (its length does "
                                       "not frame it): its entry is skipped, up to the next blank line",
                                       key.decode("utf-8", "replace"))
                    fh.put_back(size + data)
                    while (skipped := fh.readline()) and skipped != b"\n":
                        pass
                    entry, n = {}, n + 1
                    continue
                entry[key.decode()] = data[:-1]
        if rows.rows:
            yield rows.take()


def looks_like(first_line: bytes) -> bool:
    """Whether a file's first line begins an export entry (journalctl writes ``__CURSOR=`` first)."""
    return _HEAD.match(first_line) is not None
