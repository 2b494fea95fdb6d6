"""The simulation engine: workload and physics over the topology, fault instances on top, in time chunks.

:meth:`Simulator.chunks` yields :class:`SimChunk` objects in time order; each holds, for a block of
steps, every GPU and port metric as an ``[entities × steps]`` array, which series are present (an
exporter that is down or a GPU that fell off the bus emits nothing), and the kernel lines written in
that time. Writers (:mod:`lab.sim.writer`) turn chunks into trace files, and :mod:`lab.sim.batches`
into pipeline batches. Memory is one chunk, whatever the duration.

Physics (calibrated to AcmeTrace: docs/fleet-stats.md): power = idle + utilisation × (per-GPU peak −
idle); GPU temperature = rack coolant inlet + per-GPU thermal resistance × power + noise (busy 55-70 °C,
idle 30-38 °C); HBM a few degrees above; counters grow at rare baseline rates (correctable ECC about one
per GPU-quarter, symbol errors one per port-week) and traffic counters with load.
"""

from __future__ import annotations

import math
import re
import uuid as uuidlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable, Iterator

import numpy as np

from lab.sim.arrivals import sample_instances
from lab.sim.faults import FaultInstance, FaultTemplate, TemplateError, load_library
from lab.sim.noise import AER_LINE, AER_LOGGED, HEALTHY_MAX_PER_H, PartNoise
from lab.sim.observe import Observation
from lab.sim.scenario import Scenario
from lab.sim.streams import StepStreams
from lab.sim.layout import PRESETS, SimTopology
from lab.sim.vendors import RESTART_BUSINESS, VENDORS, render_line
from daemon.topology import normalize_pci

GPU_GAUGES = ("gpu_temp_c", "hbm_temp_c", "power_w", "sm_clock_mhz", "mem_clock_mhz", "gpu_util_pct",
              "mem_copy_util_pct", "fb_used_mib", "fb_free_mib", "xid_last", "row_remap_failure", "throttle_thermal",
              "npu_error_code_0")
GPU_COUNTERS = ("energy_mj_total", "pcie_replay_total", "row_remap_correctable_total",
                "row_remap_uncorrectable_total", "ecc_sbe_total", "ecc_dbe_total", "nvlink_crc_flit_total")
PORT_GAUGES = ("port_state", "port_phys_state")
PORT_COUNTERS = ("symbol_error_total", "link_error_recovery_total", "link_downed_total", "rcv_errors_total",
                 "rcv_bytes_total", "xmit_bytes_total")
# What each exporter profile publishes (stock = dcgm-exporter's default-counters.csv).
FULL_ONLY = frozenset({"ecc_sbe_total", "ecc_dbe_total", "nvlink_crc_flit_total", "throttle_thermal"})
# Counters drawn for the vendors that publish them only: NVLink 5's successful link recoveries (GB200), from a
# fault's NVLink errors and a healthy link's rare own (Simulator._recoveries)
DERIVED_COUNTERS = ("nvlink_recovery_total",)
HEALTHY_RECOVERY_PER_H = 1e-4
"""A healthy GB200 GPU's NVLink recoveries an hour: about the bound 5,759 links counting none in five days puts on
eighteen links (lab/sim/vendors.py)."""
NVIDIA_NEVER = frozenset({"npu_error_code_0", *DERIVED_COUNTERS})  # engine arrays no H100 exporter publishes
# npu-exporter keeps reporting an NPU it can no longer read (its other values are failure values, dropped
# by the name table): its fault codes are what says it is gone.
STILL_REPORTED = frozenset({"npu_error_code_0"})
PORT_BYTES_PER_S = 45e9
LOAD_STEP_WINDOW_S = 600.0
FB_TOTAL_MIB = 81559.0


def emitted_metrics(profile: str) -> tuple[list[str], list[str]]:
    """GPU and port metrics a profile publishes."""
    gpu = [m for m in GPU_GAUGES + GPU_COUNTERS if (profile == "full" or m not in FULL_ONLY) and m not in NVIDIA_NEVER]
    return gpu, list(PORT_GAUGES + PORT_COUNTERS)


@dataclass
class SimChunk:
    """A block of steps: metric arrays, presence masks and kernel lines."""

    ts: np.ndarray
    gpu: dict[str, np.ndarray]
    port: dict[str, np.ndarray]
    gpu_present: np.ndarray
    port_present: np.ndarray
    lines: list[tuple[float, str, str]]  # (ts, node, kernel message)
    # Each GPU's compute speed against a healthy one (its SM clock scale: fail-slow, thermal throttling); a
    # synchronous job runs at the pace of its slowest GPU (the closed loop's accounting)
    gpu_speed: np.ndarray | None = None
    # Which steps each exporter is sampled at ([rows x steps], lab.sim.observe); None: every step
    gpu_sampled: np.ndarray | None = None
    port_sampled: np.ndarray | None = None

    def gpu_emitted(self) -> np.ndarray:
        """Present and sampled: the GPU samples an exporter's scrapes carry."""
        return self.gpu_present if self.gpu_sampled is None else self.gpu_present & self.gpu_sampled

    def port_emitted(self) -> np.ndarray:
        return self.port_present if self.port_sampled is None else self.port_present & self.port_sampled


