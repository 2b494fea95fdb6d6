"""The Slurm adapter of the Scheduler protocol: reads through ``sinfo --json`` and ``squeue --json`` (one
of each per snapshot), acts through ``scontrol`` and ``scancel``, always with argument lists, never a
shell; node names, job ids, signals and reasons are validated before they reach a command line.

Verified against Slurm 22.05 (Debian 12; the lab of scripts/slurm-lab.sh): ``sinfo --json`` gives each
node's ``state``, ``state_flags`` (``DRAIN``, ``MAINTENANCE``, ``REBOOT_REQUESTED``, ``NOT_RESPONDING``,
...), ``reason`` and ``reason_set_by_user``; ``squeue --json`` each job's ``job_state``, ``nodes`` (a host
list), ``comment``, ``name``, ``partition``, ``user_name``. ``scontrol requeue`` sends the batch script TERM, so a
checkpoint signal (``scancel --signal=USR1 --batch``) goes first. Which jobs opted in to checkpoint
signals is configured (:class:`OptIn`): Slurm 22.05 does not report a job's own ``--signal`` request.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from playbooks import stopping
from playbooks.hostlist import expand
from playbooks.scheduler import (ALLOC, DOWN, DRAIN, IDLE, MAINT, MIXED, REBOOT, ClusterState, JobInfo, JobOutcome,
                                 NodeInfo, SchedulerError)

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
JOB_ID = re.compile(r"^\d{1,12}(_\d{1,9})?$")
SIGNALS = frozenset({"USR1", "USR2", "TERM", "INT", "HUP", "CONT", "STOP"})
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # reservations and job names raswarden makes
# scontrol's JobState -> JobOutcome.state (COMPLETED is passed only with exit status 0)
_OUTCOME = {"PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending", "RESIZING": "running",
            "RUNNING": "running", "COMPLETING": "running", "SUSPENDED": "running", "COMPLETED": "passed",
            "FAILED": "failed", "NODE_FAIL": "failed", "BOOT_FAIL": "failed", "OUT_OF_MEMORY": "failed",
            "DEADLINE": "timeout", "TIMEOUT": "timeout", "PREEMPTED": "cancelled", "CANCELLED": "cancelled"}

_STATE = {"idle": IDLE, "allocated": ALLOC, "mixed": MIXED, "down": DOWN, "completing": ALLOC,
          "future": DOWN, "unknown": DOWN, "error": DOWN, "planned": IDLE}
_FLAG = {"drain": DRAIN, "draining": DRAIN, "drained": DRAIN, "maintenance": MAINT, "maint": MAINT,
         "reboot_requested": REBOOT, "reboot_issued": REBOOT, "not_responding": DOWN, "power_down": DOWN,
         "powered_down": DOWN, "powering_down": DOWN, "fail": DRAIN}
# Flags of a node the scheduler is rebooting (scontrol reboot) or powering up: its telemetry goes and comes back reset.
BOOTING = frozenset({"reboot_issued", "powering_up", "power_up"})
# Errors that say the controller could not be asked (trying again can help).
_TRANSIENT = ("unable to contact slurm controller", "socket timed out", "connection refused", "timed out",
              "resource temporarily unavailable", "slurm_receive_msg", "zero bytes were transmitted")
_MESSAGE_CHARS = 600
"""At most this much of a failing command's output is said (its end: the outcome)."""
# What slurmctld 22.05 answers a user without the admin level an action needs: "Invalid user id" to a node update
# or a reservation, "Access/permission denied" to another user's job (tests/playbooks/test_slurm_permissions.py).
_DENIED = ("invalid user id", "access/permission denied")


@dataclass
class OptIn:
    """Which jobs take a checkpoint signal: a comment or name matching a pattern, or a listed partition."""

    comment_pattern: str = r"raswarden:checkpoint"
    name_pattern: str | None = None
    partitions: Sequence[str] = field(default_factory=tuple)

    def __call__(self, job: dict) -> bool:
        if self.comment_pattern and re.search(self.comment_pattern, job.get("comment") or ""):
            return True
        if self.name_pattern and re.search(self.name_pattern, job.get("name") or ""):
            return True
        return bool(self.partitions) and (job.get("partition") or "") in self.partitions


