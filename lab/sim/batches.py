"""A simulator's chunks as what its exporters publish and the pipeline reads: the families of samples each profile
and vendor emits (:func:`emission`), a chunk's samples as columns in the order a trace of it holds them (by each
exporter's scrape stamps where the scenario samples, :mod:`lab.sim.observe`; else by step), its kernel lines as event
rows, and both as a pipeline :class:`~daemon.ingest.batch.Batch` without the file round trip."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from daemon.ingest.batch import Batch
from daemon.ingest.formats.kernel_events import parse_kernel_message
from detectors.schema import category_names, events_frame, frame
from detectors.table import Names, Table, keeps_layout
from lab.sim.simulator import (DERIVED_COUNTERS, FULL_ONLY, GPU_COUNTERS, GPU_GAUGES, NVIDIA_NEVER, PORT_COUNTERS,
                               PORT_GAUGES, STILL_REPORTED, SimChunk, Simulator, emitted_metrics)
from lab.sim.vendors import VENDORS


def emission(sim: Simulator, profile: str) -> list[tuple[str, str, bool, np.ndarray | None]]:
    """What the exporters publish: (canonical metric, engine array, is a GPU metric, rows or None for all).

    One vendor's exporter maps an engine array to its own canonical metric (AMD's XGMI errors stand where
    NVIDIA's NVLink CRC errors do) or leaves it out; an all-NVIDIA topology publishes the profile's set.
    """
    gpu_metrics, port_metrics = emitted_metrics(profile)
    if sim.topo.vendors == ("nvidia",):
        return [(m, m, True, None) for m in gpu_metrics] + [(m, m, False, None) for m in port_metrics]
    out = []
    gpu_vendor = np.array([v.name for v in sim.gpu_vendor])
    port_vendor = np.array([sim.node_vendor[int(n)].name for n in sim.port_node])
    for name in sim.topo.vendors:
        v = VENDORS[name]
        rows = np.flatnonzero(gpu_vendor == name)
        out += [(v.canonical(m), m, True, rows) for m in GPU_GAUGES + GPU_COUNTERS + DERIVED_COUNTERS
                if v.publishes(m, profile, FULL_ONLY, NVIDIA_NEVER)]
        rows = np.flatnonzero(port_vendor == name)
        out += [(v.canonical(m), m, False, rows) for m in PORT_GAUGES + PORT_COUNTERS if v.publishes_port(m)]
    return out


def chunk_to_batch(sim: Simulator, chunk: SimChunk, profile: str | None = None, as_table: bool = False) -> Batch:
    """A pipeline batch from a chunk (canonical names), time-major, without the file round trip; ``as_table``: its
    samples as the Table the pipeline reads (a tick's frame costs more to build and read than to judge)."""
    samples = chunk_samples(sim, chunk, profile)
    return Batch(samples=samples.table() if as_table else samples.frame(),
                 events=events_frame(chunk_event_rows(chunk)))


@dataclass
class ChunkSamples:
    """A chunk's samples as columns: stamps, entity and metric codes into the simulator's categorical dtypes (one
    object per simulator and profile, so the pipeline's per-name caches hit from tick to tick), values. The
    evaluation splits them into ticks as arrays (:func:`lab.evaluate.evaluate_simulation`)."""

    ts: np.ndarray
    entity: np.ndarray
    metric: np.ndarray
    value: np.ndarray
    entity_dtype: pd.CategoricalDtype
    metric_dtype: pd.CategoricalDtype

    def take(self, rows: np.ndarray | slice) -> ChunkSamples:
        """The rows ``rows`` (a mask, indices or a slice: a view then), in their order."""
        return ChunkSamples(self.ts[rows], self.entity[rows], self.metric[rows], self.value[rows], self.entity_dtype,
                            self.metric_dtype)

    def split(self, now: float) -> tuple[ChunkSamples, ChunkSamples]:
        """The rows stamped at or before ``now`` (or without a stamp) and the others, each in their order: the first
        rows and the rest, without a copy, when the rows come in the order of their stamps (a chunk's do)."""
        due = ~(self.ts > now)
        cut = int(np.count_nonzero(due))
        if due[:cut].all():
            return self.take(slice(0, cut)), self.take(slice(cut, None))
        return self.take(due), self.take(~due)

    def cuts(self, nows: np.ndarray) -> np.ndarray | None:
        """Where the rows stamped at or before each of ``nows`` (ascending) end, when the rows come in the order of
        their stamps (a simulator's do, across its chunks too: a step's jitter is under half a step); None when
        they do not (then :meth:`split` them)."""
        ts = self.ts
        if len(ts) > 1 and not (ts[1:] >= ts[:-1]).all():  # (False at a NaN stamp too)
            return None
        return np.searchsorted(ts, nows, side="right")

    def then(self, other: ChunkSamples) -> ChunkSamples:
        """These rows, then ``other``'s (of the same dtypes)."""
        if not len(self.ts):
            return other
        return ChunkSamples(np.concatenate([self.ts, other.ts]), np.concatenate([self.entity, other.entity]),
                            np.concatenate([self.metric, other.metric]), np.concatenate([self.value, other.value]),
                            self.entity_dtype, self.metric_dtype)

    def table(self) -> Table:
        """The samples as the pipeline reads them (ts, entity, metric, value), without a DataFrame: the name columns
        over the names a frame of them would give (the same objects, so the pipeline's caches are the same)."""
        return Table({"ts": self.ts, "entity": Names(self.entity, category_names(self.entity_dtype)),
                      "metric": Names(self.metric, category_names(self.metric_dtype)), "value": self.value})

    def frame(self) -> pd.DataFrame:
        """The samples frame the pipeline reads (ts, entity, metric, value)."""
        return frame({
            "ts": self.ts,
            "entity": pd.Categorical.from_codes(self.entity, dtype=self.entity_dtype, validate=False),
            "metric": pd.Categorical.from_codes(self.metric, dtype=self.metric_dtype, validate=False),
            "value": self.value,
        })


def chunk_samples(sim: Simulator, chunk: SimChunk, profile: str | None = None) -> ChunkSamples:
    """A chunk's samples in the order a trace of it holds them: by each exporter's scrape stamps when the scenario
    samples (lab.sim.observe), else by step."""
    profile = profile or sim.scenario.profile
    # One categorical dtype per simulator and profile: built once, and the same categories object every
    # tick, so the pipeline's per-name caches (detectors.schema.name_codes) hit.
    key = ("emission", profile)
    if key not in sim.batch_dtypes:
        families = emission(sim, profile)
        metrics = list(dict.fromkeys(f[0] for f in families))
        # (object categories: a str-dtype Index makes every read of a name column an Arrow round trip)
        sim.batch_dtypes[key] = (pd.CategoricalDtype(pd.Index(sim.gpu_ids + sim.port_ids, dtype=object)),
                                 pd.CategoricalDtype(pd.Index(metrics, dtype=object)),
                                 families, {m: i for i, m in enumerate(metrics)})
    entity_dtype, metric_dtype, families, metric_index = sim.batch_dtypes[key]
    n_g = len(sim.gpu_ids)
    obs = sim.observation
    stamps = {}
    if obs:
        stamps = {True: obs.stamps("dcgm", sim.gpu_node, chunk.ts), False: obs.stamps("node", sim.port_node, chunk.ts)}
    if stamps:
        ts, ent, met, value = _samples_by_stamp(chunk, families, metric_index, stamps, n_g)
    else:
        layouts = sim.batch_dtypes.setdefault(("layouts", profile), {})
        ts, ent, met, value = _samples_by_step(chunk, families, metric_index, n_g, layouts)
    return ChunkSamples(ts, ent, met, value, entity_dtype, metric_dtype)


def chunk_event_rows(chunk: SimChunk) -> list[tuple]:
    """A chunk's kernel lines as event rows (:data:`detectors.schema.EVENT_COLUMNS` order), as the kernel-log
    reader makes them."""
    rows = []
    for ts_line, node, line in chunk.lines:
        ev = parse_kernel_message(line)
        if ev is not None:
            rows.append((ts_line, node, ev.kind, ev.code, ev.severity, ev.message, ev.source or "kernel", ev.pci,
                         ev.device))
    return rows


def _family_arrays(chunk: SimChunk, family: tuple, n_g: int) -> tuple[np.ndarray, np.ndarray, int]:
    """A family's values and presence ([rows x steps]) and its first entity code."""
    _, m, is_gpu, only = family
    if is_gpu:
        arr, present, offset = chunk.gpu[m], chunk.gpu_emitted(), 0
        if m in STILL_REPORTED:
            present = np.ones_like(present) if chunk.gpu_sampled is None else chunk.gpu_sampled
    else:
        arr, present, offset = chunk.port[m], chunk.port_emitted(), n_g
    if only is not None:
        mask = np.zeros(len(present), dtype=bool)
        mask[only] = True
        present = present & mask[:, None]
    return arr, present, offset


def _samples_by_step(chunk: SimChunk, families: list, metric_index: dict, n_g: int, layouts: dict) -> tuple:
    """Every family's samples in time order, each step's in family order, then entity order: every family's rows
    stacked and read a step at a time (no sort: the chunk's steps are its times). ``layouts`` keeps the stacked rows'
    entity and metric codes, which depend only on the families' sizes."""
    values, presence = [], []
    for family in families:
        arr, present, _ = _family_arrays(chunk, family, n_g)
        values.append(arr)
        presence.append(present)
    sizes = tuple(len(a) for a in values)
    layout = layouts.get(sizes)
    if layout is None:
        entities = np.concatenate([np.arange(offset, offset + n) for offset, n in
                                   zip((0 if f[2] else n_g for f in families), sizes)])
        metrics = np.repeat(np.array([metric_index[f[0]] for f in families]), sizes)
        layout = (entities, metrics)
        if keeps_layout(len(entities)):  # (as the pipeline keeps its layouts: 37 MB at 100,000 accelerators)
            layouts[sizes] = layout
    entities, metrics = layout
    present, stacked = np.concatenate(presence), np.concatenate(values)
    if present.shape[1] == 1:  # one step (the closed loop's world): its rows in order, no transpose
        rows = np.flatnonzero(present[:, 0])
        return np.full(len(rows), chunk.ts[0]), entities[rows], metrics[rows], stacked[rows, 0]
    steps, rows = np.nonzero(present.T)
    return chunk.ts[steps], entities[rows], metrics[rows], stacked[rows, steps]


def _stamp_ranks(stamps: dict) -> dict:
    """Each source's stamps (``[rows x steps]``) as their ranks among all the chunk's stamps, equal stamps one rank: a
    stable sort of the samples by rank is the stable sort by stamp, of small integers (radix) instead of floats (a
    chunk has a few stamps a node and step, and tens of thousands of samples)."""
    keys = list(stamps)
    flat = [np.asarray(stamps[k]).ravel() for k in keys]
    uniq, inverse = np.unique(np.concatenate(flat), return_inverse=True)
    inverse = inverse.astype(np.int16 if len(uniq) < 2 ** 15 else np.int64)
    out, at = {}, 0
    for k, f in zip(keys, flat):
        out[k] = inverse[at:at + len(f)].reshape(np.shape(stamps[k]))
        at += len(f)
    return out


def _samples_by_stamp(chunk: SimChunk, families: list, metric_index: dict, stamps: dict, n_g: int) -> tuple:
    """Every family's samples in the order of their scrape stamps (each exporter's own, lab.sim.observe)."""
    parts_ts, parts_rank, parts_e, parts_m, parts_v = [], [], [], [], []
    ranks = _stamp_ranks(stamps)
    # The families share a few presence patterns and two exporters' stamps: each pattern's rows and each (pattern,
    # exporter)'s stamps, ranks and entity codes are taken once.
    where: dict[tuple, tuple[np.ndarray, ...]] = {}
    for family in families:
        arr, present, offset = _family_arrays(chunk, family, n_g)
        key = (present.tobytes(), present.shape, family[2])
        if key not in where:
            steps, rows = np.nonzero(present.T)  # step-major: already in time order within the metric
            where[key] = (steps, rows, stamps[family[2]][rows, steps], ranks[family[2]][rows, steps], rows + offset)
        steps, rows, ts, rank, entity = where[key]
        parts_ts.append(ts)
        parts_rank.append(rank)
        parts_e.append(entity)
        parts_m.append(np.full(len(rows), metric_index[family[0]]))
        parts_v.append(arr[rows, steps])
    ts = np.concatenate(parts_ts)
    order = np.argsort(np.concatenate(parts_rank), kind="stable")
    return (ts[order], np.concatenate(parts_e)[order], np.concatenate(parts_m)[order],
            np.concatenate(parts_v)[order])
