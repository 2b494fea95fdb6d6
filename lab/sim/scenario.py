"""Scenarios (``fixtures/scenarios/*.yaml``): what to simulate, reproducibly from a seed.

::

    name: dense-01
    seed: 1
    topology: {preset: scalex640, accelerators: 640}
    start: "2026-03-02T00:00:00Z"
    duration: 12h
    resolution: 15s
    profile: full                 # stock: dcgm-exporter's default counters (no ECC); full: ECC, throttling, NVLink
    jobs: {nodes_per_job: [4, 16], duration: [2h, 10h], gap: [5m, 30m], partial_share: 0.05}
    faults:                       # listed: times relative to start; entity 'random' picks one of the target kind
      - {entity: sn01-b07/gpu3, fault: hbm_degradation, template: a, onset: 2h, failure: 6h}
      - {entity: random, fault: benign_coolant_swing, template: b, onset: 3h}
      - {entity: random, vendor: ascend, fault: gpu_off_bus, onset: 1h}   # among one vendor's (mixed presets)
    sample:                       # optional: arrivals drawn from fleet statistics (docs/fleet-stats.md)
      faults_per_node_year: 0.78
      weibull_shape: 0.62
      repeat_share: 0.836
      mix: {hbm_degradation: 0.4, gpu_off_bus: 0.15, link_degradation: 0.25, ...}
      confounders_per_day: {benign_reboot: 1, benign_exporter_gap: 2}
    sampling:                     # optional: how the exporters are sampled (lab/sim/observe.py); default every step
      dcgm: {interval: 15s, jitter: 2s, missed: 0.01}
      node: {interval: 5m, aligned: true}
    noise: realistic              # optional: healthy parts' background errors (lab/sim/noise.py); default quiet
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lab.sim.faults import TemplateError, parse_duration
from lab.sim.noise import QUIET, CounterNoise, parse_noise
from lab.sim.observe import SourceSampling, parse_sampling

PROFILES = ("stock", "full")


@dataclass
class JobMix:
    nodes_per_job: tuple[int, int] = (4, 16)
    duration: tuple[float, float] = (2 * 3600.0, 10 * 3600.0)
    gap: tuple[float, float] = (300.0, 1800.0)
    partial_share: float = 0.05


@dataclass
class FaultSpec:
    entity: str
    fault: str
    template: str | None
    onset: float  # seconds from start
    failure: float | None  # seconds from start, or None to draw from the template window
    vendor: str | None = None  # with entity 'random': pick among this vendor's accelerators, ports or nodes


@dataclass
class SampleSpec:
    faults_per_node_year: float = 0.78
    weibull_shape: float = 0.62
    repeat_share: float = 0.836
    mix: dict[str, float] = field(default_factory=dict)
    confounders_per_day: dict[str, float] = field(default_factory=dict)
    # The share of hard faults that give no warning: each fails a minute after its first symptom (the same faults,
    # times and entities as without; a scenario where detection is deliberately worse)
    sudden_share: float = 0.0


@dataclass
class Scenario:
    name: str
    seed: int
    preset: str = "scalex640"
    accelerators: int = 640
    start: float = 1772409600.0
    duration: float = 12 * 3600.0
    resolution: float = 15.0
    profile: str = "full"
    jobs: JobMix = field(default_factory=JobMix)
    faults: list[FaultSpec] = field(default_factory=list)
    sample: SampleSpec | None = None
    sampling: dict[str, SourceSampling] = field(default_factory=dict)
    noise_name: str = "quiet"
    noise: dict[str, CounterNoise] = field(default_factory=lambda: dict(QUIET))
    source: str = ""

    @property
    def steps(self) -> int:
        return int(self.duration // self.resolution)

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        path = Path(path)
        try:
            d = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise TemplateError(f"{path}: not valid YAML: {exc}") from exc
        return cls.from_dict(d, str(path))

    @classmethod
    def from_dict(cls, d: dict, source: str = "scenario") -> Scenario:
        if not isinstance(d, dict):
            raise TemplateError(f"{source}: the top level must be a mapping")
        known = {"name", "seed", "topology", "start", "duration", "resolution", "profile", "jobs", "faults",
                 "sample", "sampling", "noise", "description"}
        for key in d:
            if key not in known:
                raise TemplateError(f"{source}: unknown key '{key}' (known: {', '.join(sorted(known))})")
        topo = d.get("topology") or {}
        sc = cls(name=str(d.get("name") or Path(source).stem), seed=int(d.get("seed", 0)),
                 preset=str(topo.get("preset", "scalex640")), accelerators=int(topo.get("accelerators", 640)),
                 source=source)
        if "start" in d:
            start = d["start"]
            if isinstance(start, (int, float)):
                sc.start = float(start)
            else:
                stamp = start if isinstance(start, dt.datetime) else dt.datetime.fromisoformat(
                    str(start).replace("Z", "+00:00"))
                if stamp.tzinfo is None:
                    stamp = stamp.replace(tzinfo=dt.UTC)
                sc.start = stamp.timestamp()
        sc.duration = parse_duration(d.get("duration", "12h"), f"{source}: duration")
        sc.resolution = parse_duration(d.get("resolution", "15s"), f"{source}: resolution")
        sc.profile = str(d.get("profile", "full"))
        if sc.profile not in PROFILES:
            raise TemplateError(f"{source}: profile must be one of {PROFILES}")
        jobs = d.get("jobs") or {}
        sc.jobs = JobMix(
            tuple(int(x) for x in jobs.get("nodes_per_job", (4, 16))),
            tuple(parse_duration(x, f"{source}: jobs.duration") for x in jobs.get("duration", ("2h", "10h"))),
            tuple(parse_duration(x, f"{source}: jobs.gap") for x in jobs.get("gap", ("5m", "30m"))),
            float(jobs.get("partial_share", 0.05)),
        )
        for i, f in enumerate(d.get("faults") or []):
            where = f"{source}: faults[{i}]"
            if not isinstance(f, dict) or "fault" not in f or "onset" not in f:
                raise TemplateError(f"{where}: needs 'fault' and 'onset'")
            sc.faults.append(FaultSpec(
                str(f.get("entity", "random")), str(f["fault"]),
                None if f.get("template") is None else str(f["template"]),
                parse_duration(f["onset"], f"{where}.onset"),
                None if f.get("failure") is None else parse_duration(f["failure"], f"{where}.failure"),
                None if f.get("vendor") is None else str(f["vendor"]),
            ))
        sc.sampling = parse_sampling(d.get("sampling"), sc.resolution, f"{source}: sampling")
        sc.noise_name, sc.noise = parse_noise(d.get("noise"), f"{source}: noise")
        if d.get("sample"):
            s = d["sample"]
            sc.sample = SampleSpec(float(s.get("faults_per_node_year", 0.78)), float(s.get("weibull_shape", 0.62)),
                                   float(s.get("repeat_share", 0.836)), dict(s.get("mix") or {}),
                                   dict(s.get("confounders_per_day") or {}), float(s.get("sudden_share", 0.0)))
            if not 0.0 <= sc.sample.sudden_share <= 1.0:
                raise TemplateError(f"{source}: sample.sudden_share: a share from 0 to 1")
        return sc
