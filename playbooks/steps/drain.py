"""``drain``: take the node out of service with raswarden's reason, within the blast-radius budget."""

from __future__ import annotations

from playbooks.guards import REASON_PREFIX, incident_in_reason, over_budget
from playbooks.params import render, templates
from playbooks.scheduler import DRAIN
from playbooks.steps.handler import StepHandler, values


def reason(action, st) -> str:
    """The drain reason: raswarden's prefix, then the step's template (the incident id first)."""
    return f"{REASON_PREFIX} " + render(st.params.get("reason", "{incident} {category}"), values(action))


class Drain(StepHandler):
    name = "drain"
    keys = frozenset({"reason"})
    changes_cluster = True

    def parse(self, raw, where):
        raw.setdefault("reason", "{incident} {category}")
        templates(str(raw["reason"]), f"{where}.reason")
        return raw

    def execute(self, ctx, action, st, state) -> str:
        node = action.node
        info = state.nodes.get(node)
        if info is not None and DRAIN in info.states and info.reason.startswith(REASON_PREFIX) and not info.draining:
            st.detail["note"] = "already drained by raswarden"
            return "done"
        try:
            with ctx.journal.budget_lock():
                # taken again inside the lock: a drain another shard made a moment ago counts
                held = over_budget(ctx.guards, node, ctx.scheduler.snapshot(), ctx.rack_of)
                if not held:
                    left = ctx.scheduler.drain(node, reason(action, st))
                    if left:  # (Kubernetes: pods still to evict, a disruption budget holding one) the next pass
                        st.detail["draining"] = left
                        return "waiting"
                    st.detail.pop("draining", None)
                    return "done"
        except TimeoutError as exc:
            held = f"blast-radius budget: {exc}"
        st.detail["held"] = held
        return "held"

    def verify(self, ctx, action, st, state) -> bool:
        info = state.nodes.get(action.node) if action.node else None
        return info is not None and DRAIN in info.states and not info.draining and \
            incident_in_reason(info.reason) == action.incident.id

    def describe(self, ctx, action, st, state) -> str:
        return f"drain {action.node or '-'} with reason {reason(action, st)!r}"
