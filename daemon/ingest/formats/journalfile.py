"""systemd journal files (``/var/log/journal/<machine-id>/*.journal``, ``remote-*.journal`` of systemd-journal-remote,
archived ``*.journal~``), read through ``journalctl --file``: a fleet's kernel log as the nodes keep it.

The journal's binary format is systemd's own (its header begins ``LPKSHHRH``); ``journalctl`` reads it, archived and
compressed entries included, and writes the kernel records as ``-o json`` lines, which go through the same
:func:`~daemon.ingest.formats.kernellog.journal_record` as a JSON export. A machine without journalctl, or a file
journalctl
cannot read, is refused saying so; a damaged file is read as far as journalctl reads it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from daemon.ingest.batch import Batch
from daemon.ingest.formats.kernellog import EventRows, journal_record
from daemon.ingest.formats.reader import COMPRESSED, ReadContext, open_binary

FORMAT = "journal_file"
MAGIC = b"LPKSHHRH"  # systemd's journal-def.h: the header's signature


class JournalFileReader:
    """Kernel records of a systemd journal file, through journalctl; see the module docstring."""

    format = FORMAT

    def __init__(self, journalctl: str = "journalctl"):
        self.journalctl = journalctl

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        src = str(path)
        binary = shutil.which(self.journalctl)
        if binary is None:
            ctx.rejects.refuse(FORMAT, src, "a systemd journal file: reading it needs journalctl (systemd); or "
                                            "export it where it was written with 'journalctl --file=FILE -o json'")
            return
        with tempfile.TemporaryDirectory(prefix="raswarden-journal-") as tmp:
            if path.suffix in COMPRESSED:  # journalctl reads files, not streams
                plain = Path(tmp) / path.stem
                with open_binary(path, ctx.rejects, FORMAT) as fh, open(plain, "wb") as out:
                    shutil.copyfileobj(fh, out)
                path = plain
            yield from self._read(binary, path, src, ctx)

    def _read(self, binary: str, path: Path, src: str, ctx: ReadContext) -> Iterator[Batch]:
        rows = EventRows(ctx, FORMAT, "kernel")
        # every boot the file holds; the kernel's records (its transport, or its identifier as a forwarder keeps it:
        # what journal_record takes for kernel records), "+" between the two matches meaning either (journalctl(1))
        argv = [binary, f"--file={path}", "--output=json", "--no-pager", "--quiet", "_TRANSPORT=kernel", "+",
                "SYSLOG_IDENTIFIER=kernel"]
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True,
                                    errors="replace")
            try:
                for n, line in enumerate(proc.stdout, 1):
                    if line.strip():
                        journal_record(line, f"{src} entry {n}", rows)
                    if len(rows.rows) >= ctx.chunk_rows:
                        yield rows.take()
            finally:
                proc.stdout.close()
                code = proc.wait()
            err.seek(0)
            said = err.read().decode("utf-8", "replace").strip()
        if code != 0:
            ctx.rejects.reject(FORMAT, src, f"journalctl could not read it all (exit {code})", said[-300:])
        if rows.rows:
            yield rows.take()


def looks_like(head: bytes) -> bool:
    """Whether a file beginning with ``head`` is a systemd journal file."""
    return head.startswith(MAGIC)
