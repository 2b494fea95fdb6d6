"""Fault templates (``fixtures/faults/*.yaml``) and their instances on chosen entities.

A template describes one fault class's course from first symptom (normalized time 0, the ``onset``) to
failure (time 1), as telemetry effects and kernel-log events::

    class: hbm_degradation          # benign_* for confounders, which must not be flagged
    template: a
    target: accelerator             # accelerator | port | node | rack
    window: [2h, 6h]                # onset-to-failure (or confounder duration) when sampled
    fails: true                     # false: degraded, never failed (label failure: null)
    effects:
      - {metric: ecc_sbe_total, rate_per_h: [1, 300], curve: exp, from: 0.0, to: 1.0}
      - {metric: ecc_dbe_total, step: 1, at: 1.0}
      - {metric: gpu_temp_c, offset: [0, 12], from: 0.2, to: 1.0}
      - {metric: port_state, set: 1, from: 1.0}
      - {metric: sm_clock_mhz, scale: [1.0, 0.7], from: 0.0, to: 1.0}
      - {vanish: dcgm, from: 1.0}             # the entity's series stop (dcgm | node | all)
      - {reset_counters: true, at: 1.0}       # counters restart at zero (a reboot)
    events:
      - {at: 0.6, line: "NVRM: Xid (PCI:{pci_xid}): 63, pid='<unknown>', name=<unknown>, Row Remapper: ..."}
      - {every_min: [20, 2], from: 0.1, to: 1.0, line: "nvidia {pci}: AER: PCIe Bus Error: severity=Corrected, ..."}

``from``/``to``/``at`` are normalized times; ``every_min`` interpolates the interval between events.
An effect applies between ``from`` and ``to``; one that reaches the failure (``to`` >= 1) holds its end
value afterwards, until the instance ends (``until``, default the trace end).
An instance stretches the template to its own onset and failure and jitters the effect times and
rates (seeded), so no two instances of a template are identical.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from playbooks.duration import parse_duration as _parse_duration

TARGETS = ("accelerator", "port", "node", "rack")


class TemplateError(ValueError):
    """A fault template or scenario is malformed; the message names the file and the key."""


def parse_duration(value, where: str) -> float:
    """``90``, ``"15m"``, ``"2h"``, ``"2h30m"``, ``"1.5d"`` to seconds (TemplateError naming ``where``)."""
    try:
        return _parse_duration(value, where)
    except ValueError as exc:
        raise TemplateError(str(exc)) from None


@dataclass(frozen=True)
class Effect:
    """One telemetry effect of a template (see the module docstring)."""

    kind: str  # rate | step | offset | set | scale | vanish | reset
    metric: str | None
    start: float
    end: float
    a: float = 0.0
    b: float = 0.0
    curve: str = "lin"
    exporter: str = "all"

    def level(self, x: np.ndarray) -> np.ndarray:
        """The effect's magnitude at normalized times ``x``; NaN where it does not apply.

        An effect applies on [``start``, ``end``); one that reaches the failure (``end >= 1``) holds its
        end value afterwards, so segments of a multi-step course never add up.
        """
        span = max(self.end - self.start, 1e-9)
        f = np.clip((x - self.start) / span, 0.0, 1.0)
        if self.curve == "exp" and self.a > 0 and self.b > 0:
            out = self.a * (self.b / self.a) ** f
        else:
            out = self.a + (self.b - self.a) * f
        inside = x >= self.start
        if self.end < 1.0:
            inside &= x < self.end
        return np.where(inside, out, np.nan)


@dataclass(frozen=True)
class EventSpec:
    """A kernel line at a normalized time, or repeated with an interpolated interval."""

    line: str
    at: float | None = None
    every_min: tuple[float, float] | None = None
    start: float = 0.0
    end: float = 1.0


@dataclass(frozen=True)
class FaultTemplate:
    """A fault class's course, loaded from YAML."""

    fault: str
    template: str
    target: str
    window: tuple[float, float]
    fails: bool
    effects: tuple[Effect, ...]
    events: tuple[EventSpec, ...]
    source: str = ""

    @property
    def benign(self) -> bool:
        return self.fault.startswith("benign_")

    @property
    def name(self) -> str:
        return f"{self.fault}/{self.template}"


