"""``checkpoint``: signal the node's jobs that opted in to checkpoint (the others are left running)."""

from __future__ import annotations

from playbooks.params import SIGNALS, PlaybookError
from playbooks.steps.handler import StepHandler, describe_jobs


class Checkpoint(StepHandler):
    name = "checkpoint"
    keys = frozenset({"signal"})

    def parse(self, raw, where):
        raw.setdefault("signal", "USR1")
        if raw["signal"] not in SIGNALS:
            raise PlaybookError(f"{where}.signal: one of {', '.join(SIGNALS)}")
        return raw

    def execute(self, ctx, action, st, state) -> str:
        signalled, left, comments = [], [], {}
        for job in state.jobs_on(action.node):
            if job.checkpoint_opt_in:
                ctx.scheduler.signal_job(job.id, st.params.get("signal", "USR1"))
                signalled.append(job.id)
                comments[job.id] = job.comment  # an earlier confirmation still there is not this one's
            else:
                left.append(job.id)
        st.detail.update(signalled=signalled, left_running=left, signalled_at=ctx.clock(),
                         comments_at_signal=comments)
        return "done"

    def describe(self, ctx, action, st, state) -> str:
        return describe_jobs(action, st, state)
