"""Playbooks as data: the built-ins load, matching, and errors that name the file and the key."""

from __future__ import annotations

import pytest

from playbooks.model import PlaybookError, load, parse


def test_builtins_load_in_priority_order():
    names = [p.name for p in load()]
    assert names[:3] == ["rack-or-cooling", "telemetry-gone", "failed-node"]
    assert {"subhealthy-node-with-jobs", "subhealthy-node-idle", "subhealthy-link", "recovered-node"} <= set(names)
    steps = {p.name: [s.type for s in p.steps] for p in load()}
    assert steps["subhealthy-node-with-jobs"] == ["notify", "checkpoint", "wait_checkpoint", "drain", "requeue"]
    assert steps["failed-node"] == ["notify", "drain", "requeue"]
    assert "drain" not in steps["rack-or-cooling"]  # no node drains for a cooling problem


def first(kind, state, category, has_jobs, rack="r01", labels=None):
    return next(p.name for p in load() if p.matches(kind, state, category, rack, labels or {}, has_jobs))


def test_matching_picks_the_playbook_an_operator_expects():
    assert first("accelerator", "subhealthy", "gpu_memory", True) == "subhealthy-node-with-jobs"
    assert first("node", "subhealthy", "gpu_thermal", False) == "subhealthy-node-idle"
    assert first("accelerator", "failed", "gpu_bus", True) == "failed-node"
    assert first("rack", "subhealthy", "cooling", True) == "rack-or-cooling"
    assert first("node", "unknown", "telemetry", True) == "telemetry-gone"
    assert first("port", "subhealthy", "fabric_link", True) == "subhealthy-link"


def test_operator_playbook_replaces_a_builtin_and_adds_its_own(tmp_path):
    (tmp_path / "ours.yaml").write_text("""
name: failed-node
priority: 10
match: {states: [failed], labels: {vendor: nvidia}}
guards: {mode: dry-run, approval: true}
steps:
  - {step: exec, argv: ["/usr/local/bin/ticket", "--node", "{node}", "--incident", "{incident}"]}
  - {step: drain}
---
name: ticket-thermal
match: {categories: [gpu_thermal]}
steps: [{step: notify}]
""")
    pbs = {p.name: p for p in load([tmp_path])}
    assert pbs["failed-node"].guards.mode == "dry-run" and pbs["failed-node"].guards.approval
    assert pbs["failed-node"].steps[0].params["argv"][2] == "{node}"
    assert "ticket-thermal" in pbs
    assert pbs["failed-node"].matches("node", "failed", "gpu_bus", None, {"vendor": "nvidia"}, True)
    assert not pbs["failed-node"].matches("node", "failed", "gpu_bus", None, {"vendor": "amd"}, True)


@pytest.mark.parametrize("doc,message", [
    ({"name": "x", "steps": [{"step": "reboot"}]}, "x.steps[0].step: 'reboot' is not a step"),
    ({"name": "x", "steps": [{"step": "exec", "argv": "rm -rf {node}"}]}, "x.steps[0].argv: an argument list"),
    ({"name": "x", "steps": [{"step": "drain", "reason": "{nod}"}]}, "x.steps[0].reason: unknown placeholder {nod}"),
    ({"name": "x", "steps": [{"step": "wait_checkpoint", "confirm": "marker"}]}, "x.steps[0].marker: required"),
    ({"name": "x", "steps": [{"step": "notify", "timeout": "soon"}]}, "x.steps[0].timeout: not a duration"),
    ({"name": "x", "match": {"states": ["sick"]}, "steps": [{"step": "notify"}]}, "x.match.states: unknown sick"),
    ({"name": "x", "guards": {"mode": "yolo"}, "steps": [{"step": "notify"}]}, "x.guards.mode: one of"),
    ({"name": "x", "steps": [{"step": "notify", "colour": "red"}]}, "unknown key(s) colour for step notify"),
    ({"name": "x", "steps": []}, "x.steps: a non-empty list"),
    ({"name": "Bad Name", "steps": [{"step": "notify"}]}, "name: lower-case"),
])
def test_errors_name_the_file_and_key(doc, message):
    with pytest.raises(PlaybookError) as exc:
        parse(doc, "ops/x.yaml")
    assert str(exc.value).startswith("ops/x.yaml") and message in str(exc.value)


def test_broken_yaml_names_the_file(tmp_path):
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    with pytest.raises(PlaybookError, match="bad.yaml"):
        load([tmp_path])
