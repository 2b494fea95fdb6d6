"""``exec``: run an argument list (a template; never a shell) and succeed on exit 0."""

from __future__ import annotations

import subprocess

from playbooks.params import argv, render
from playbooks.scheduler import SchedulerError
from playbooks.steps.handler import StepHandler, values


def run(command: list[str], st) -> str:
    """Run ``command`` within the step's timeout: ``done`` on exit 0, else a retryable SchedulerError."""
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=st.timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SchedulerError(f"exec {command[0]}: {exc}", retryable=True) from None
    st.detail["exit"] = proc.returncode
    if proc.returncode != 0:
        raise SchedulerError(f"exec {command[0]}: exit {proc.returncode}: {proc.stderr.strip()[-200:]}",
                             retryable=True)
    return "done"


class Exec(StepHandler):
    name = "exec"
    keys = frozenset({"argv"})
    needs_node = False

    def parse(self, raw, where):
        raw["argv"] = argv(raw.get("argv"), f"{where}.argv")
        return raw

    def execute(self, ctx, action, st, state) -> str:
        return run([render(a, values(action)) for a in st.params["argv"]], st)
