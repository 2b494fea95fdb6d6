"""The step types, one module each (see :mod:`playbooks.steps.handler` for what a step type is).

A new step: a :class:`~playbooks.steps.handler.StepHandler` subclass in a module of its own, added to
:data:`STEPS`. The playbook model validates a step's keys against it, and the engine runs it.
"""

from __future__ import annotations

from playbooks.steps.checkpoint import Checkpoint
from playbooks.steps.drain import Drain
from playbooks.steps.exec import Exec
from playbooks.steps.handler import StepHandler
from playbooks.steps.notify import Notify
from playbooks.steps.requeue import Requeue
from playbooks.steps.resume import Resume
from playbooks.steps.wait import Wait
from playbooks.steps.wait_checkpoint import WaitCheckpoint

STEPS: dict[str, StepHandler] = {h.name: h() for h in (Notify, Checkpoint, WaitCheckpoint, Drain, Requeue, Resume,
                                                       Exec, Wait)}