def _effect(d: dict, where: str) -> Effect:
    if not isinstance(d, dict):
        raise TemplateError(f"{where}: an effect must be a mapping")
    start = float(d.get("from", d.get("at", 0.0)))
    end = float(d.get("to", start))
    if "vanish" in d:
        return Effect("vanish", None, start, float(d.get("to", 1e9)), exporter=str(d["vanish"]))
    if "reset_counters" in d:
        return Effect("reset", None, start, start)
    metric = d.get("metric")
    if not metric:
        raise TemplateError(f"{where}: needs 'metric'")
    curve = str(d.get("curve", "lin"))
    for kind in ("rate_per_h", "offset", "scale"):
        if kind in d:
            pair = d[kind]
            if not (isinstance(pair, list) and len(pair) == 2):
                raise TemplateError(f"{where}.{kind}: give [start, end]")
            return Effect({"rate_per_h": "rate"}.get(kind, kind), metric, start, end, float(pair[0]),
                          float(pair[1]), curve)
    if "step" in d:  # a one-off increase at ``at``; it stays counted afterwards
        return Effect("step", metric, start, 1e9, float(d["step"]), float(d["step"]))
    if "set" in d:
        return Effect("set", metric, start, float(d.get("to", 1e9)), float(d["set"]), float(d["set"]))
    raise TemplateError(f"{where}: no effect kind (rate_per_h, step, offset, set, scale, vanish, reset_counters)")


def load_template(path: Path) -> FaultTemplate:
    """Read and validate one template file."""
    try:
        d = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise TemplateError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(d, dict):
        raise TemplateError(f"{path}: the top level must be a mapping")
    for key in ("class", "template", "target", "window"):
        if key not in d:
            raise TemplateError(f"{path}: missing '{key}'")
    if d["target"] not in TARGETS:
        raise TemplateError(f"{path}: target must be one of {TARGETS}")
    window = d["window"]
    if not (isinstance(window, list) and len(window) == 2):
        raise TemplateError(f"{path}: window: give [min, max]")
    effects = tuple(_effect(e, f"{path}: effects[{i}]") for i, e in enumerate(d.get("effects") or []))
    events = []
    for i, e in enumerate(d.get("events") or []):
        where = f"{path}: events[{i}]"
        if not isinstance(e, dict) or "line" not in e:
            raise TemplateError(f"{where}: needs 'line'")
        if "every_min" in e:
            every = e["every_min"]
            events.append(EventSpec(str(e["line"]), None, (float(every[0]), float(every[1])),
                                    float(e.get("from", 0.0)), float(e.get("to", 1.0))))
        else:
            events.append(EventSpec(str(e["line"]), float(e.get("at", 1.0))))
    return FaultTemplate(
        str(d["class"]), str(d["template"]), d["target"],
        (parse_duration(window[0], f"{path}: window[0]"), parse_duration(window[1], f"{path}: window[1]")),
        bool(d.get("fails", not str(d["class"]).startswith("benign_"))), effects, tuple(events), str(path),
    )


def load_library(directory: Path) -> dict[str, FaultTemplate]:
    """Every template in a directory, keyed by ``class/template``."""
    out: dict[str, FaultTemplate] = {}
    for path in sorted(directory.glob("*.yaml")):
        t = load_template(path)
        if t.name in out:
            raise TemplateError(f"{path}: template {t.name} is defined twice")
        out[t.name] = t
    return out


@dataclass
class FaultInstance:
    """A template placed on an entity, stretched to [onset, failure] and jittered."""

    template: FaultTemplate
    entity: str
    onset: float
    failure: float  # time of normalized 1.0 (for a confounder: the end of its window)
    until: float | None = None  # effects stop here (default: trace end)
    rate_factor: float = 1.0
    shift: dict[int, float] = field(default_factory=dict)  # per-effect jitter of normalized times

    def norm(self, ts: np.ndarray) -> np.ndarray:
        """Normalized template time for absolute times."""
        return (ts - self.onset) / max(self.failure - self.onset, 1.0)

    def label(self) -> dict:
        """The ground-truth label (docs/architecture.md §8)."""
        return {"entity": self.entity, "kind": self.template.target, "fault": self.template.fault,
                "template": self.template.template, "onset": round(self.onset, 3),
                "failure": round(self.failure, 3) if (self.template.fails or self.template.benign) else None}

    @classmethod
    def place(cls, template: FaultTemplate, entity: str, onset: float, failure: float | None,
              rng: np.random.Generator, jitter: float = 0.05, until: float | None = None) -> FaultInstance:
        """Place a template; ``failure`` None draws the window from the template's range."""
        if failure is None:
            lo, hi = template.window
            failure = onset + float(rng.uniform(lo, hi))
        shift = {i: float(rng.normal(0.0, jitter)) for i in range(len(template.effects) + len(template.events))}
        for i, e in enumerate(template.effects):
            if e.start >= 1.0 or e.kind == "vanish" or e.start <= 0.0:
                # Never move the failure itself, nor what starts at the onset: the label's onset is the first
                # deviation (a confounder present from the start, such as a warm slot, would otherwise appear
                # as a step in mid-trace, which is what a real fault looks like).
                shift[i] = 0.0
            else:  # nor anything before the onset
                shift[i] = max(shift[i], -e.start)
        return cls(template, entity, onset, failure, until, float(rng.lognormal(0.0, 0.25)), shift)
