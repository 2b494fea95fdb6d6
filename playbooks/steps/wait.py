"""``wait``: let ``duration`` pass since the step started."""

from __future__ import annotations

from playbooks.params import duration
from playbooks.steps.handler import StepHandler


class Wait(StepHandler):
    name = "wait"
    keys = frozenset({"duration"})
    needs_node = False
    held_by_breaker = False
    dry_run = False

    def parse(self, raw, where):
        raw["duration"] = duration(raw.get("duration", 60), f"{where}.duration")
        return raw

    def execute(self, ctx, action, st, state) -> str:
        return "done" if ctx.clock() - (st.started_at or 0) >= st.params["duration"] else "waiting"