def check_node(node: str) -> str:
    if not NODE_NAME.match(node or ""):
        raise SchedulerError(f"refusing node name {node!r} (not a host name)", retryable=False)
    return node


def check_job(job_id: str) -> str:
    if not JOB_ID.match(str(job_id)):
        raise SchedulerError(f"refusing job id {job_id!r} (not a Slurm job id)", retryable=False)
    return str(job_id)


def epoch(value) -> float | None:
    """A time of Slurm's JSON: a number (22.05), or ``{"set", "infinite", "number"}`` (23.02 on); 0, unset or
    infinite is None."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    try:
        t = float(value)
    except (TypeError, ValueError):
        return None
    return t if t > 0 else None


def node_info(raw: dict) -> NodeInfo:
    """A NodeInfo from one ``sinfo --json`` node (``state`` is a word in 22.05, a list of words from 23.02 on)."""
    words = raw.get("state") or "unknown"
    words = [words] if isinstance(words, str) else list(words)
    flags = [str(f).lower() for f in [*words[1:], *(raw.get("state_flags") or [])]]
    state = str(words[0] if words else "unknown").lower()
    states = {_STATE.get(state, state)} | {_FLAG.get(f, f) for f in flags}
    return NodeInfo(name=raw["name"], states=frozenset(states), reason=raw.get("reason") or "",
                    reason_set_by=raw.get("reason_set_by_user") or "", boot_time=epoch(raw.get("boot_time")),
                    booting=",".join(sorted(BOOTING.intersection(flags))).upper())


class SlurmScheduler:
    """Slurm through its command-line tools (``SLURM_CONF`` from ``slurm_conf`` or the environment)."""

    def __init__(self, slurm_conf: str | None = None, opt_in: OptIn | None = None, timeout_s: float = 30.0,
                 bin_dir: str | None = None):
        self.env = dict(os.environ)
        if slurm_conf:
            self.env["SLURM_CONF"] = slurm_conf
        self.opt_in = opt_in or OptIn()
        self.timeout_s = timeout_s
        self.bin_dir = bin_dir

    def _run(self, args: list[str], what: str) -> str:
        cmd = [os.path.join(self.bin_dir, args[0]) if self.bin_dir else args[0], *args[1:]]
        try:
            proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except FileNotFoundError:
            raise SchedulerError(f"{what}: {args[0]} not found (is slurm-client installed?)", retryable=False) \
                from None
        stdout, stderr = self._answer(proc, args[0], what)
        if proc.returncode != 0:
            # every line, not only the last: Slurm's tools say what went wrong first and the generic outcome last
            # ("sbatch: error: invalid partition specified: x" before "Batch job submission failed: ...")
            lines = [line.strip() for line in (stderr or stdout).splitlines() if line.strip()]
            text = "; ".join(dict.fromkeys(lines)) if lines else f"exit status {proc.returncode}"
            if len(text) > _MESSAGE_CHARS:
                text = "..." + text[-_MESSAGE_CHARS:]
            if any(t in text.lower() for t in _DENIED):
                raise SchedulerError(f"{what}: {text} (Slurm refused user {_user()}: raswarden needs Slurm's Admin "
                                     "level, docs/install.md §4)", retryable=False)
            retry = any(t in text.lower() for t in _TRANSIENT)
            raise SchedulerError(f"{what}: {text}", retryable=retry)
        return stdout

    def _answer(self, proc: subprocess.Popen, tool: str, what: str) -> tuple[str, str]:
        """The command's output, waited for up to the timeout, or up to :data:`stopping.GRACE_S` once the job is
        told to stop (slurmctld not answering must not hold a stop for the timeout of every command left)."""
        deadline = time.monotonic() + self.timeout_s
        stop_deadline = None
        while True:
            try:
                return proc.communicate(timeout=0.25)
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if stop_deadline is None and stopping.requested():
                    stop_deadline = now + stopping.GRACE_S
                if now < deadline and (stop_deadline is None or now < stop_deadline):
                    continue
                proc.kill()
                proc.communicate()
                if stop_deadline is not None and now >= stop_deadline:
                    raise stopping.Stopped(f"{what}: raswarden is stopping: {tool} had not answered "
                                           f"{stopping.GRACE_S:.0f} s after the stop") from None
                raise SchedulerError(f"{what}: {tool} did not answer within {self.timeout_s:.0f} s",
                                     retryable=True) from None

    def _json(self, args: list[str], what: str) -> dict:
        out = self._run(args, what)
        try:
            data = json.loads(out)
        except ValueError as exc:
            raise SchedulerError(f"{what}: unreadable JSON ({exc})", retryable=True) from None
        errors = [e for e in data.get("errors") or [] if e]
        if errors:
            raise SchedulerError(f"{what}: {errors[0]}", retryable=True)
        return data

    # -- the protocol ----------------------------------------------------------------------------
    def nodes(self) -> dict[str, NodeInfo]:
        """Every node: one ``sinfo --json``."""
        nodes = {}
        for raw in self._json(["sinfo", "--json"], "sinfo").get("nodes") or []:
            info = node_info(raw)
            nodes[info.name] = info
        return nodes

    def snapshot(self) -> ClusterState:
        """Every node and job: one ``sinfo --json`` and one ``squeue --json``."""
        taken = time.time()
        nodes = self.nodes()
        jobs = {}
        for raw in self._json(["squeue", "--json"], "squeue").get("jobs") or []:
            job_id = str(raw.get("job_id"))
            try:
                names = expand(raw.get("nodes"))
            except ValueError:
                names = ()
            jobs[job_id] = JobInfo(id=job_id, nodes=names, state=str(raw.get("job_state") or "").lower(),
                                   checkpoint_opt_in=self.opt_in(raw), name=raw.get("name") or "",
                                   comment=raw.get("comment") or "", user=str(raw.get("user_name") or ""))
        return ClusterState(taken, nodes, jobs)

    def signal_job(self, job_id: str, signal: str) -> None:
        """Send ``signal`` to the job's batch script (where a training launcher traps it)."""
        if signal not in SIGNALS:
            raise SchedulerError(f"refusing signal {signal!r}", retryable=False)
        self._run(["scancel", f"--signal={signal}", "--batch", check_job(job_id)], f"signal job {job_id}")

    def drain(self, node: str, reason: str) -> None:
        """Drain ``node`` with ``reason``; draining an already drained node is not an error."""
        if not reason or "\n" in reason or len(reason) > 250:
            raise SchedulerError("drain reason must be one line of at most 250 characters", retryable=False)
        self._run(["scontrol", "update", f"NodeName={check_node(node)}", "State=DRAIN", f"Reason={reason}"],
                  f"drain {node}")

    def resume(self, node: str) -> None:
        """Return ``node`` to service; a node that is not drained is left as it is."""
        check_node(node)
        try:
            self._run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], f"resume {node}")
        except SchedulerError as exc:
            if exc.retryable or DRAIN in self._node_states(node):
                raise

    def requeue(self, job_id: str) -> None:
        """Requeue a running job (it restarts elsewhere); a job no longer running is left as it is."""
        check_job(job_id)
        try:
            self._run(["scontrol", "requeue", str(job_id)], f"requeue job {job_id}")
        except SchedulerError as exc:
            if exc.retryable:
                raise
            job = self.snapshot().jobs.get(str(job_id))
            if job is not None and job.state == "running":
                raise

    # -- an automatic reboot (RebootScheduler) ----------------------------------------------------------------------
    def reboot(self, node: str) -> None:
        """Reboot ``node`` once it is idle (``scontrol reboot``: slurm.conf's RebootProgram runs on it). A drain it has
        stays; Slurm flags it REBOOT_REQUESTED, then REBOOT_ISSUED, until it registers with a new boot time, and
        appends "reboot timed out" to its reason when it does not within ResumeTimeout."""
        try:
            self._run(["scontrol", "reboot", check_node(node)], f"reboot {node}")
        except SchedulerError as exc:  # (Slurm 22.05 without a RebootProgram ends its answer "Unspecified error")
            if exc.retryable or "Admin" in str(exc):  # (a user without Slurm's Admin level is told so already)
                raise
            raise SchedulerError(f"{exc} (Slurm refused the reboot: is slurm.conf's RebootProgram set? docs/install.md "
                                 "§4)", retryable=False) from None

    # -- validating a repaired node (ValidationScheduler) --------------------------------------------------------
    def reserve(self, node: str, name: str, duration_s: float) -> None:
        """A maintenance reservation of ``node`` for this user alone (``Flags=MAINT,IGNORE_JOBS``): no one else's
        job starts there while it lasts, even once the node is resumed; one of that name already there is it."""
        check_node(node)
        if not NAME.match(name):
            raise SchedulerError(f"invalid reservation name {name!r}", retryable=False)
        try:
            self._run(["scontrol", "create", "reservation", f"ReservationName={name}", f"Nodes={node}",
                       "StartTime=now", f"Duration={max(1, int(duration_s // 60))}", f"Users={_user()}",
                       "Flags=MAINT,IGNORE_JOBS"], f"reserve {node}")
        except SchedulerError as exc:
            if exc.retryable or "duplicate" not in str(exc).lower():
                raise

    def release(self, name: str) -> None:
        """Delete the reservation (the node returns to the cluster's jobs); one already gone is not an error."""
        if not NAME.match(name):
            raise SchedulerError(f"invalid reservation name {name!r}", retryable=False)
        try:
            self._run(["scontrol", "delete", f"ReservationName={name}"], f"release {name}")
        except SchedulerError as exc:
            text = str(exc).lower()  # Slurm 22.05: "Requested reservation is invalid"
            if exc.retryable or "invalid" not in text.split(":", 1)[-1] or "reservation" not in text:
                raise

    def submit_validation(self, node: str, reservation: str, name: str, command: str, time_limit_s: float,
                          output: str) -> str:
        """Run ``command`` (a shell line) as a batch job on exactly ``node`` inside ``reservation``, named ``name``
        (a job of that name still known to Slurm, in any state, is returned instead: a restart does not submit
        twice, even after the first job ended; slurmctld keeps an ended job for ``MinJobAge``, 300 s by default)."""
        check_node(node)
        for what in (reservation, name):
            if not NAME.match(what):
                raise SchedulerError(f"invalid name {what!r}", retryable=False)
        known = self._run(["squeue", "-h", "--states=all", "-o", "%i", f"--name={name}"],
                          f"look for job {name}").split()
        if known:
            return known[0]
        out = self._run(["sbatch", "--parsable", f"--reservation={reservation}", f"--nodelist={node}", "-N1",
                         "--exclusive", f"--time={max(1, int(-(-time_limit_s // 60)))}", f"--job-name={name}",
                         f"--output={output}", "--chdir=/tmp", "--no-requeue", f"--wrap={command}"],
                        f"submit {name} on {node}")
        return check_job(out.strip().split(";")[0])

    def job_outcome(self, job_id: str) -> JobOutcome:
        """How the job stands (``scontrol show job``): once Slurm has forgotten it (MinJobAge), ``gone``."""
        check_job(job_id)
        try:
            text = self._run(["scontrol", "show", "job", "-o", job_id], f"job {job_id}")
        except SchedulerError as exc:
            if not exc.retryable and "invalid job id" in str(exc).lower():
                return JobOutcome("gone", detail=str(exc))
            raise
        fields = dict(part.split("=", 1) for part in text.split() if "=" in part)
        state = fields.get("JobState", "")
        code = fields.get("ExitCode", "")
        exit_code = int(code.split(":")[0]) if code.split(":")[0].isdigit() else None
        outcome = _OUTCOME.get(state, "failed" if state else "gone")
        if outcome == "passed" and exit_code not in (0, None):
            outcome = "failed"
        return JobOutcome(outcome, exit_code, f"{state} exit {code} {fields.get('Reason', '')}".strip())

    def _node_states(self, node: str) -> frozenset[str]:
        info = self.snapshot().nodes.get(node)
        return info.states if info else frozenset()


def _user() -> str:
    """Who raswarden runs as (the reservation's only user)."""
    import getpass

    return getpass.getuser()
