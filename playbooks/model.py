"""Playbooks as data (YAML): which incidents they match, their ordered steps, and their guards.

A playbook file::

    name: subhealthy-node-with-jobs
    description: checkpoint the jobs, then drain and requeue them
    priority: 100                  # lower is tried first; the first matching playbook runs
    match:
      kinds: [node, accelerator]   # the incident's entity kind
      states: [subhealthy]         # the incident's state
      categories: [gpu_memory, gpu_bus]
      racks: []                    # empty: any
      labels: {vendor: nvidia}     # entity attributes, all must match
      jobs: running                # running | none | any: the node's jobs at planning time
    guards:
      mode: act                    # act | dry-run (decide, log, do nothing) | shadow (record only)
      approval: false              # true: each action waits for 'raswarden approve'
      rate_limit: {max: 10, per: 1h}
    steps:
      - {step: notify}
      - {step: checkpoint, signal: USR1}
      - {step: wait_checkpoint, confirm: marker, marker: "/shared/ckpt/{job}.done", timeout: 15m}
      - {step: drain, reason: "{incident} {category}"}
      - {step: requeue}

Steps: ``notify``, ``checkpoint`` (signal the node's opted-in jobs), ``wait_checkpoint`` (until each job
confirms through a marker file, its job comment, or a configured command, or the timeout), ``drain``,
``requeue``, ``resume`` (after its health check), ``exec`` (an argument list template, never a shell),
``wait``. Every step takes ``timeout`` and ``retries``. Errors name the file and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from playbooks.params import PlaybookError, duration
from playbooks.steps import STEPS

COMMON_STEP_KEYS = {"step", "timeout", "retries"}
MODES = ("act", "dry-run", "shadow")
KINDS = ("accelerator", "node", "port", "rack", "cooling", "supernode")
STATES = ("suspect", "subhealthy", "failed", "unknown", "healthy")
CATEGORIES = ("gpu_memory", "gpu_bus", "gpu_thermal", "gpu_compute", "scaleup_link", "fabric_link", "host",
              "cooling", "telemetry", "application")
@dataclass(frozen=True)
class Step:
    type: str
    params: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 60.0
    retries: int = 2


@dataclass(frozen=True)
class Match:
    kinds: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    racks: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    jobs: str = "any"  # running | none | any


@dataclass(frozen=True)
class PlaybookGuards:
    """A playbook's own guards (its YAML ``guards:``): its mode, approval and rate limit; the global ones are
    :class:`playbooks.guards.Guards`."""

    mode: str = "act"
    approval: bool = False
    rate_max: int = 20
    rate_per_s: float = 3600.0


@dataclass(frozen=True)
class Playbook:
    name: str
    steps: tuple[Step, ...]
    match: Match = Match()
    guards: PlaybookGuards = PlaybookGuards()
    priority: int = 100
    description: str = ""
    source: str = ""

    def matches(self, kind: str, state: str, category: str, rack: str | None, labels: dict[str, str],
                has_jobs: bool) -> bool:
        m = self.match
        if m.kinds and kind not in m.kinds:
            return False
        if m.states and state not in m.states:
            return False
        if m.categories and category not in m.categories:
            return False
        if m.racks and rack not in m.racks:
            return False
        if any(labels.get(k) != v for k, v in m.labels):
            return False
        return m.jobs == "any" or (m.jobs == "running") == has_jobs


def _list(raw: dict, key: str, where: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    value = raw.pop(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PlaybookError(f"{where}.{key}: expected a list of strings")
    if allowed:
        bad = [v for v in value if v not in allowed]
        if bad:
            raise PlaybookError(f"{where}.{key}: unknown {', '.join(bad)} (one of {', '.join(allowed)})")
    return tuple(value)


def _no_more(raw: dict, where: str) -> None:
    if raw:
        raise PlaybookError(f"{where}: unknown key(s) {', '.join(sorted(map(str, raw)))}")


def parse_step(raw: Any, where: str) -> Step:
    if not isinstance(raw, dict):
        raise PlaybookError(f"{where}: expected a mapping with a 'step' key")
    raw = dict(raw)
    kind = raw.get("step")
    if kind not in STEPS:
        raise PlaybookError(f"{where}.step: {kind!r} is not a step (one of {', '.join(STEPS)})")
    unknown = set(raw) - COMMON_STEP_KEYS - STEPS[kind].keys
    if unknown:
        raise PlaybookError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} for step {kind}")
    timeout = duration(raw.pop("timeout", 60), f"{where}.timeout")
    retries = raw.pop("retries", 2)
    if not isinstance(retries, int) or isinstance(retries, bool) or not 0 <= retries <= 20:
        raise PlaybookError(f"{where}.retries: an integer from 0 to 20")
    raw.pop("step")
    raw = STEPS[kind].parse(raw, where)
    return Step(kind, raw, timeout, retries)


def parse(raw: Any, source: str = "<playbook>") -> Playbook:
    """A validated Playbook from parsed YAML."""
    if not isinstance(raw, dict):
        raise PlaybookError(f"{source}: expected a mapping")
    raw = dict(raw)
    name = raw.pop("name", None)
    if not isinstance(name, str) or not re.match(r"^[a-z0-9][a-z0-9_.-]*$", name):
        raise PlaybookError(f"{source}: name: lower-case letters, digits, '-', '_' or '.'")
    where = f"{source}: {name}"
    steps_raw = raw.pop("steps", None)
    if not isinstance(steps_raw, list) or not steps_raw:
        raise PlaybookError(f"{where}.steps: a non-empty list")
    steps = tuple(parse_step(s, f"{where}.steps[{i}]") for i, s in enumerate(steps_raw))
    m = dict(raw.pop("match", {}) or {})
    labels = m.pop("labels", {}) or {}
    if not isinstance(labels, dict):
        raise PlaybookError(f"{where}.match.labels: a mapping")
    jobs = m.pop("jobs", "any")
    if jobs not in ("any", "running", "none"):
        raise PlaybookError(f"{where}.match.jobs: one of any, running, none")
    match = Match(_list(m, "kinds", f"{where}.match", KINDS), _list(m, "states", f"{where}.match", STATES),
                  _list(m, "categories", f"{where}.match", CATEGORIES), _list(m, "racks", f"{where}.match"),
                  tuple(sorted((str(k), str(v)) for k, v in labels.items())), jobs)
    _no_more(m, f"{where}.match")
    g = dict(raw.pop("guards", {}) or {})
    mode = g.pop("mode", "act")
    if mode not in MODES:
        raise PlaybookError(f"{where}.guards.mode: one of {', '.join(MODES)}")
    approval = g.pop("approval", False)
    if not isinstance(approval, bool):
        raise PlaybookError(f"{where}.guards.approval: true or false")
    rate = dict(g.pop("rate_limit", {}) or {})
    rate_max = rate.pop("max", 20)
    if not isinstance(rate_max, int) or rate_max < 1:
        raise PlaybookError(f"{where}.guards.rate_limit.max: a positive integer")
    rate_per = duration(rate.pop("per", "1h"), f"{where}.guards.rate_limit.per")
    _no_more(rate, f"{where}.guards.rate_limit")
    _no_more(g, f"{where}.guards")
    priority = raw.pop("priority", 100)
    if not isinstance(priority, int):
        raise PlaybookError(f"{where}.priority: an integer")
    description = str(raw.pop("description", ""))
    _no_more(raw, where)
    return Playbook(name, steps, match, PlaybookGuards(mode, approval, rate_max, rate_per), priority, description,
                    source)


BUILTIN_DIR = Path(__file__).with_name("builtin")


def load(dirs: list[str | Path] | None = None, builtin: bool = True) -> list[Playbook]:
    """Built-in playbooks, then the operator's (``*.yaml`` in ``dirs``; one with a built-in's name replaces
    it), sorted by priority. PlaybookError names the file and key of the first problem."""
    by_name: dict[str, Playbook] = {}
    paths = sorted(BUILTIN_DIR.glob("*.yaml")) if builtin else []
    for d in dirs or []:
        paths += sorted(Path(d).glob("*.yaml"))
    for path in paths:
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except yaml.YAMLError as exc:
            raise PlaybookError(f"{path}: {exc}") from None
        except OSError as exc:
            raise PlaybookError(f"{path}: {exc.strerror or exc}") from None
        for doc in docs:
            pb = parse(doc, str(path))
            if pb.name in by_name and by_name[pb.name].source.startswith(str(path)):
                raise PlaybookError(f"{path}: {pb.name}: defined twice")
            by_name[pb.name] = pb
    return sorted(by_name.values(), key=lambda p: (p.priority, p.name))
