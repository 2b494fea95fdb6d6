"""Whether the job this thread runs has been asked to stop, for the waits that could outlast a prompt stop.

The daemon's jobs (daemon/service/jobs.py) run in worker threads, and SIGTERM lets the job in flight finish. Most passes
end in milliseconds; what can hold one for a long time is a wait on something outside: a Slurm command while
slurmctld does not answer (up to its timeout, per command), the blast-radius lock while another raswarden holds
it. Such waits ask :func:`requested` and give up early once the stop has come; the playbook engine starts no
further step. What was given up is journaled as not done and taken up at the next start, as after a crash: a
stop is prompt (well within systemd's ``TimeoutStopSec``) and loses nothing.

The job runner marks the thread with :func:`watching` for each run; outside a job (a test, ``raswarden playbook
run`` without ``--follow``) nothing is ever requested.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_local = threading.local()


class Stopped(Exception):
    """A wait given up because the job was told to stop (its message says which); the engine leaves the step for
    the next start, the job runner logs it without counting a failure."""

#: how long a Slurm command already under way may still take once a stop has come (a command that answers at
#: all answers within a second or two; one that does not is abandoned: its step is verified at the next start)
GRACE_S = 5.0


@contextmanager
def watching(event: threading.Event) -> Iterator[None]:
    """Run the block (one run of a job) as stopping when ``event`` is set."""
    previous = getattr(_local, "event", None)
    _local.event = event
    try:
        yield
    finally:
        _local.event = previous


def requested() -> bool:
    """Has the job this thread runs been asked to stop?"""
    event = getattr(_local, "event", None)
    return event is not None and event.is_set()


def pause(seconds: float) -> None:
    """Sleep ``seconds``, or less if a stop is asked for meanwhile (the caller then sees :func:`requested`)."""
    event = getattr(_local, "event", None)
    if event is None:
        time.sleep(seconds)
    else:
        event.wait(seconds)
