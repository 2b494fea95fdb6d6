"""What every recorded-telemetry reader shares: its context and the open-a-file helper."""

from __future__ import annotations

import bz2
import datetime as dt
import gzip
import io
import lzma
import logging
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol, TypeVar
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from daemon.ingest.batch import Batch
from daemon.ingest.formats.zstdfile import open_zstd
from daemon.ingest.naming import SeriesMapper
from daemon.ingest.rejects import RejectLog
from daemon.timetext import zone_name

log = logging.getLogger("raswarden.formats")

CHUNK_ROWS = 1_000_000
T = TypeVar("T")


@dataclass
class ReadContext:
    """Shared state of one replay: the series mapper (entity naming), the reject log, chunk size."""

    mapper: SeriesMapper = field(default_factory=SeriesMapper)
    chunk_rows: int = CHUNK_ROWS
    read_bytes: int = 16 * 1024 * 1024
    #: threads that scan a file's next blocks while its last one is named and batched (:func:`scanned_ahead`); 1
    #: scans each block in turn
    scan_threads: int = field(default_factory=lambda: scan_threads_default())
    #: labels a live scrape attaches to every series that lacks them (``instance``, ``job``), as Prometheus does
    target_labels: dict[str, str] = field(default_factory=dict)
    #: first and last time of the data read so far (replay reads files with full stamps first), which dates
    #: the syslog lines that carry no year
    span: tuple[float, float] | None = None
    #: ``(since, until]``: only rows stamped in it are wanted (a part of a long trace); a reader may skip what its
    #: own index puts outside it unread (Parquet row groups by their statistics), and replay drops the rest
    window: tuple[float, float] | None = None
    #: the nodes of this instance's shard (daemon/shards.py; None: every node): a collector that can tell a target's
    #: node before reading it leaves other shards' targets alone
    owns_node: Callable[[str], bool] | None = None
    #: the shard's PromQL label matchers (``[shards.NAME] matchers``): what a PromQL collector without matchers of its
    #: own asks with
    shard_matchers: str = ""
    #: the host names (node names and their aliases) of the shard's nodes (None: every node): a journal reader asks
    #: journalctl for their records only
    shard_hosts: frozenset[str] | None = None

    #: the zone of stamps that name none (dmesg -T, classic syslog, nvidia-smi's CSV, Fabric Manager's log): UTC
    #: unless the operator says the hosts keep local time (``--timezone``, ``timezone:`` in topology.yaml)
    zone: dt.tzinfo = dt.UTC

    def extend_span(self, lo: float, hi: float) -> None:
        """Widen :attr:`span` to take in ``[lo, hi]``."""
        self.span = (lo, hi) if self.span is None else (min(self.span[0], lo), max(self.span[1], hi))

    @property
    def rejects(self) -> RejectLog:
        return self.mapper.rejects


#: a last line stamped this long after its file was last written cannot be: its stamps are not in the zone read
LATER_THAN_WRITTEN_S = 3600.0


def note_zoneless(ctx: ReadContext, fmt: str, src: str, path: Path, latest: float) -> None:
    """Say in the summary that a file's stamps name no zone and which one they were read in; and when its last line
    would then be stamped after the file was last written, that its hosts keep local time east of it."""
    zone = zone_name(ctx.zone)
    ctx.rejects.note(fmt, src, f"its times name no zone: read as {zone}")
    try:
        written = os.stat(path).st_mtime
    except OSError:
        return
    ahead = latest - written
    if LATER_THAN_WRITTEN_S < ahead <= 14.5 * 3600:  # further is no zone's offset (a file dated back by hand)
        ctx.rejects.note(fmt, src, f"its last line is stamped {ahead / 3600:.1f} h after the file was last written, "
                                   f"read as {zone}: its hosts keep local time ahead of that. Name their zone: "
                                   "--timezone ZONE (e.g. Asia/Shanghai) or 'timezone:' in topology.yaml")
        log.warning("%s: stamped %.1f h after it was written: local time, not %s?", src, ahead / 3600, zone)


class Reader(Protocol):
    """A reader turns one file into a stream of columnar batches; bad records are rejected, not raised."""

    format: str

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]: ...


#: what logrotate and the exporters' archives compress with (``compresscmd xz``, ``bzip2``, ``zstd``), read
#: transparently
COMPRESSED = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open, ".zst": open_zstd}
_BROKEN = (EOFError, OSError, zlib.error, lzma.LZMAError)
_PIECE = 1 << 16


