"""Fault arrivals sampled from fleet statistics (docs/fleet-stats.md).

* Fleet inter-arrivals of fault starts are Weibull (shape 0.62 on the InfiniteHBD trace: bursty, not
  Poisson), scaled so the mean rate is ``faults_per_node_year`` × nodes.
* Repeat offenders: with probability ``reuse`` a fault lands on a node drawn from the earlier faults
  (so a node with more faults draws more), otherwise on a uniformly random node. ``reuse`` = 0.4 gives,
  on InfiniteHBD's 400 nodes and 584 faults, 82 % of faults on nodes with two or more and 233 distinct
  faulty nodes (the trace: 83.6 % and 231).
* The class mix defaults to InfiniteHBD's hardware faults mapped onto the simulated classes
  (:data:`DEFAULT_MIX`); confounders arrive as Poisson processes at ``confounders_per_day``, except the
  standing ones (a warm slot), which are there from the start to the end.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from lab.sim.faults import FaultInstance, FaultTemplate
from lab.sim.scenario import SampleSpec, Scenario
from lab.sim.layout import SimTopology

# InfiniteHBD hardware faults (fault_statistics.json) by simulated class: DBE/SBE over threshold and GPU
# Xid errors -> hbm_degradation (72); PCI link width low, GPU lost or not found, device unknown error ->
# gpu_off_bus (71); parameter-plane cable link down, NIC link speed low, NIC lost -> link_degradation (58);
# nvidia-smi timeout -> fail_slow (9); P2P bandwidth low -> nvlink_errors (3); temperature high -> thermal (2).
DEFAULT_MIX = {"hbm_degradation": 72, "gpu_off_bus": 71, "link_degradation": 58, "fail_slow": 9,
               "nvlink_errors": 3, "thermal_degradation": 2}
REUSE = 0.4


# Confounders that are where the hardware sits rather than something that happens: present from the start
# of the scenario to its end (``confounders_per_day`` then sets how many there are).
STANDING = frozenset({"benign_warm_slot"})


def weibull_gaps(rng: np.random.Generator, mean_s: float, shape: float, n: int) -> np.ndarray:
    """``n`` Weibull inter-arrival gaps with the given mean and shape."""
    scale = mean_s / math.gamma(1.0 + 1.0 / shape)
    return scale * rng.weibull(shape, n)


def arrival_times(rng: np.random.Generator, start: float, duration: float, rate_per_s: float,
                  shape: float) -> np.ndarray:
    """Fault start times in [start, start + duration) from a Weibull renewal process."""
    if rate_per_s <= 0:
        return np.empty(0)
    mean = 1.0 / rate_per_s
    times: list[float] = []
    t = start + float(weibull_gaps(rng, mean, shape, 1)[0]) * float(rng.random())
    while t < start + duration:
        times.append(t)
        t += float(weibull_gaps(rng, mean, shape, 1)[0])
    return np.asarray(times)


def pick_nodes(rng: np.random.Generator, n_nodes: int, n: int, reuse: float = REUSE) -> np.ndarray:
    """Nodes for ``n`` faults, in order, with repeat offenders (see the module docstring)."""
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        if i and rng.random() < reuse:
            out[i] = out[int(rng.integers(i))]
        else:
            out[i] = int(rng.integers(n_nodes))
    return out


class Fleet(Protocol):
    """What sampling arrivals needs of the simulated fleet (the :class:`lab.sim.simulator.Simulator` is one)."""

    scenario: Scenario
    topo: SimTopology
    gpu_ids: list[str]
    port_ids: list[str]

    def template(self, fault: str, name: str | None = None) -> FaultTemplate:
        """The template ``name`` of a fault class, or one of its templates drawn at random (None)."""
        ...

    def random_entity(self, target: str, taken: set[str] | None = None, vendor: str | None = None) -> str:
        """A random entity of the target kind, on a node not in ``taken`` while there is one."""
        ...


#: how long before its failure a fault without warning shows its first symptom (``SampleSpec.sudden_share``)
SUDDEN_S = 60.0


def sample_instances(sim: Fleet, spec: SampleSpec) -> list[FaultInstance]:
    """Faults and confounders for a scenario's ``sample`` section."""
    sc, topo = sim.scenario, sim.topo
    rng = np.random.default_rng(sc.seed + 7)
    rate = spec.faults_per_node_year * topo.n_nodes / (365.0 * 86400.0)
    starts = arrival_times(rng, sc.start, sc.duration, rate, spec.weibull_shape)
    mix = spec.mix or DEFAULT_MIX
    classes = sorted(mix)
    weights = np.array([mix[c] for c in classes], dtype=float)
    weights /= weights.sum()
    nodes = pick_nodes(rng, topo.n_nodes, len(starts), REUSE if spec.repeat_share > 0 else 0.0)
    out = []
    for t, node in zip(starts, nodes):
        fault = classes[int(rng.choice(len(classes), p=weights))]
        template = sim.template(fault, None)
        name = topo.nodes[int(node)]
        if template.target == "port":
            entity = sim.port_ids[int(node) * topo.ports_per_node + int(rng.integers(topo.ports_per_node))]
        elif template.target == "accelerator":
            entity = sim.gpu_ids[int(node) * topo.gpus_per_node + int(rng.integers(topo.gpus_per_node))]
        else:
            entity = name
        out.append(FaultInstance.place(template, entity, float(t), None, rng))
    if spec.sudden_share > 0:  # its own draws: the faults stay those of the scenario without
        sudden = np.random.default_rng(sc.seed + 13)
        for inst in out:
            if inst.template.fails and sudden.random() < spec.sudden_share:
                inst.onset = inst.failure - SUDDEN_S
    standing: set[str] = set()  # nodes with a standing confounder: one slot is not warm twice over
    for fault, per_day in sorted(spec.confounders_per_day.items()):
        n = int(rng.poisson(per_day * sc.duration / 86400.0))
        for t in np.sort(rng.uniform(sc.start, sc.start + sc.duration, n)):
            template = sim.template(fault, None)
            entity = sim.random_entity(template.target, standing if fault in STANDING else None)
            if fault in STANDING:  # a property of the slot, there all along: never a step in mid-trace
                out.append(FaultInstance.place(template, entity, sc.start, sc.start + sc.duration, rng))
            else:
                out.append(FaultInstance.place(template, entity, float(t), None, rng))
    return out
