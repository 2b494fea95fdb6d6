"""``wait_checkpoint``: until each signalled job confirms its checkpoint (a marker file, its job comment, or a
command), or the step's timeout. When each confirmation was first seen is kept (``confirmed_at``): with the
checkpoint step's ``signalled_at`` it is the job's measured checkpoint cost (daemon/operations/advice.py)."""

from __future__ import annotations

import os
import re
import subprocess

from playbooks.params import PlaybookError, argv, render, templates
from playbooks.steps.handler import StepHandler, values


class WaitCheckpoint(StepHandler):
    name = "wait_checkpoint"
    keys = frozenset({"confirm", "marker", "comment_pattern", "command"})
    held_by_breaker = False

    def parse(self, raw, where):
        confirm = raw.setdefault("confirm", "marker")
        needed = {"marker": "marker", "comment": "comment_pattern", "command": "command"}.get(confirm)
        if needed is None:
            raise PlaybookError(f"{where}.confirm: one of marker, comment, command")
        if needed not in raw:
            raise PlaybookError(f"{where}.{needed}: required with confirm: {confirm}")
        if confirm == "marker":
            templates(str(raw["marker"]), f"{where}.marker")
        if confirm == "command":
            raw["command"] = argv(raw["command"], f"{where}.command")
        return raw

    def execute(self, ctx, action, st, state) -> str:
        signalling = next((s for s in action.steps if s.type == "checkpoint"), None)
        signalled = signalling.detail.get("signalled", []) if signalling else []
        before = signalling.detail.get("comments_at_signal", {}) if signalling else {}
        pending = []
        confirmed = st.detail.setdefault("confirmed_at", {})  # job -> when its confirmation was first seen
        for job_id in signalled:
            job = state.jobs.get(job_id)
            if job is None or job.state != "running" or job_id in confirmed:
                continue
            if self._confirmed(action, st, job_id, job.comment, before.get(job_id)):
                confirmed[job_id] = ctx.clock()
                continue
            pending.append(job_id)
        st.detail["waiting_for"] = pending
        if not pending:
            return "done"
        if ctx.clock() - (st.started_at or 0) >= st.timeout_s:
            st.detail["note"] = f"no confirmation from {pending} within {st.timeout_s:.0f} s; going on"
            return "done"
        return "waiting"

    @staticmethod
    def _confirmed(action, st, job_id: str, comment: str, at_signal: str | None = None) -> bool:
        how = st.params.get("confirm", "marker")
        if how == "comment":
            # A comment that confirmed an earlier checkpoint (the job was signalled before, on another node) is not
            # this checkpoint's confirmation: it must have changed since the signal (a job writes the time in it).
            pattern = st.params["comment_pattern"]
            stale = at_signal is not None and re.search(pattern, at_signal) is not None
            return re.search(pattern, comment or "") is not None and not (stale and comment == at_signal)
        if how == "marker":
            return os.path.exists(render(st.params["marker"], values(action, job_id)))
        command = [render(a, values(action, job_id)) for a in st.params["command"]]
        try:
            return subprocess.run(command, capture_output=True, timeout=30, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