class _Decompressing:
    """A compressed file read as its data; where the data ends early or breaks (a file cut short in a copy, a bad
    block) it ends there: what came before is read, and the cut is rejected with its place, never raised."""

    def __init__(self, path: Path, rejects: RejectLog | None, fmt: str):
        self._fh = COMPRESSED[path.suffix](path, "rb")
        self._path, self._rejects, self._fmt = path, rejects, fmt
        self._done = 0
        self.cut: str | None = None

    def _guard(self, call, *args) -> bytes:
        if self.cut is not None:
            return b""
        try:
            data = call(*args)
        except _BROKEN as exc:
            self.cut = f"compressed data ends or breaks after {self._done:,} bytes of it ({exc})"
            if self._rejects is not None:
                log.warning("%s: %s", self._path, self.cut)
                self._rejects.reject(self._fmt, f"{self._path} (after {self._done:,} bytes of its data)",
                                     "compressed data ends or breaks (a file cut short?): read up to there")
            return b""
        self._done += len(data)
        return data

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all with -1), taken a piece at a time: a decompressor that meets the cut in a read
        drops what that read had decoded, so a piece is all a cut can cost."""
        parts = []
        want = size if size >= 0 else None
        while want is None or want > 0:
            piece = self._guard(self._fh.read, _PIECE if want is None else min(want, _PIECE))
            if not piece:
                break
            parts.append(piece)
            if want is not None:
                want -= len(piece)
        return b"".join(parts)

    def readline(self, size: int = -1) -> bytes:
        return self._guard(self._fh.readline, size)

    def read1(self, size: int = -1) -> bytes:  # what io.TextIOWrapper reads with
        return self.read(size if size > 0 else 1 << 16)

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return self._fh.closed

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> _Decompressing:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def open_binary(path: Path, rejects: RejectLog | None = None, fmt: str = "input") -> IO[bytes]:
    """Open a file for reading, transparently decompressing ``.gz``, ``.xz``, ``.bz2`` and ``.zst`` (compressed data
    that ends early ends the file there, rejected in ``rejects`` under ``fmt`` with its place)."""
    if path.suffix in COMPRESSED:
        return _Decompressing(path, rejects, fmt)  # type: ignore[return-value]
    return open(path, "rb")


def iter_byte_blocks(path: Path, read_bytes: int, rejects: RejectLog | None = None,
                     fmt: str = "input") -> Iterator[tuple[int, bytes | memoryview]]:
    """Yield ``(first line number, block)``: whole lines of a file (no final newline), never the file whole (a
    compressed file cut short: up to the cut, rejected in ``rejects``, and its last line, cut with it, too: an Xid 79
    cut to "Xid ... 7" must not be read as Xid 7). A plain file's blocks are views of buffers read into and never
    copied (each block its own buffer, so a block kept stays as it was read)."""
    lineno = 1
    rest = b""
    with open_binary(path, rejects, fmt) as fh:
        readinto = getattr(fh, "readinto", None)
        while True:
            if readinto is not None:
                left = _bytes_left(fh)  # (a small file's buffer as large as the file, not a block)
                buf = bytearray(len(rest) + (read_bytes if left is None else max(1, min(read_bytes, left + 1))))
                buf[:len(rest)] = rest
                got = readinto(memoryview(buf)[len(rest):])
                if not got:
                    break
                end = len(rest) + got
                cut = buf.rfind(b"\n", 0, end)
                chunk: bytes | memoryview = memoryview(buf)[:end]
            else:
                more = fh.read(read_bytes)
                if not more:
                    break
                chunk = rest + more
                cut = chunk.rfind(b"\n")
            if cut == -1:
                rest = bytes(chunk)
                continue
            rest = bytes(chunk[cut + 1 :])
            block = chunk[:cut]
            yield lineno, block
            lineno += int(np.count_nonzero(np.frombuffer(block, dtype=np.uint8) == 10)) + 1
        cut_short = getattr(fh, "cut", None) is not None
    if rest and cut_short:
        if rejects is not None:
            rejects.reject(fmt, f"{path}:{lineno}", "a line cut short with its compressed file",
                           rest[:120].decode("utf-8", "replace"))
    elif rest:
        yield lineno, rest


def _bytes_left(fh) -> int | None:
    """Bytes from a plain file's position to its end as it is now (None: not a plain file)."""
    try:
        return os.fstat(fh.fileno()).st_size - fh.tell()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None


def scan_threads_default() -> int:
    """Threads for :func:`scanned_ahead`: the cores this process may run on, up to four."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # (not Linux)
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


def scanned_ahead(blocks: Iterable[tuple[int, bytes]], scan: Callable[[bytes], T],
                  threads: int) -> Iterator[tuple[int, bytes, T]]:
    """``(first line number, block, scan(block))`` for each block, in the blocks' order, with up to ``threads``
    blocks ahead being scanned meanwhile in threads. ``scan`` must touch no shared state; it pays where it spends
    its time in code that lets go of the interpreter's lock (Arrow's and numpy's kernels), so that the blocks of
    one file are scanned on several cores while the caller works on the block before. The results are the same
    as scanning each block in turn."""
    if threads <= 1:
        for first, raw in blocks:
            yield first, raw, scan(raw)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="raswarden-scan") as pool:
        ahead: deque[tuple[int, bytes, Future[T]]] = deque()
        for first, raw in blocks:
            ahead.append((first, raw, pool.submit(scan, raw)))
            if len(ahead) > threads:
                first, raw, done = ahead.popleft()
                yield first, raw, done.result()
        while ahead:
            first, raw, done = ahead.popleft()
            yield first, raw, done.result()


def decode_lines(block: bytes | memoryview) -> list[str]:
    """Lines of a block; bytes that are not UTF-8 are replaced, so one bad byte spoils one line."""
    return str(block, "utf-8", errors="replace").split("\n")


def iter_lines(path: Path, read_bytes: int, rejects: RejectLog | None = None,
               fmt: str = "input") -> Iterator[tuple[int, list[str]]]:
    """Yield ``(first line number, lines)`` blocks of a text file, never holding it whole."""
    for first, block in iter_byte_blocks(path, read_bytes, rejects, fmt):
        yield first, decode_lines(block)


def host_in_name(path: Path, marker: str) -> str | None:
    """The host a file's name gives before ``marker`` (``sn01-b01.dmesg``, ``sn01-b01.nvidia-smi.csv``), for formats
    that name no host themselves; None when the name has no host there."""
    host, found, _ = path.name.partition(marker)
    return host if found and host else None


def read_tail(path: Path, size: int = 256) -> bytes | None:
    """The last ``size`` bytes of a plain file; None for a compressed one, empty when unreadable."""
    if path.suffix in COMPRESSED:
        return None
    try:
        with open(path, "rb") as fh:
            fh.seek(0, io.SEEK_END)
            end = fh.tell()
            fh.seek(max(0, end - size))
            return fh.read()
    except OSError:
        return b""
