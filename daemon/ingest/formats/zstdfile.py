"""Zstandard-compressed files (logrotate's ``compresscmd zstd``, ``.zst``) read as their data, frame after frame,
with a file that ends inside a frame raised as :class:`EOFError`, as :mod:`gzip` does: the readers then read up to the
cut and reject it with its place (daemon/ingest/formats/reader.py). The ``zstandard`` package decodes; its own stream
reader
ends a cut file quietly, which would pass a cut last line off as whole."""

from __future__ import annotations

import io
from pathlib import Path

import zstandard

# Compressed bytes fed to the decoder at a time: what one feed decodes is held whole, and zstd's run-length blocks
# decode a few bytes into 128 KiB (a file of zeros: 1 KiB in, tens of MB out at most; gzip and xz stream theirs).
_IN = 1 << 10


class _ZstdRaw(io.RawIOBase):
    def __init__(self, path: Path):
        self._fh = open(path, "rb")
        self._frame = zstandard.ZstdDecompressor().decompressobj()
        self._pending = memoryview(b"")  # decoded, not yet read
        self._in_frame = False  # input was given to the current frame and it has not ended

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            data = self._fh.read(_IN)
            if not data:
                if self._in_frame:
                    raise EOFError("the file ends inside a zstd frame")
                return 0
            self._feed(data)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]  # a view: what is left is not copied
        return n

    def _feed(self, data: bytes) -> None:
        decoded = []
        while data:
            try:
                decoded.append(self._frame.decompress(data))
            except zstandard.ZstdError as exc:
                raise OSError(f"zstd: {exc}") from None
            self._in_frame = not self._frame.eof
            if not self._frame.eof:
                break
            data = self._frame.unused_data  # the next frame (logrotate appends none; zstd -c a b makes two)
            self._frame = zstandard.ZstdDecompressor().decompressobj()
        self._pending = memoryview(b"".join(decoded))

    def close(self) -> None:
        self._fh.close()
        super().close()


def open_zstd(path: Path, mode: str = "rb") -> io.BufferedReader:
    """``path`` opened for reading its decompressed data (``mode`` must be ``rb``, as for the other openers)."""
    if mode != "rb":
        raise ValueError("zstd files are read only")
    return io.BufferedReader(_ZstdRaw(path))