@dataclass
class Job:
    nodes: np.ndarray
    start: float
    end: float
    partial: bool


@dataclass
class _Placed:
    """A fault instance with its rows resolved and its kernel lines laid out."""

    inst: FaultInstance
    gpu_rows: np.ndarray
    port_rows: np.ndarray
    rack_rows: np.ndarray
    lines: list[tuple[float, str, str]] = field(default_factory=list)
    codes: list[tuple[float, int, int, float]] = field(default_factory=list)  # Ascend: (ts, GPU row, code, until)


class _Effects:
    """What a chunk's faults and background do to the fleet, built up step by step: counter increases, gauge
    offsets, scales and set values, parts present, counter resets, the coolant."""

    def __init__(self, t, n_s: int, coolant: np.ndarray):
        self.coolant = coolant
        self.gauge_offsets: dict[str, np.ndarray] = defaultdict(lambda: np.zeros((t.n_gpus, n_s)))
        self.gauge_scale: dict[str, np.ndarray] = defaultdict(lambda: np.ones((t.n_gpus, n_s)))
        self.gauge_set: dict[str, np.ndarray] = {}
        self.port_set: dict[str, np.ndarray] = {}
        self.gpu_inc = {m: np.zeros((t.n_gpus, n_s)) for m in GPU_COUNTERS}
        self.port_inc = {m: np.zeros((t.n_ports, n_s)) for m in PORT_COUNTERS}
        self.gpu_present = np.ones((t.n_gpus, n_s), dtype=bool)
        self.port_present = np.ones((t.n_ports, n_s), dtype=bool)
        self.gpu_reset: list[tuple[np.ndarray, int]] = []
        self.port_reset: list[tuple[np.ndarray, int]] = []


