"""``requeue``: move the node's jobs off it (after a checkpoint step, only those it signalled)."""

from __future__ import annotations

from playbooks.steps.handler import StepHandler, describe_jobs


def targets(action, node: str, state) -> tuple[list[str], list[str]]:
    """The jobs a requeue moves off ``node``, and those it leaves running. After a checkpoint step only the jobs it
    signalled (they opted in): a requeue sends TERM, and a job that did not opt in would lose its work since its
    own last checkpoint, so it keeps running on the drained node (docs/architecture.md §6). Without a checkpoint step (a
    failed node: its jobs are lost anyway) every job on the node."""
    on_node = [j.id for j in state.jobs_on(node)]
    ckpt = next((s for s in action.steps if s.type == "checkpoint"), None)
    if ckpt is None:
        return on_node, []
    signalled = set(ckpt.detail.get("signalled", []))
    return [j for j in on_node if j in signalled], [j for j in on_node if j not in signalled]


class Requeue(StepHandler):
    name = "requeue"
    changes_cluster = True

    def execute(self, ctx, action, st, state) -> str:
        jobs, left = targets(action, action.node, state)
        for job in jobs:
            ctx.scheduler.requeue(job)
        st.detail["requeued"] = st.detail.get("requeued", []) + jobs
        if left:
            st.detail["left_running"] = left
        return "done"

    def verify(self, ctx, action, st, state) -> bool:
        return not targets(action, action.node, state)[0] if action.node else True

    def describe(self, ctx, action, st, state) -> str:
        return describe_jobs(action, st, state)
