"""``resume``: return a node raswarden drained to service, after a clean period and its health check, never a
repeat offender's."""

from __future__ import annotations

from playbooks.guards import REASON_PREFIX, repeat_offender
from playbooks.params import argv, duration, render
from playbooks.scheduler import DOWN, DRAIN
from playbooks.steps.exec import run
from playbooks.steps.handler import StepHandler, values


class Resume(StepHandler):
    name = "resume"
    keys = frozenset({"health_check", "clean_for"})
    leaves_others_alone = False  # it checks whose drain it is itself
    changes_cluster = True

    def parse(self, raw, where):
        if "health_check" in raw:
            raw["health_check"] = argv(raw["health_check"], f"{where}.health_check")
        raw["clean_for"] = duration(raw.get("clean_for", "30m"), f"{where}.clean_for")
        return raw

    def execute(self, ctx, action, st, state) -> str:
        node = action.node
        info = state.nodes.get(node)
        if info is None or DRAIN not in info.states:
            st.detail["note"] = "not drained"
            return "done"
        if not info.reason.startswith(REASON_PREFIX):
            st.detail["note"] = f"drained by {info.reason_set_by or 'someone else'} ({info.reason!r}): left alone"
            return "skipped"
        if DOWN in info.states:
            # Down (being repaired, or lost): its quiet says nothing about the hardware. A node drained for a
            # fault that shows only under load looks healthy once idle; resuming it then puts the job back
            # on the fault, and the drain after that makes it a repeat offender.
            st.detail["note"] = "down: resumed once it is back"
            return "waiting"
        now = ctx.clock()
        since = action.incident.closed_at or action.created_at
        if now - since < st.params.get("clean_for", 1800.0):
            return "waiting"
        offender = repeat_offender(ctx.guards, ctx.journal.drains_of(node, now - ctx.guards.repeat_window_s))
        if offender:
            st.detail["note"] = offender
            return "skipped"
        if st.params.get("health_check"):
            run([render(a, values(action)) for a in st.params["health_check"]], st)
        ctx.scheduler.resume(node)
        return "done"

    def verify(self, ctx, action, st, state) -> bool:
        info = state.nodes.get(action.node) if action.node else None
        return info is not None and DRAIN not in info.states