class Simulator:
    """Deterministic for a scenario and seed: the same inputs give byte-identical output."""

    def __init__(self, scenario: Scenario, library: dict[str, FaultTemplate] | Path):
        self.scenario = scenario
        self.library = load_library(library) if isinstance(library, Path) else library
        self.batch_dtypes: dict[tuple[str, ...], tuple] = {}  # lab.sim.batches: dtypes and families per profile
        if scenario.preset not in PRESETS:
            raise TemplateError(f"{scenario.source}: unknown topology preset {scenario.preset!r}")
        self.topo: SimTopology = PRESETS[scenario.preset](scenario.accelerators)
        self.rng = np.random.default_rng(scenario.seed)
        t = self.topo
        g = self.rng
        self.gpu_ids = t.gpu_ids()
        self.port_ids = t.port_ids()
        self.gpu_index = {e: i for i, e in enumerate(self.gpu_ids)}
        self.port_index = {e: i for i, e in enumerate(self.port_ids)}
        self.node_index = {n: i for i, n in enumerate(t.nodes)}
        self.rack_index = {r: i for i, r in enumerate(t.racks)}
        self.gpu_node = np.repeat(np.arange(t.n_nodes), t.gpus_per_node)
        self.port_node = np.repeat(np.arange(t.n_nodes), t.ports_per_node)
        self.gpu_rack = t.node_rack[self.gpu_node]
        self.r_thermal = np.clip(g.normal(0.075, 0.005, t.n_gpus), 0.06, 0.09)
        # Each GPU's vendor profile (physics, what its exporter publishes, how it reports a fault).
        self.node_vendor = [t.vendor(n) for n in range(t.n_nodes)]
        self.gpu_vendor = [self.node_vendor[int(n)] for n in self.gpu_node]
        nv = VENDORS["nvidia"]
        self.p_idle = g.normal(66.0, 3.0, t.n_gpus) * np.array([v.p_idle / nv.p_idle for v in self.gpu_vendor])
        self.p_peak = g.normal(430.0, 15.0, t.n_gpus) * np.array([v.p_peak / nv.p_peak for v in self.gpu_vendor])
        # A bigger, hotter part sits in a bigger cold plate: the same temperatures at its own power.
        self.r_thermal *= np.array([nv.p_peak / v.p_peak for v in self.gpu_vendor])
        self.clock_busy = np.array([v.clock_busy for v in self.gpu_vendor])
        self.clock_idle = np.array([v.clock_idle for v in self.gpu_vendor])
        self.fb_total = np.array([v.fb_total_mib for v in self.gpu_vendor])
        self.fb_busy = np.where(self.fb_total == FB_TOTAL_MIB, 71000.0, np.round(self.fb_total * 0.87))
        # GPUs whose exporter publishes NVLink 5's recoveries (GB200): a recovery for a share of a fault's NVLink
        # errors, the share drawn once per fleet (1e-3 to 1e-2, log-uniform; assumed: no public source gives it),
        # from a stream of its own (the other vendors' traces stay those of before)
        self.recovery_rows = np.flatnonzero(["nvlink_recovery_total" in v.metrics for v in self.gpu_vendor])
        self.recovery_share = (float(10 ** np.random.default_rng([scenario.seed, 19]).uniform(-3.0, -2.0))
                               if len(self.recovery_rows) else 0.0)
        self.uuids = [str(uuidlib.UUID(int=int(g.integers(0, 2**62)) << 64 | int(g.integers(0, 2**62))))
                      for _ in range(t.n_gpus)]
        self.jobs = self._plan_jobs()
        self.placed = [self._place(inst) for inst in self._instances()]
        self.observation = Observation(scenario.seed, scenario.start, scenario.resolution, scenario.sampling)
        # Healthy parts' background errors: one homogeneous rate per counter for the quiet default, each part's own
        # rate (drawn here) otherwise (lab.sim.noise)
        self.part_noise: dict[str, PartNoise] = {}
        if scenario.noise_name != "quiet":
            noise_rng = np.random.default_rng([scenario.seed, 11])
            for m, spec in sorted(scenario.noise.items()):
                if m in GPU_COUNTERS or m in PORT_COUNTERS:
                    self.part_noise[m] = PartNoise(spec, t.n_gpus if m in GPU_COUNTERS else t.n_ports, noise_rng,
                                                   HEALTHY_MAX_PER_H.get(m, np.inf), name=m)
            if AER_LOGGED in scenario.noise:  # (its parts' rates from a stream of their own)
                self.part_noise[AER_LOGGED] = PartNoise(scenario.noise[AER_LOGGED], t.n_gpus,
                                                        np.random.default_rng([scenario.seed, 13]),
                                                        HEALTHY_MAX_PER_H[AER_LOGGED], name=AER_LOGGED)
        # The closed loop drives the workload from its scheduler: a function of step times returning which
        # GPUs are busy ([gpus × steps]); None follows the scenario's planned jobs.
        self.workload: Callable[[np.ndarray], np.ndarray] | None = None

    # -- planning --------------------------------------------------------------------------------
    def _plan_jobs(self) -> list[Job]:
        sc, g, mix = self.scenario, self.rng, self.scenario.jobs
        jobs: list[Job] = []
        order = g.permutation(self.topo.n_nodes)
        i = 0
        while i < len(order):
            size = int(g.integers(mix.nodes_per_job[0], mix.nodes_per_job[1] + 1))
            nodes = np.sort(order[i : i + size])
            i += size
            t = sc.start + float(g.uniform(0, mix.gap[1]))
            while t < sc.start + sc.duration:
                end = t + float(g.uniform(*mix.duration))
                jobs.append(Job(nodes, t, end, bool(g.random() < mix.partial_share)))
                t = end + float(g.uniform(*mix.gap))
        return jobs

    def template(self, fault: str, name: str | None = None) -> FaultTemplate:
        """The template ``name`` of a fault class, or one of its templates drawn at random (None)."""
        choices = sorted(k for k in self.library if k.split("/")[0] == fault)
        if not choices:
            raise TemplateError(f"{self.scenario.source}: no template for fault class {fault!r}")
        if name is None:
            return self.library[choices[int(self.rng.integers(len(choices)))]]
        key = f"{fault}/{name}"
        if key not in self.library:
            raise TemplateError(f"{self.scenario.source}: no template {key!r} (have {', '.join(choices)})")
        return self.library[key]

    def random_entity(self, target: str, taken: set[str] | None = None, vendor: str | None = None) -> str:
        """A random entity of the target kind (of ``vendor``'s nodes when given), on a node (or rack) not in
        ``taken`` while there is one: two listed faults on one GPU would have the second start on hardware
        already failed."""
        g, t = self.rng, self.topo
        if vendor is None:
            gpus, ports, nodes = self.gpu_ids, self.port_ids, list(t.nodes)
        else:
            mine = [n for n in range(t.n_nodes) if self.node_vendor[n].name == vendor]
            if not mine:
                raise TemplateError(f"{self.scenario.source}: no {vendor} nodes in this topology")
            nodes = [t.nodes[n] for n in mine]
            gpus = [self.gpu_ids[n * t.gpus_per_node + k] for n in mine for k in range(t.gpus_per_node)]
            ports = [self.port_ids[n * t.ports_per_node + k] for n in mine for k in range(t.ports_per_node)]
        for _ in range(64):
            if target == "accelerator":
                pick = gpus[int(g.integers(len(gpus)))]
            elif target == "port":
                pick = ports[int(g.integers(len(ports)))]
            elif target == "rack":
                pick = t.racks[int(g.integers(len(t.racks)))]
            else:
                pick = nodes[int(g.integers(len(nodes)))]
            if not taken or pick.split("/", 1)[0] not in taken:
                break
        if taken is not None:
            taken.add(pick.split("/", 1)[0])
        return pick

    def _instances(self) -> list[FaultInstance]:
        sc = self.scenario
        out = []
        taken: set[str] = set()
        for spec in sc.faults:
            template = self.template(spec.fault, spec.template)
            entity = (self.random_entity(template.target, taken, spec.vendor) if spec.entity == "random"
                      else spec.entity)
            failure = None if spec.failure is None else sc.start + spec.failure
            out.append(FaultInstance.place(template, entity, sc.start + spec.onset, failure, self.rng))
        if sc.sample is not None:
            out.extend(sample_instances(self, sc.sample))
        for inst in out:  # a confounder's label window is where it acts: its effects end with it
            if inst.template.benign and inst.until is None:
                inst.until = inst.failure
        return out

    def _place(self, inst: FaultInstance) -> _Placed:
        t = self.topo
        target = inst.template.target
        entity = inst.entity
        empty = np.empty(0, dtype=np.int64)
        try:
            if target == "accelerator":
                p = _Placed(inst, np.array([self.gpu_index[entity]]), empty, empty)
            elif target == "port":
                p = _Placed(inst, empty, np.array([self.port_index[entity]]), empty)
            elif target == "node":
                n = self.node_index[entity]
                p = _Placed(inst, np.arange(n * t.gpus_per_node, (n + 1) * t.gpus_per_node),
                            np.arange(n * t.ports_per_node, (n + 1) * t.ports_per_node), empty)
            else:
                r = self.rack_index[entity]
                p = _Placed(inst, np.flatnonzero(self.gpu_rack == r), empty, np.array([r]))
        except KeyError:
            raise TemplateError(f"{self.scenario.source}: {entity!r} is not a {target} of this topology") from None
        p.lines = self._lines(p)
        return p

    def _lines(self, p: _Placed) -> list[tuple[float, str, str]]:
        inst, t, g = p.inst, self.topo, self.rng
        span = inst.failure - inst.onset
        pid, pid2, addr = int(g.integers(10000, 99999)), int(g.integers(10000, 99999)), f"{int(g.integers(16**5)):05x}"
        times: list[tuple[float, str]] = []
        for k, ev in enumerate(inst.template.events):
            jitter = inst.shift.get(len(inst.template.effects) + k, 0.0) if ev.at is not None and ev.at < 1 else 0.0
            if ev.at is not None:
                times.append((inst.onset + max(0.0, min(ev.at + jitter, 1.0) if ev.at <= 1 else ev.at) * span, ev.line))
                continue
            x = ev.start
            while x < ev.end:
                times.append((inst.onset + x * span, ev.line))
                a, b = ev.every_min
                f = (x - ev.start) / max(ev.end - ev.start, 1e-9)
                x += max(a + (b - a) * f, 0.1) * 60.0 / max(span, 1.0) * float(g.uniform(0.7, 1.3))
        out = []
        gpu_rows = p.gpu_rows if inst.template.target != "rack" else np.empty(0, dtype=np.int64)
        for ts, line in times:
            fields = {"pid": pid, "pid2": pid2, "addr": addr}
            if "{pci" in line and "{port_pci}" not in line:
                for row in gpu_rows:
                    node, said = self._gpu_line(int(row), line, **fields)
                    if isinstance(said, int):  # an Ascend fault code; the job's own clear when it restarts
                        app = said in APPLICATION_CODES
                        p.codes.append((ts, int(row), said, ts + 300.0 if app else math.inf))
                    elif said:
                        out.extend((ts, node, text) for text in said)
            elif "{port_pci}" in line or "{netdev}" in line:
                rows = p.port_rows
                for row in rows:
                    pi = int(row) % t.ports_per_node
                    if self.node_vendor[int(self.port_node[row])].name == "ascend":
                        continue  # an NPU's own port: its state is npu-exporter's, no host kernel line
                    out.append((ts, t.nodes[int(self.port_node[row])],
                                line.format(port_pci=t.port_pci(pi), netdev=t.netdev(pi), **fields)))
            else:
                nodes = sorted({int(self.gpu_node[r]) for r in p.gpu_rows}
                               | {int(self.port_node[r]) for r in p.port_rows})
                for n in nodes[:1] if inst.template.target != "rack" else []:
                    out.append((ts, t.nodes[n], line.format(**fields)))
        return out

    def labels(self) -> list[dict]:
        """Every injected fault and confounder, plus the workload's own confounders (docs/architecture.md §8).

        Workload confounders: a job that uses half of its nodes' GPUs (``benign_partial_node_job``, for
        the job's duration) and the load steps when a job starts or stops (``benign_load_step``, the ten
        minutes after the step).
        """
        out = [p.inst.label() for p in self.placed]
        start, end = self.scenario.start, self.scenario.start + self.scenario.duration
        for job in self.jobs:
            if job.start >= end:
                continue
            for n in job.nodes:
                node = self.topo.nodes[int(n)]
                if job.partial:
                    out.append({"entity": node, "kind": "node", "fault": "benign_partial_node_job",
                                "template": "workload", "onset": round(job.start, 3),
                                "failure": round(min(job.end, end), 3)})
                for step in (job.start, job.end):
                    if start < step < end:
                        out.append({"entity": node, "kind": "node", "fault": "benign_load_step",
                                    "template": "workload", "onset": round(step, 3),
                                    "failure": round(min(step + LOAD_STEP_WINDOW_S, end), 3)})
        return sorted(out, key=lambda x: (x["onset"], x["entity"], x["fault"]))

    # -- generation ------------------------------------------------------------------------------
    def chunks(self, chunk_steps: int | None = None) -> Iterator[SimChunk]:
        """Generate the scenario in time order, one chunk of steps at a time."""
        sc, t = self.scenario, self.topo
        steps = sc.steps
        if chunk_steps is None:
            chunk_steps = max(1, min(240, 4_000_000 // max(t.n_gpus * 20, 1)))
        draws = StepStreams(sc.seed, 1)  # every step's draws, the same whatever the chunks (lab.sim.streams)
        carry_gpu = {m: np.zeros(t.n_gpus) for m in GPU_COUNTERS + DERIVED_COUNTERS}
        carry_port = {m: np.zeros(t.n_ports) for m in PORT_COUNTERS}
        xid_last = np.zeros(t.n_gpus)
        # Each line and code with its fault: a fault's ``until`` can move while the run goes on (the closed
        # loop repairs a node early), and nothing of it is emitted after that.
        pending_lines = sorted(((line, p.inst) for p in self.placed for line in p.lines),
                               key=lambda x: (x[0][0], x[0][1], x[0][2]))
        self._codes = sorted(((c, p.inst) for p in self.placed for c in p.codes), key=lambda x: x[0])
        li = 0
        for s0 in range(0, steps, chunk_steps):
            ts = sc.start + sc.resolution * np.arange(s0 + 1, min(s0 + chunk_steps, steps) + 1)
            chunk_lines = []
            while li < len(pending_lines) and pending_lines[li][0][0] <= ts[-1]:
                line, inst = pending_lines[li]
                if inst.until is None or line[0] <= inst.until:
                    chunk_lines.append(line)
                li += 1
            yield self._chunk(ts, draws, carry_gpu, carry_port, xid_last, chunk_lines)

    def _util(self, ts: np.ndarray) -> np.ndarray:
        if self.workload is not None:
            return self.workload(ts)
        t = self.topo
        busy = np.zeros((t.n_gpus, len(ts)), dtype=bool)
        for job in self.jobs:
            if job.end < ts[0] or job.start > ts[-1]:
                continue
            on = (ts >= job.start) & (ts < job.end)
            rows = (job.nodes[:, None] * t.gpus_per_node + np.arange(t.gpus_per_node)[None, :])
            if job.partial:
                rows = rows[:, : t.gpus_per_node // 2]
            busy[rows.ravel()] |= on
        return busy

    def _chunk(self, ts, draws: StepStreams, carry_gpu, carry_port, xid_last, lines) -> SimChunk:
        """One chunk of steps: the workload, the faults' effects, the physics, healthy parts' background errors
        and traffic, then the gauges and the counters (carried over from the chunk before). Each quantity draws
        from its own stream step by step, so a scenario and seed give the same world in chunks of any size."""
        t, sc = self.topo, self.scenario
        n_s = len(ts)
        dt = sc.resolution
        busy = self._util(ts)
        util = np.where(busy, draws.uniform("util", 88, 100, t.n_gpus, n_s), 0.0)
        fx = _Effects(t, n_s, 30.0 + 0.6 * np.sin(2 * math.pi * (ts - sc.start) / 86400.0)[None, :]
                      + np.zeros((len(t.racks), 1)))
        self._repairs(ts, fx)
        self._fault_effects(ts, draws, fx)
        # (a GB200 link's recoveries come with a fault's errors, not with a healthy link's: _recoveries)
        link_fault = fx.gpu_inc["nvlink_crc_flit_total"].copy() if len(self.recovery_rows) else None
        power, temp, hbm, throttle, clock, fb = self._physics(draws, busy, util, fx)
        fx.gpu_inc["energy_mj_total"] += power * dt * 1000.0
        lines = self._background(ts, draws, fx, lines, busy)
        self._traffic(draws, util, fx)
        gpu = {
            "gpu_temp_c": np.round(temp), "hbm_temp_c": np.round(hbm), "power_w": np.round(power, 3),
            "sm_clock_mhz": np.round(clock), "mem_clock_mhz": np.full(busy.shape, 2619.0),
            "gpu_util_pct": np.round(util), "mem_copy_util_pct": np.round(util * 0.4),
            "fb_used_mib": fb, "fb_free_mib": self.fb_total[:, None] - fb,
            "xid_last": self._xid_gauge(ts, xid_last, lines),
            "npu_error_code_0": self._npu_codes(ts, fx.gpu_reset),
            "row_remap_failure": _nan_to(fx.gauge_set.get("row_remap_failure", np.zeros(busy.shape)), 0.0),
            "throttle_thermal": throttle,
        }
        for rows, step in fx.gpu_reset:
            if len(rows):
                gpu["xid_last"][rows, step:] = 0.0
        for m in GPU_COUNTERS:
            gpu[m] = _accumulate(carry_gpu[m], fx.gpu_inc[m], [(r, s) for r, s in fx.gpu_reset if len(r)])
        if len(self.recovery_rows):
            gpu["nvlink_recovery_total"] = _accumulate(carry_gpu["nvlink_recovery_total"],
                                                       self._recoveries(draws, link_fault, dt),
                                                       [(r, s) for r, s in fx.gpu_reset if len(r)])
        port: dict[str, np.ndarray] = {}
        for m in PORT_COUNTERS:
            port[m] = _accumulate(carry_port[m], fx.port_inc[m], [(r, s) for r, s in fx.port_reset if len(r)])
        port["port_state"] = _nan_to(fx.port_set.get("port_state", np.full((t.n_ports, n_s), np.nan)), 4.0)
        port["port_phys_state"] = _nan_to(fx.port_set.get("port_phys_state", np.full((t.n_ports, n_s), np.nan)), 5.0)
        xid_last[:] = gpu["xid_last"][:, -1]
        speed = fx.gauge_scale["sm_clock_mhz"] * np.where(throttle > 0, 0.85, 1.0)
        obs = self.observation
        gpu_sampled = obs.sampled("dcgm", self.gpu_node, ts) if obs else None
        port_sampled = obs.sampled("node", self.port_node, ts) if obs else None
        return SimChunk(ts, gpu, port, fx.gpu_present, fx.port_present, lines, np.clip(speed, 0.0, 1.0),
                        gpu_sampled, port_sampled)

    def _recoveries(self, draws: StepStreams, link_fault: np.ndarray, dt: float) -> np.ndarray:
        """NVLink 5's successful link recoveries of the chunk's steps ([gpus x steps]; 0 but on GB200 GPUs): each of the
        errors a fault makes on a GPU's links (``link_fault``: the engine's CRC errors, NVLink 5's errors left after
        FEC) a recovery at the fleet's share, and a healthy GPU's once in :data:`HEALTHY_RECOVERY_PER_H` hours (a
        real GB200 fleet's 5,759 healthy links counted none in days while the failing one counted 505,
        marin-community/marin issue 9086: a rate at that bound; the healthy errors of the noise presets make none)."""
        out = np.zeros_like(link_fault)
        rows = self.recovery_rows
        out[rows] = draws.binomial("nvlink_recovery.of_errors", link_fault[rows].astype(np.int64),
                                   self.recovery_share) + draws.poisson(
            "nvlink_recovery.healthy", HEALTHY_RECOVERY_PER_H * dt / 3600.0, len(rows), link_fault.shape[1])
        return out

    def _repairs(self, ts: np.ndarray, fx: _Effects) -> None:
        """A repaired part comes back reset: counters from zero, no last Xid."""
        dt = self.scenario.resolution
        for p in self.placed:
            u = p.inst.until
            if u is not None and not p.inst.template.benign and ts[0] - dt <= u < ts[-1]:
                step = int(np.searchsorted(ts, u, side="right"))
                fx.gpu_reset.append((p.gpu_rows, step))
                fx.port_reset.append((p.port_rows, step))

    def _fault_effects(self, ts: np.ndarray, draws: StepStreams, fx: _Effects) -> None:
        """Every active fault's effects over the chunk: parts vanishing and resetting, counter rates and steps,
        gauge offsets, scales and set values. A rate's errors are drawn at the steps it is on, from the fault's
        and effect's own stream."""
        t = self.topo
        n_s, dt = len(ts), self.scenario.resolution
        for i, p in enumerate(self.placed):
            if not (p.inst.onset <= ts[-1] and (p.inst.until or math.inf) >= ts[0]):
                continue
            inst = p.inst
            alive = np.ones(n_s, dtype=bool) if inst.until is None else ts <= inst.until
            now_x, prev_x = inst.norm(ts), inst.norm(ts - dt)  # (once an instance, not once an effect)
            for k, eff in enumerate(inst.template.effects):
                x = np.where(alive, now_x - inst.shift.get(k, 0.0), np.nan)
                x_prev = prev_x - inst.shift.get(k, 0.0)  # one step earlier, across chunk edges
                if eff.kind == "vanish":
                    gone = (x >= eff.start) & (x < eff.end)
                    if eff.exporter in ("dcgm", "all") and len(p.gpu_rows):
                        fx.gpu_present[p.gpu_rows] &= ~gone
                    if eff.exporter in ("node", "all") and len(p.port_rows):
                        fx.port_present[p.port_rows] &= ~gone
                    continue
                if eff.kind == "reset":
                    hit = np.flatnonzero((x >= eff.start) & (x_prev < eff.start))
                    if len(hit):
                        fx.gpu_reset.append((p.gpu_rows, int(hit[0])))
                        fx.port_reset.append((p.port_rows, int(hit[0])))
                    continue
                level = eff.level(x)
                on = ~np.isnan(level)
                metric = eff.metric
                if eff.kind in ("rate", "step"):
                    target, rows = fx.gpu_inc.get(metric), p.gpu_rows
                    if target is None:
                        target, rows = fx.port_inc.get(metric), p.port_rows
                    if eff.kind == "rate":
                        steps = np.flatnonzero(on)
                        if target is not None and len(rows) and len(steps):
                            lam = level[steps] * inst.rate_factor * dt / 3600.0
                            target[rows[:, None], steps[None, :]] += draws.poisson(f"fault{i}.{k}", lam[None, :],
                                                                                   len(rows), len(steps))
                    else:
                        hit = np.flatnonzero(on & (x_prev < eff.start))
                        if target is not None and len(hit) and len(rows):
                            target[rows, hit[0]] += eff.a
                elif eff.kind == "offset":
                    if metric == "coolant_inlet_c":
                        fx.coolant[p.rack_rows] += np.where(on, level, 0.0)
                    else:
                        fx.gauge_offsets[metric][p.gpu_rows] += np.where(on, level, 0.0)
                elif eff.kind == "scale":
                    fx.gauge_scale[metric][p.gpu_rows] *= np.where(on, level, 1.0)
                elif eff.kind == "set":
                    inside = on & (x < eff.end)
                    if metric in PORT_GAUGES:
                        arr = fx.port_set.setdefault(metric, np.full((t.n_ports, n_s), np.nan))
                        arr[p.port_rows] = np.where(inside, eff.a, arr[p.port_rows])
                    else:
                        arr = fx.gauge_set.setdefault(metric, np.full((t.n_gpus, n_s), np.nan))
                        arr[p.gpu_rows] = np.where(inside, eff.a, arr[p.gpu_rows])

    def _physics(self, draws: StepStreams, busy: np.ndarray, util: np.ndarray, fx: _Effects) -> tuple:
        """Power, GPU and HBM temperature (from the coolant and each GPU's thermal resistance), thermal throttling,
        SM clock and framebuffer use, with the faults' offsets, scales and set values."""
        n, n_s = busy.shape
        power = (self.p_idle[:, None] + util / 100.0 * (self.p_peak - self.p_idle)[:, None]
                 * draws.uniform("power.load", 0.92, 1.0, n, n_s) + draws.normal("power.noise", 0, 6, n, n_s))
        power *= fx.gauge_scale["power_w"]
        temp = (fx.coolant[self.gpu_rack] + self.r_thermal[:, None] * power
                + draws.normal("gpu_temp.noise", 0, 0.7, n, n_s))
        temp += fx.gauge_offsets["gpu_temp_c"]
        hbm = (temp + 3.0 + 0.08 * util + draws.normal("hbm_temp.noise", 0, 0.6, n, n_s)
               + fx.gauge_offsets["hbm_temp_c"])
        throttle = (temp >= 87.0).astype(float)
        if "throttle_thermal" in fx.gauge_set:
            throttle = np.where(np.isnan(fx.gauge_set["throttle_thermal"]), throttle, fx.gauge_set["throttle_thermal"])
        clock = np.where(busy, self.clock_busy[:, None] - 15.0 * draws.below("sm_clock.step", 3, n, n_s),
                         self.clock_idle[:, None])
        clock = np.where(throttle > 0, clock * 0.85, clock) * fx.gauge_scale["sm_clock_mhz"]
        fb = np.where(busy, self.fb_busy[:, None] + draws.below("fb_used.extra", 2000, n, n_s), 0.0)
        return power, temp, hbm, throttle, clock, fb

    def _background(self, ts: np.ndarray, draws: StepStreams, fx: _Effects,
                    lines: list[tuple[float, str, str]], busy: np.ndarray) -> list[tuple[float, str, str]]:
        """Healthy parts' background errors (daemon's noise presets) into the counters, and their corrected AER
        lines into the kernel log; returns the chunk's kernel lines. ``busy``: which GPUs run a job at each step
        (a rate that follows the load: a GPU's own, a port's its node's share of busy GPUs)."""
        t, sc = self.topo, self.scenario
        n_s, dt = len(ts), sc.resolution
        if not self.part_noise:  # quiet: one homogeneous rare rate per counter
            for m, spec in sc.noise.items():
                lam = spec.rate_per_h * dt / 3600.0
                if m in fx.gpu_inc:
                    fx.gpu_inc[m] += draws.poisson(f"{m}.errors", lam, t.n_gpus, n_s)
                elif m in fx.port_inc:
                    fx.port_inc[m] += draws.poisson(f"{m}.errors", lam, t.n_ports, n_s)
        load: dict[bool, np.ndarray] = {}

        def load_of(gpu: bool) -> np.ndarray:
            if gpu not in load:
                share = busy.astype(float)
                load[gpu] = share if gpu else self._node_mean_per_port(share)
            return load[gpu]

        for m, noise in self.part_noise.items():
            follows = noise.spec.idle_share < 1.0
            if m == AER_LOGGED:
                logged = self._aer_lines(ts, noise.increments(draws, n_s, dt, load_of(True) if follows else None),
                                         fx.gpu_present)
                if logged:
                    lines = sorted(lines + logged)
            else:
                gpu = m in fx.gpu_inc
                (fx.gpu_inc if gpu else fx.port_inc)[m] += noise.increments(
                    draws, n_s, dt, load_of(gpu) if follows else None)
        return lines

    def _traffic(self, draws: StepStreams, util: np.ndarray, fx: _Effects) -> None:
        """Each port's bytes, from its node's GPU utilisation; none while the port is not ACTIVE."""
        t = self.topo
        n_s, dt = util.shape[1], self.scenario.resolution
        traffic = self._node_mean_per_port(util) / 100.0 * PORT_BYTES_PER_S * dt
        port_state_up = np.ones((t.n_ports, n_s), dtype=bool)
        if "port_state" in fx.port_set:
            port_state_up = np.isnan(fx.port_set["port_state"]) | (fx.port_set["port_state"] == 4)
        for m in ("rcv_bytes_total", "xmit_bytes_total"):
            fx.port_inc[m] += np.floor(traffic * draws.uniform(f"{m}.share", 0.9, 1.0, t.n_ports, n_s)) * port_state_up

    def _node_mean_per_port(self, per_gpu: np.ndarray) -> np.ndarray:
        """``[ports x steps]``: the mean of each node's GPUs' ``[gpus x steps]`` values, for each of its ports."""
        t = self.topo
        by_node = per_gpu.reshape(t.n_nodes, t.gpus_per_node, -1)
        total = by_node[:, 0].copy()
        for g in range(1, t.gpus_per_node):  # (a node's GPUs added in order: a mean over an axis adds them in an
            total += by_node[:, g]  # order that follows the chunk's shape, and rounds differently)
        return np.repeat(total / t.gpus_per_node, t.ports_per_node, axis=0)

    def _xid_gauge(self, ts: np.ndarray, xid_last: np.ndarray, lines: list[tuple[float, str, str]]) -> np.ndarray:
        """The Xid gauge: the last Xid code of each GPU, from the step after its kernel line."""
        xid = np.repeat(xid_last[:, None], len(ts), axis=1)
        for ts_line, node, line in lines:
            m = _XID.search(line)
            if not m:
                continue
            g = self.gpu_index.get(f"{node}/gpu{self._gpu_by_pci(m.group(1))}")
            if g is None:
                continue
            step = int(np.searchsorted(ts, ts_line, side="left"))
            xid[g, step:] = float(m.group(2))
        return xid

    def _gpu_line(self, row: int, line: str, **fields) -> tuple[str, list[str] | int | None]:
        """A kernel line about GPU ``row`` (``{pci}``, ``{pci_xid}`` filled in) as its vendor reports it, and its
        node."""
        pci = normalize_pci(self.topo.gpu_pci(row % self.topo.gpus_per_node))
        said = render_line(self.gpu_vendor[row], line.format(pci_xid=pci, pci=f"{pci}.0", **fields), self.gpu_ids[row])
        return self.topo.nodes[int(self.gpu_node[row])], said

    def _aer_lines(self, ts: np.ndarray, errors: np.ndarray, present: np.ndarray) -> list[tuple[float, str, str]]:
        """A healthy GPU's corrected PCIe errors as the kernel logs them, one line each (``errors``: [gpus x steps]),
        in its vendor's words; none while the GPU is gone."""
        out = []
        for row, step in zip(*np.nonzero((errors > 0) & present)):
            node, said = self._gpu_line(int(row), AER_LINE)
            if not said or isinstance(said, int):
                continue
            for k in range(int(errors[row, step])):
                out.extend((float(ts[step]) - 0.5 - 0.01 * k, node, text) for text in said)
        return out

    def _npu_codes(self, ts: np.ndarray, resets: list[tuple[np.ndarray, int]]) -> np.ndarray:
        """npu-exporter's first error-code slot: the latest active Ascend fault code per GPU row (0: none); a
        fault's code holds until the NPU is reset (a counter reset, as after a reboot), a job's own for 5 min."""
        out = np.zeros((self.topo.n_gpus, len(ts)))
        for (start, row, code, until), inst in self._codes:
            if start > ts[-1]:
                break
            if inst.until is not None:
                if start > inst.until:
                    continue
                until = min(until, inst.until)
            if until < ts[0]:
                continue
            on = (ts >= start) & (ts < until)
            for rows, step in resets:
                if row in rows and ts[step] >= start:
                    on[step:] = False
            out[row, on] = code
        return out

    def _gpu_by_pci(self, pci: str) -> int:
        short = normalize_pci(pci)
        for g in range(self.topo.gpus_per_node):
            if normalize_pci(self.topo.gpu_pci(g)) == short:
                return g
        return -1

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")
APPLICATION_CODES = frozenset({RESTART_BUSINESS})


def _nan_to(a: np.ndarray, value: float) -> np.ndarray:
    """``np.nan_to_num(a, nan=value)`` of an array the simulator filled (no infinities), without its per-call cost."""
    return np.where(np.isnan(a), value, a)


def _accumulate(carry: np.ndarray, inc: np.ndarray, resets: list[tuple[np.ndarray, int]]) -> np.ndarray:
    """Cumulative counter values from increments, restarting at zero where a reset hits; updates carry. Each step's
    value is the one before it plus the step's increment (a reset's: its increment alone), added in that order, so
    a counter is the same to the last bit in chunks of any size."""
    cum = np.empty_like(inc)
    if inc.shape[1] <= 8:  # (the evaluation's chunks have a step or a few: a column at a time, no loop per row)
        prev = carry
        for k in range(inc.shape[1]):
            prev = cum[:, k] = prev + inc[:, k]
    else:
        cum = np.cumsum(np.concatenate((carry[:, None], inc), axis=1), axis=1)[:, 1:]
    for rows, step in sorted(resets, key=lambda r: r[1]):
        cum[rows, step:] = np.cumsum(inc[rows, step:], axis=1)
    carry[:] = cum[:, -1]
    return cum
