"""The job runner the service and the following commands share: a failing job is counted and the others go on, a
leased job runs only for the lease's holder, and a stop lets the job in flight finish."""

from __future__ import annotations

import threading
import time

from daemon import metrics
from daemon.service.jobs import Job, JobRunner, guarded, leased, next_on_phase
from daemon.store.leases import Lease
from daemon.store import Store
from playbooks import stopping


def until(condition, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def test_a_failing_job_is_counted_and_the_others_go_on():
    failures = metrics.JOB_FAILURES.labels("broken")
    before = failures._value.get()
    ran: list[str] = []

    def broken() -> None:
        ran.append("broken")
        raise RuntimeError("boom")

    runner = JobRunner(workers=2)
    runner.schedule([Job("broken", broken, 0.05), Job("fine", lambda: ran.append("fine"), 0.05)])
    runner.start()
    try:
        until(lambda: ran.count("broken") >= 3 and ran.count("fine") >= 3, "both jobs ran three times")
    finally:
        runner.stop()
    assert failures._value.get() - before >= 3
    guarded("broken", broken)()  # called directly: no exception escapes either


def test_a_job_not_run_at_once_runs_one_interval_after_the_start():
    """Housekeeping and retraining (first_now=False): first one interval in, then every interval (they had been
    added paused, and never ran)."""
    ran: list[float] = []
    runner = JobRunner(workers=2)
    runner.schedule([Job("later", lambda: ran.append(time.monotonic()), 0.3, first_now=False)])
    started = time.monotonic()
    runner.start()
    try:
        until(lambda: len(ran) >= 2, "the job ran twice")
    finally:
        runner.stop()
    assert ran[0] - started >= 0.25  # not at once


def test_a_job_on_a_phase_runs_at_once_then_on_its_phase_of_the_interval():
    assert next_on_phase(1000.0, 15.0, 3.75) == 1008.75 and next_on_phase(1008.75, 15.0, 3.75) == 1008.75
    ran: list[float] = []
    runner = JobRunner(workers=2)
    runner.schedule([Job("phased", lambda: ran.append(time.time()), 2.0, phase_s=0.5)])
    runner.start()
    try:
        until(lambda: ran, "the first run, at once")
        assert abs(runner.scheduler.get_job("phased").next_run_time.timestamp() % 2.0 - 0.5) < 1e-3
        runner.replace(Job("phased", lambda: ran.append(time.time()), 2.0, first_now=False, phase_s=1.5))
        assert [j.id for j in runner.scheduler.get_jobs()] == ["phased"]  # the first run's one-off went too
        assert abs(runner.scheduler.get_job("phased").next_run_time.timestamp() % 2.0 - 1.5) < 1e-3
    finally:
        runner.stop()


def test_a_leased_job_runs_only_for_the_holder(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    first, second = Lease(store, "shard:x", ttl_s=60), Lease(store, "shard:x", ttl_s=60)
    ran: list[str] = []
    told: list[str] = []
    assert leased(first, lambda: ran.append("first"))() is None and ran == ["first"]
    assert leased(second, lambda: ran.append("second"), told.append)() is None
    assert ran == ["first"] and told == [first.holder]
    first.release()
    leased(second, lambda: ran.append("second"))()
    assert ran == ["first", "second"]
    store.close()


def test_stop_lets_the_job_in_flight_finish():
    started, finished = threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        time.sleep(0.3)
        finished.set()

    runner = JobRunner(workers=1)
    runner.schedule([Job("slow", slow, 60.0)])
    runner.start()
    until(started.is_set, "the job started")
    runner.stop(wait=True)
    assert finished.is_set()


def test_run_until_stopped_returns_when_told():
    ran = threading.Event()
    runner = JobRunner(workers=1)
    runner.schedule([Job("once", ran.set, 60.0)])
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    runner.run_until_stopped(stop)  # in the main thread, as the commands run it
    assert ran.is_set() and runner.scheduler is None


def test_a_stop_ends_a_job_waiting_on_another_raswardens_lock(tmp_path):
    """The job in flight waits for the blast-radius lock another raswarden holds (timeout 60 s): a stop ends the
    wait within a moment (playbooks/stopping.py), and only for that runner's jobs."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    holder, waiter = Store(url), Store(url)
    started, outcome = threading.Event(), []

    def wait_for_lock() -> None:
        started.set()
        try:
            with waiter.cluster_lock("blast-radius", timeout_s=60.0):
                outcome.append("got it")
        except (TimeoutError, stopping.Stopped) as exc:
            outcome.append(str(exc))

    try:
        with holder.cluster_lock("blast-radius"):
            runner = JobRunner(workers=1)
            runner.schedule([Job("playbooks", wait_for_lock, 60.0)])
            runner.start()
            until(started.is_set, "the job started")
            time.sleep(0.3)
            began = time.monotonic()
            runner.stop(wait=True)
            assert time.monotonic() - began < 5.0
        assert outcome == ["raswarden is stopping: gave up waiting for the blast-radius lock"]
        assert not stopping.requested()  # outside a job, and for a runner started again
        runner.start()
        assert not runner.stopping.is_set()
        runner.stop()
    finally:
        holder.close()
        waiter.close()


def test_a_full_disk_under_the_store_is_one_line_not_a_traceback_each_run(tmp_path, caplog):
    """The store's file system fills while the daemon runs (a real SQLite on a real 2 MiB tmpfs): each failing run
    is counted, the first says in one line what it is and what to do, the next ones within ten minutes are not
    logged again; once there is room the job writes again."""
    import logging
    import os
    import subprocess

    from tests.conftest import require

    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
                                                   capture_output=True).returncode == 0
    require(mounted, "needs root to mount a small tmpfs (a disk that fills)")
    try:
        store = Store(f"sqlite:///{disk}/state.db")
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:  # the rest of the disk, to the last block
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        n = iter(range(10**6))

        def write() -> None:
            store.upsert_entities([{"id": (node := f"sn01-b{next(n):05d}"), "kind": "node", "node": node,
                                    "first_seen": 0.0, "attrs": {"pad": "x" * 4000}} for _ in range(50)])

        failures = metrics.JOB_FAILURES.labels("cycle")
        before = failures._value.get()
        with caplog.at_level(logging.ERROR, logger="raswarden.jobs"):
            for _ in range(3):
                guarded("cycle", write)()
        said = [r for r in caplog.records if r.name == "raswarden.jobs"]
        assert failures._value.get() == before + 3
        assert len(said) == 1 and said[0].exc_info is None, [r.getMessage() for r in said]
        assert said[0].getMessage().startswith("job cycle failed: the store: the disk is full: free space where the "
                                               "store is (database or disk is full"), said[0].getMessage()
        filler.unlink()
        guarded("cycle", write)()
        assert failures._value.get() == before + 3
        store.close()
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


_SIGTERM_TO_A_JOB = """
import signal, sys, threading, time
from daemon.service.jobs import Job, JobRunner
from playbooks import stopping

started = threading.Event()

def job():
    started.set()
    while not stopping.requested():  # a Slurm call's wait, as playbooks/slurm.py makes it
        stopping.pause(0.05)

def deliver():  # the kernel handing the process's SIGTERM to the job's thread, not the main one
    started.wait()
    time.sleep(0.3)
    target = next(t for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor"))
    signal.pthread_kill(target.ident, signal.SIGTERM)

threading.Thread(target=deliver, daemon=True).start()
runner = JobRunner(workers=1)
runner.schedule([Job("busy", job, 60.0)])
runner.run_until_stopped()
print("stopped", flush=True)
"""


def test_a_sigterm_the_kernel_gives_a_jobs_thread_still_stops_the_runner():
    """A process-directed signal goes to any thread; Python runs its handler only in the main thread, when that thread
    runs. A main thread asleep in a bare ``Event.wait()`` never did: ``playbook run --follow`` went on until SIGKILL
    (a clean-clone run on a loaded machine, test_budget_across_shards). The runner's main thread wakes to run it."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", _SIGTERM_TO_A_JOB], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "stopped" in done.stdout, done.stderr[-2000:]


def test_store_failures_of_ever_new_causes_are_not_all_remembered(monkeypatch, caplog):
    """A cause whose text changes every run (a row id in it) is said each time, and what is kept for the reminders
    stays at STORE_CAUSES_KEPT, the most recently said kept: a daemon that runs for months does not grow with them."""
    import logging

    from daemon.service import jobs

    monkeypatch.setattr(jobs, "_store_said", {})
    with caplog.at_level(logging.ERROR, logger="raswarden.jobs"):
        for i in range(jobs.STORE_CAUSES_KEPT + 50):
            jobs._store_failure("cycle", f"constraint failed on row {i}")
    assert len([r for r in caplog.records if r.name == "raswarden.jobs"]) == jobs.STORE_CAUSES_KEPT + 50
    assert len(jobs._store_said) == jobs.STORE_CAUSES_KEPT
    assert ("cycle", f"constraint failed on row {jobs.STORE_CAUSES_KEPT + 49}") in jobs._store_said
    assert ("cycle", "constraint failed on row 0") not in jobs._store_said
