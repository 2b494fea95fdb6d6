"""The step registry: one handler per step type, whose keys the playbook model validates against."""

import pytest

from playbooks.model import PlaybookError, parse
from playbooks.steps import STEPS
from playbooks.steps.handler import StepHandler


def test_every_step_type_is_one_registered_handler():
    assert list(STEPS) == ["notify", "checkpoint", "wait_checkpoint", "drain", "requeue", "resume", "exec", "wait"]
    for name, handler in STEPS.items():
        assert isinstance(handler, StepHandler) and handler.name == name
        assert isinstance(handler.keys, frozenset) and not handler.keys & {"step", "timeout", "retries"}
        assert type(handler).__module__ == f"playbooks.steps.{name}"  # a module each, named for it


def test_what_a_step_may_do_under_the_breaker_and_in_dry_run():
    # telling and waiting go on while the breaker is open; everything that touches the scheduler is held
    assert {n for n, h in STEPS.items() if not h.held_by_breaker} == {"notify", "wait", "wait_checkpoint"}
    assert {n for n, h in STEPS.items() if not h.dry_run} == {"notify", "wait"}
    assert {n for n, h in STEPS.items() if h.changes_cluster} == {"drain", "requeue", "resume"}
    assert {n for n, h in STEPS.items() if not h.needs_node} == {"notify", "wait", "exec"}


def test_the_model_reads_a_steps_keys_and_defaults_from_its_handler():
    pb = parse({"name": "p", "steps": [{"step": "drain"}, {"step": "resume", "health_check": ["/bin/true"]},
                                       {"step": "checkpoint"}, {"step": "wait", "duration": "2m"}]})
    assert [s.params for s in pb.steps] == [{"reason": "{incident} {category}"},
                                             {"health_check": ["/bin/true"], "clean_for": 1800.0},
                                             {"signal": "USR1"}, {"duration": 120.0}]
    with pytest.raises(PlaybookError, match=r"unknown key\(s\) signal for step drain"):
        parse({"name": "p", "steps": [{"step": "drain", "signal": "USR1"}]})
    with pytest.raises(PlaybookError, match=r"'reboot' is not a step \(one of notify, checkpoint, wait_checkpoint"):
        parse({"name": "p", "steps": [{"step": "reboot"}]})
