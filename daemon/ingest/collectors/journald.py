"""Kernel RAS lines from the journal, followed, with a persisted cursor.

Two ways in:

* ``command`` (the default on a management node that receives its nodes' journals through
  systemd-journal-remote): ``journalctl --follow --merge --output=json _TRANSPORT=kernel`` plus the operator's
  ``args`` (e.g. ``--directory=/var/log/journal/remote``), started ``--after-cursor=`` the last record the
  daemon consumed; the very first start reads from ``since`` (default: now). A shard's instance adds one
  ``_HOSTNAME=`` match per name its nodes go by, so it reads only their records.
* ``file``: a JSON-lines journal export that grows (``journalctl -o json -f > FILE``, the simulator's
  ``kernel.journal.json``), followed by byte offset, starting over when the file is replaced or truncated.

The state (``cursor``, or ``inode``/``offset``/``line``) advances only with what :meth:`collect` returned,
and the service saves it with the tick that consumed those events: a restart resumes exactly there.
"""

from __future__ import annotations

import queue
import subprocess
import threading
from pathlib import Path
from typing import Any, ClassVar

from daemon.ingest.batch import Batch
from daemon.ingest.collectors.collector import Collector, Outcome
from daemon.ingest.formats.reader import ReadContext
from daemon.ingest.formats.kernellog import EventRows, journal_record

FORMAT = "journald"
MAX_LINES = 200_000  # per collection, so a backlog is worked through over several ticks, never all at once


class JournaldCollector(Collector):
    """Follows the journal (a journalctl process or a JSON-lines file); see the module docstring."""

    kind: ClassVar[str] = "journald"
    options: ClassVar[dict[str, Any]] = {"file": "", "journalctl": "journalctl", "args": [], "since": "now"}

    def __init__(self, name: str, ctx: ReadContext, **options: Any):
        super().__init__(name, ctx, **options)
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue = queue.Queue(maxsize=4 * MAX_LINES)
        self._reader: threading.Thread | None = None
        self._error: str | None = None

    # -- journalctl ------------------------------------------------------------------------------
    def command(self) -> list[str]:
        """The journalctl argument list (never a shell), from the saved cursor or ``since``."""
        # --merge: journalctl >= 250 takes --follow alone to mean "the current boot", which in a directory of
        # forwarded journals is one node's latest boot (every other node's lines would be lost, and an empty
        # directory is an error); --merge reads every journal there is, as it did before
        argv = [self.journalctl, "--follow", "--merge", "--output=json", "--no-pager", *map(str, self.args)]
        cursor = self.state.get("cursor")
        if cursor:
            argv.append(f"--after-cursor={cursor}")
        elif self.since == "now":
            argv.append("--lines=0")
        else:
            argv.append(f"--since={self.since}")
        # a shard reads its own nodes' records only: matches on one field are alternatives (journalctl(1))
        hosts = [f"_HOSTNAME={h}" for h in sorted(self.ctx.shard_hosts or ())]
        return argv + ["_TRANSPORT=kernel", *hosts]

    def _start(self) -> None:
        try:
            self._proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          stdin=subprocess.DEVNULL)
        except OSError as exc:
            self._error = f"{self.journalctl}: {exc.strerror or exc}"
            self._proc = None
            return
        self._error = None
        self._reader = threading.Thread(target=self._pump, args=(self._proc,), daemon=True,
                                        name=f"journalctl-{self.name}")
        self._reader.start()

    def _pump(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            self._lines.put(raw.decode("utf-8", errors="replace"))

    def _from_process(self, rows: EventRows, outcome: Outcome) -> None:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                err = (self._proc.stderr.read() if self._proc.stderr else b"").decode(errors="replace").strip()
                outcome.errors.append(f"journalctl exited with {self._proc.returncode}: {err[-300:]}")
                self._drain(rows)  # what it wrote before it exited
            self._start()
            if self._error:
                outcome.errors.append(self._error)
                return
        self._drain(rows)

    def _drain(self, rows: EventRows) -> None:
        for _ in range(MAX_LINES):
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                return
            if not line.strip():
                continue
            record = journal_record(line, f"journalctl cursor {self.state.get('cursor', '-')}", rows)
            if record is not None and isinstance(record.get("__CURSOR"), str):
                self.state["cursor"] = record["__CURSOR"]

    # -- a followed file -------------------------------------------------------------------------
    def _from_file(self, rows: EventRows, outcome: Outcome) -> None:
        path = Path(self.file)
        try:
            st = path.stat()
        except OSError as exc:
            if Path(path).parent.exists() and not self.state.get("inode"):
                return  # not written yet: no data is not an error
            outcome.errors.append(f"{path}: {exc.strerror or exc}")
            return
        offset, line_no = int(self.state.get("offset", 0)), int(self.state.get("line", 0))
        if self.state.get("inode") != st.st_ino or st.st_size < offset:
            offset, line_no = 0, 0  # replaced or truncated: start over
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                for _ in range(MAX_LINES):
                    raw = fh.readline()
                    if not raw or not raw.endswith(b"\n"):
                        break  # a line still being written is read next time, whole
                    offset += len(raw)
                    line_no += 1
                    text = raw.decode("utf-8", errors="replace")
                    if text.strip():
                        journal_record(text, f"{path}:{line_no}", rows)
        except OSError as exc:
            outcome.errors.append(f"{path}: {exc.strerror or exc}")
        self.state.update(inode=st.st_ino, offset=offset, line=line_no)

    # --------------------------------------------------------------------------------------------
    def collect(self, now: float) -> tuple[Batch, Outcome]:
        outcome = Outcome(targets_total=1)
        rows = EventRows(self.ctx, FORMAT, "kernel")
        if self.file:
            self._from_file(rows, outcome)
        else:
            self._from_process(rows, outcome)
        if not outcome.errors:
            outcome.targets_up = 1
        batch = rows.take()
        outcome.events = len(batch.events)
        return batch, outcome

    def probe(self) -> str | None:
        if self.file:
            return None if Path(self.file).parent.exists() else f"{self.file}: directory missing"
        return self._error

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()


