"""How the simulated fleet is observed: each exporter's sampling interval, jitter, missed scrapes, downsampling.

The engine computes the hardware's state every ``resolution`` step; a real fleet does not see every step.
Prometheus scrapes each exporter of each node on its own interval (10 s to 5 min), at a phase of its own,
a scrape now and then is lost, and long-term storage may hold only 5-minute downsamples on the clock's grid.
A scenario's ``sampling`` section says so per source (``dcgm``: the accelerator exporters, ``node``:
node_exporter's ports)::

    sampling:
      dcgm: {interval: 15s, jitter: 2s, missed: 0.01}
      node: {interval: 5m, aligned: true}          # downsampled storage: on the 5-minute grid, no jitter

A node's scrape ``k`` reads the step it falls in; it is stamped with the step's time plus the jitter (at most
0.45 of a step either way, so samples keep their order) and lost with probability ``missed``. Every choice is a
pure function of the scenario's seed, the source, the node and the step (a counter-based hash), so every writer
of a trace (OpenMetrics, Parquet, the closed loop's batches) sees the same samples without sharing state, and
the engine's own random stream is untouched: a scenario without ``sampling`` is sampled at every step, exactly
as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lab.sim.faults import TemplateError, parse_duration

SOURCES = ("dcgm", "node")
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True)
class SourceSampling:
    """One exporter's sampling: interval (a multiple of the resolution), jitter (s), loss, grid alignment."""

    interval: float
    jitter: float = 0.0
    missed: float = 0.0
    aligned: bool = False

    @classmethod
    def from_dict(cls, d: dict, where: str) -> SourceSampling:
        known = {"interval", "jitter", "missed", "aligned"}
        for key in d:
            if key not in known:
                raise TemplateError(f"{where}: unknown key '{key}' (known: {', '.join(sorted(known))})")
        if "interval" not in d:
            raise TemplateError(f"{where}: needs an interval")
        missed = float(d.get("missed", 0.0))
        if not 0.0 <= missed < 1.0:
            raise TemplateError(f"{where}.missed: a probability below 1")
        return cls(parse_duration(d["interval"], f"{where}.interval"),
                   parse_duration(d.get("jitter", 0), f"{where}.jitter"), missed, bool(d.get("aligned", False)))

    def as_dict(self) -> dict:
        return {"interval": f"{self.interval:g}s", "jitter": f"{self.jitter:g}s", "missed": self.missed,
                "aligned": self.aligned}


def parse_sampling(d: dict | None, resolution: float, where: str) -> dict[str, SourceSampling]:
    """A scenario's ``sampling`` section, checked against its resolution."""
    out: dict[str, SourceSampling] = {}
    for source, spec in (d or {}).items():
        if source not in SOURCES:
            raise TemplateError(f"{where}: unknown source '{source}' (known: {', '.join(SOURCES)})")
        if not isinstance(spec, dict):
            raise TemplateError(f"{where}.{source}: a mapping of interval, jitter, missed, aligned")
        s = SourceSampling.from_dict(spec, f"{where}.{source}")
        steps = s.interval / resolution
        if s.interval < resolution or abs(steps - round(steps)) > 1e-9:
            raise TemplateError(f"{where}.{source}.interval: {s.interval:g} s is not a multiple of the "
                                f"resolution ({resolution:g} s)")
        out[source] = s
    return out


def sampling_from_text(text: str, resolution: float) -> dict[str, SourceSampling]:
    """A command line's sampling, ``dcgm=15s,node=5m`` (``all=`` for both; ``:aligned`` for downsampled storage,
    ``:jitter=2s``, ``:missed=0.01``), checked against the resolution."""
    spec: dict[str, dict] = {}
    for part in filter(None, text.split(",")):
        source, sep, rest = part.partition("=")
        if not sep:
            raise TemplateError(f"--sampling: {part!r} is not SOURCE=INTERVAL (dcgm, node or all)")
        interval, *options = rest.split(":")
        d: dict = {"interval": interval}
        for option in options:
            key, _, value = option.partition("=")
            d[key] = True if key == "aligned" and not value else value
        for name in (SOURCES if source == "all" else (source,)):
            spec[name] = dict(d)
    return parse_sampling(spec, resolution, "--sampling")


def _hash(*parts: np.ndarray | int) -> np.ndarray:
    """A uniform draw in [0, 1) per element, from integers (SplitMix64 over their mix)."""
    with np.errstate(over="ignore"):
        x = np.uint64(0x9E3779B97F4A7C15)
        for k, p in enumerate(parts):
            x = (x ^ (np.asarray(p).astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9 + 2 * k + 1))) & _MASK
            x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
            x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
            x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
            x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


class Observation:
    """Which steps each node's exporters are sampled at, and the stamps of those samples."""

    def __init__(self, seed: int, start: float, resolution: float, sampling: dict[str, SourceSampling]):
        self.seed = seed
        self.start = start
        self.resolution = resolution
        self.sampling = sampling
        self._phases: dict[tuple, np.ndarray] = {}  # (source, cycle, nodes) -> each node's phase, drawn once

    def __bool__(self) -> bool:
        return bool(self.sampling)

    def steps_of(self, ts: np.ndarray) -> np.ndarray:
        """Global step numbers of step times (``ts = start + resolution * (step + 1)``)."""
        return np.rint((np.asarray(ts) - self.start) / self.resolution).astype(np.int64) - 1

    def sampled(self, source: str, nodes: np.ndarray, ts: np.ndarray) -> np.ndarray | None:
        """``[nodes x steps]``: whether each node's exporter is sampled at each step (None: at every step)."""
        s = self.sampling.get(source)
        if s is None:
            return None
        m = int(round(s.interval / self.resolution))
        steps = self.steps_of(ts)[None, :]
        nodes = np.asarray(nodes, dtype=np.int64)[:, None]
        src = SOURCES.index(source) + 1
        if s.aligned:  # downsampled storage: the clock's grid, the same for every node
            on = np.isclose(np.mod(np.asarray(ts, dtype=float), s.interval), 0.0)[None, :] & np.ones_like(nodes,
                                                                                                        dtype=bool)
        else:
            on = (steps - self._phase(src, nodes, m)) % m == 0
        if s.missed > 0:
            on = on & (_hash(self.seed, src + 10, nodes, steps) >= s.missed)
        return on

    def _phase(self, src: int, nodes: np.ndarray, m: int) -> np.ndarray:
        """Each node's step of the exporter's cycle of ``m`` steps (drawn once: the same every chunk)."""
        key = (src, m, nodes.tobytes())
        if key not in self._phases:
            self._phases[key] = np.floor(_hash(self.seed, src, nodes) * m).astype(np.int64)
        return self._phases[key]

    def stamps(self, source: str, nodes: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """``[nodes x steps]`` sample times: the step's time plus the source's jitter (NaN is never returned)."""
        s = self.sampling.get(source)
        base = np.broadcast_to(np.asarray(ts, dtype=float)[None, :], (len(nodes), len(ts)))
        if s is None or s.jitter <= 0 or s.aligned:
            return base
        jitter = min(s.jitter, 0.45 * self.resolution)
        u = _hash(self.seed, SOURCES.index(source) + 20, np.asarray(nodes, dtype=np.int64)[:, None],
                  self.steps_of(ts)[None, :])
        return base + np.round((2.0 * u - 1.0) * jitter, 3)
