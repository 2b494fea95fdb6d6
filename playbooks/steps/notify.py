"""``notify``: tell the operators (the alert pipeline sends the action with its steps)."""

from __future__ import annotations

from playbooks.steps.handler import StepHandler


class Notify(StepHandler):
    name = "notify"
    needs_node = False
    held_by_breaker = False
    dry_run = False

    def execute(self, ctx, action, st, state) -> str:
        return "done"  # the alert pipeline tells the operators, with this action's steps
