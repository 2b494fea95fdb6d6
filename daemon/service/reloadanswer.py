"""A reload's answer, so that ``systemctl reload`` returns when the new config runs (or was refused).

SIGHUP carries no reply, and systemd runs ``ExecReload=`` as a command whose exit it waits for: a bare
``kill -HUP`` returns at once, the unit shows ``reloading`` afterwards, and a refused config reads as a
success. So the daemon writes, after every reload, ``raswarden-<pid>.reload`` in ``$RUNTIME_DIRECTORY``
(``RuntimeDirectory=`` of the unit): its count of reloads, ``applied`` or ``refused`` and why. ``raswarden
reload --pid $MAINPID`` reads the count, sends SIGHUP, and waits for the count to go up (exit 0 when applied,
1 when refused, with the daemon's reason). Without ``$RUNTIME_DIRECTORY`` the daemon writes nothing and the
command only sends the signal, and says so.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("raswarden.reload")

RUNTIME_ENV = "RUNTIME_DIRECTORY"


def answer_path(pid: int, runtime_dir: str | os.PathLike | None = None) -> Path | None:
    """Where process ``pid`` writes its reload answers; None outside a runtime directory."""
    base = runtime_dir if runtime_dir is not None else os.environ.get(RUNTIME_ENV, "")
    if not base:
        return None
    return Path(str(base).split(":")[0]) / f"raswarden-{pid}.reload"  # systemd lists several dirs with ':'


@dataclass(frozen=True)
class Answer:
    """The daemon's account of its latest reload."""

    count: int = 0
    result: str = ""
    reason: str = ""


def read_answer(path: Path) -> Answer:
    """The answer in ``path``; a missing or unreadable file is no reload yet."""
    try:
        data = json.loads(path.read_text())
        return Answer(int(data["count"]), str(data["result"]), str(data.get("reason", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return Answer()


class AnswerWriter:
    """The daemon's side: counts its reloads and writes each one's result (atomically) where the command reads."""

    def __init__(self, pid: int | None = None, runtime_dir: str | os.PathLike | None = None):
        self.path = answer_path(os.getpid() if pid is None else pid, runtime_dir)
        self.count = 0

    def write(self, applied: bool, reason: str = "") -> None:
        self.count += 1
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps({"count": self.count, "result": "applied" if applied else "refused",
                                       "reason": reason}))
            tmp.replace(self.path)
        except OSError as exc:  # the reload itself stands; only its waiter goes without an answer
            log.warning("could not write the reload answer %s: %s", self.path, exc)

    def remove(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: exists and is not a zombie waiting for its parent."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc to tell: it exists
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X")


def reload_and_wait(pid: int, timeout_s: float = 100.0, runtime_dir: str | os.PathLike | None = None,
                    poll_s: float = 0.1) -> tuple[int, str]:
    """Send SIGHUP to ``pid`` and wait for its answer: (exit code, message). 0 applied, 1 refused, no answer
    in time, or the process gone; 0 with a note when there is no runtime directory to wait on."""
    path = answer_path(pid, runtime_dir)
    before = read_answer(path) if path is not None else Answer()
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        return 1, f"no process {pid}"
    except PermissionError:
        return 1, f"not allowed to signal process {pid} (run as its user or root)"
    if path is None:
        return 0, f"SIGHUP sent to {pid}; no ${RUNTIME_ENV}, so not waiting for the reload to finish"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = read_answer(path)
        if got.count > before.count:
            if got.result == "applied":
                return 0, f"reloaded: process {pid} runs the new config"
            return 1, f"reload refused, process {pid} keeps its running config: {got.reason}"
        if not alive(pid):
            return 1, f"process {pid} exited during the reload"
        time.sleep(poll_s)
    return 1, f"no answer from process {pid} within {timeout_s:g} s (is it a raswarden daemon with ${RUNTIME_ENV}?)"
