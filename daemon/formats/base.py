"""What every recorded-telemetry reader shares: its context and the open-a-file helper."""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator, Protocol

from daemon.batch import Batch
from daemon.naming import SeriesMapper
from daemon.rejects import RejectLog

CHUNK_ROWS = 1_000_000


@dataclass
class ReadContext:
    """Shared state of one replay: the series mapper (entity naming), the reject log, chunk size."""

    mapper: SeriesMapper = field(default_factory=SeriesMapper)
    chunk_rows: int = CHUNK_ROWS
    read_bytes: int = 16 * 1024 * 1024

    @property
    def rejects(self) -> RejectLog:
        return self.mapper.rejects


class Reader(Protocol):
    """A reader turns one file into a stream of columnar batches; bad records are rejected, not raised."""

    format: str

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]: ...


def open_binary(path: Path) -> IO[bytes]:
    """Open a file for reading, transparently decompressing ``.gz``."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def iter_lines(path: Path, read_bytes: int) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(first line number, lines)`` blocks of whole lines of a text file, never holding it whole.

    Bytes that are not UTF-8 are replaced, so one bad byte spoils one line, not the file.
    """
    lineno = 1
    rest = b""
    with open_binary(path) as fh:
        while True:
            block = fh.read(read_bytes)
            if not block:
                break
            block = rest + block
            cut = block.rfind(b"\n")
            if cut == -1:
                rest = block
                continue
            rest = block[cut + 1 :]
            lines = block[:cut].decode("utf-8", errors="replace").split("\n")
            yield lineno, lines
            lineno += len(lines)
    if rest:
        yield lineno, [rest.decode("utf-8", errors="replace")]


def read_tail(path: Path, size: int = 256) -> bytes | None:
    """The last ``size`` bytes of a plain file; None for a compressed one, empty when unreadable."""
    if path.suffix == ".gz":
        return None
    try:
        with open(path, "rb") as fh:
            fh.seek(0, io.SEEK_END)
            end = fh.tell()
            fh.seek(max(0, end - size))
            return fh.read()
    except OSError:
        return b""
