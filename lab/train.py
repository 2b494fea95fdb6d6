"""``raswarden train``: replay labelled traces, collect feature rows, fit the learned detectors, save a model.

Rows of entities that carry a fault or injected confounder label are kept at every tick while the label is
in force (from ``horizon_s`` before a fault's onset, whose rows may be positives, to an hour after its
failure; a confounder's own window); the rest of the fleet, and those entities at other times, are offered
every ``stride`` ticks with weight ``stride`` to a uniform reservoir of ``sample_cap`` rows per entity kind
(re-weighted to stand for all). Rows are kept as float32. So memory is bounded by the labelled rows and the
reservoir, not by the traces' length (a node labelled once for a 10-minute exporter gap is not kept at every
tick for the month), while every labelled minute is seen. The replay computes the feature frames only.

With ``jobs`` > 1 the traces are collected side by side, and a trace longer than its share of the processes is
cut into parts of time (at tick boundaries, from its Parquet statistics), each replayed from a day before its
start so its features are warmed up again (``WARMUP_S``); the fleet's sampled ticks are chosen by the clock, so
the rows are the same however the trace is cut, and the parts' reservoirs merge into one. The
model's metadata records the traces (name, labels digest, file sizes) as the training data fingerprint, the
row counts and, with ``--holdout``, the evaluation figures on traces it never saw.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from daemon import __version__
from lab.evaluate import read_labels
from daemon.judgement.pipeline import Pipeline, PipelineConfig
from daemon.replay import replay
from daemon.ingest.trace import Trace
from detectors.evaluation import Fault
from detectors.features import FEATURES
from detectors.contract import TICK_S
from detectors.learned import TrainingSet, label_rows
from detectors.bundle import ModelBundle
from detectors.multivariate import MultivariateDetector
from detectors.predictor import FailurePredictor


def fingerprint(paths: list[Path]) -> dict:
    """What the model was trained on: per trace its labels' digest and its files' sizes."""
    out = []
    for path in paths:
        trace = Trace.discover([path])
        labels = trace.labels_path.read_bytes() if trace.labels_path else b""
        files = sorted((p.name, p.stat().st_size) for p, _ in trace.files)
        out.append({"trace": str(path), "labels_sha256": hashlib.sha256(labels).hexdigest(), "files": files})
    digest = hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()
    return {"sha256": digest, "traces": out}


@dataclass
class Collected:
    sets: dict[str, TrainingSet]
    labels: dict[int, list[Fault]]
    rack_of: dict[int, object]


def label_windows(faults: list[Fault], horizon_s: float) -> list[tuple[str, float, float]]:
    """(entity, from, to): when a label's entity is kept at every tick (see the module docstring)."""
    out = []
    for f in faults:
        if f.template == "workload":
            continue
        if f.benign:
            out.append((f.entity, f.onset, f.failure if f.failure is not None else f.onset + 3600.0))
        else:
            out.append((f.entity, f.onset - horizon_s, (f.failure if f.failure is not None else np.inf) + 3600.0))
    return out


# A part of a trace replayed on its own starts this long before the rows it keeps: the features' memory (6-hour
# baselines, 24-hour event counts) is warmed up again from the data before it.
WARMUP_S = 24 * 3600.0


def segments(path: Path, parts: int, warmup_s: float = WARMUP_S,
             interval_s: float = TICK_S) -> list[tuple[tuple[float, float] | None, float, float]]:
    """``(replay window, keep ticks after, keep ticks up to)`` of each part of a trace cut into ``parts`` stretches
    of time at tick boundaries (one part, the whole trace, when its span is unknown or too short to be worth the
    warm-up). A tick ``now`` holds the samples of ``(now - interval_s, now]``, and so does the window."""
    span = Trace.discover([path]).sample_span() if parts > 1 else None
    if span is None or span[1] - span[0] < 4 * parts * warmup_s:
        return [(None, -np.inf, np.inf)]
    cuts = [math.floor(c / interval_s) * interval_s for c in np.linspace(span[0], span[1], parts + 1)[1:-1]]
    bounds = [-np.inf, *cuts, np.inf]
    return [((lo - warmup_s, hi), lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def _collect_part(path: str, t: int, window: tuple[float, float] | None, keep_after: float, keep_until: float,
                  interval_s: float, stride: int, horizon_s: float, sample_cap: int, seed: int):
    """Feature rows of one part of one trace (see the module docstring): its training sets and replay stats."""
    faults = read_labels(Path(path), "train on")
    # The workload's own confounders (load steps, half-used nodes) touch nearly every node: they are sampled with
    # the fleet, not kept at every tick.
    windows = label_windows(faults, horizon_s)
    sets = {kind: TrainingSet(kind, sample_cap, seed) for kind in FEATURES}

    def on_tick(now: float, pipeline: Pipeline) -> None:
        if not keep_after < now <= keep_until:  # the warm-up of a later part, or past the part's end
            return
        frames = pipeline.features.frames if pipeline.features else {}
        every = int(round(now / interval_s)) % stride == 0  # by the clock: the same ticks however the trace is cut
        labelled = np.array(sorted({e for e, a, b in windows if a <= now <= b}), dtype=object)
        for kind, frame in frames.items():
            if not len(frame.entities):
                continue
            if len(labelled):
                nodes = np.array([e.split("/", 1)[0] for e in frame.entities], dtype=object)
                mine = np.isin(frame.entities, labelled) | np.isin(nodes, labelled)
            else:
                mine = np.zeros(len(frame.entities), dtype=bool)
            sets[kind].add(frame, np.flatnonzero(mine), 1.0, t)
            if every:
                sets[kind].sample(frame, np.flatnonzero(~mine), float(stride), t)

    # Only the features: the detectors, health and incidents a replay runs are half its time and no training row
    # reads them.
    result = replay([path], config=PipelineConfig(interval_s=interval_s, features_only=True), on_tick=on_tick,
                    window=window)
    return sets, result.stats


def collect(paths: list[Path], interval_s: float = TICK_S, stride: int = 10, progress=None,
            horizon_s: float = 12 * 3600.0, sample_cap: int = 400_000, jobs: int = 1,
            warmup_s: float = WARMUP_S) -> Collected:
    """Feature rows of every trace (see the module docstring), ``jobs`` processes at once: the traces side by side,
    and a trace longer than its share of them cut into parts of time, each warmed up on the day before it."""
    per_trace = max(1, -(-jobs // max(1, len(paths))))
    tasks = [(str(path), t, window, after, until, interval_s, stride, horizon_s, sample_cap, 1000 * t + i)
             for t, path in enumerate(paths)
             for i, (window, after, until) in enumerate(segments(path, per_trace, warmup_s, interval_s))]
    labels = {t: read_labels(path, "train on") for t, path in enumerate(paths)}
    racks = {t: Trace.discover([path]).topology().rack_of for t, path in enumerate(paths)}
    sets = {kind: TrainingSet(kind, sample_cap) for kind in FEATURES}

    def take(task, part) -> None:
        part_sets, stats = part
        for kind, ts_set in part_sets.items():
            sets[kind].merge(ts_set)
        if progress:
            progress(Path(task[0]), stats)

    if jobs <= 1 or len(tasks) == 1:
        for task in tasks:
            take(task, _collect_part(*task))
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
            for task, part in zip(tasks, pool.map(_collect_part, *zip(*tasks))):
                take(task, part)
    return Collected(sets, labels, racks)


def fit(collected: Collected, horizon_s: float = 12 * 3600.0, max_negatives: int = 200_000) -> tuple[list, dict]:
    """Fit the multivariate detector and the failure predictor on every kind with enough rows."""
    mv, pred = MultivariateDetector(), FailurePredictor(horizon_s=horizon_s)
    summary: dict = {}
    for kind, ts_set in collected.sets.items():
        X, ents, ts, w, trace = ts_set.arrays()
        if not len(X):
            continue
        positive = np.zeros(len(X), dtype=bool)
        healthy = np.zeros(len(X), dtype=bool)
        for t, faults in collected.labels.items():
            rows = trace == t
            p, h = label_rows(ents[rows], ts[rows], faults, horizon_s, collected.rack_of[t])
            positive[rows], healthy[rows] = p, h
        keep = positive | healthy
        # The predictor needs the negatives' variety, not all of them: at most ``max_negatives`` rows,
        # re-weighted to stand for the rest.
        neg = np.flatnonzero(healthy & ~positive)
        if len(neg) > max_negatives:
            rng = np.random.default_rng(0)
            drop = rng.choice(neg, len(neg) - max_negatives, replace=False)
            keep[drop] = False
            w = w.copy()
            w[neg] *= len(neg) / max_negatives
        row = {"rows": int(len(X)), "positive_rows": int(positive.sum()), "healthy_rows": int(healthy.sum()),
               "fleet_rows_offered": ts_set.offered_rows}
        started = time.perf_counter()
        mv.fit(X[healthy], kind=kind, names=FEATURES[kind], sample_weight=w[healthy])
        row["multivariate_threshold"] = round(mv.thresholds_[kind], 4)
        row["multivariate_subhealthy"] = round(mv.subhealthy_[kind], 4)
        if positive.any():
            pred.fit(X[keep], positive[keep].astype(int), kind=kind, names=FEATURES[kind], sample_weight=w[keep],
                     groups=trace[keep], healthy=healthy[keep])
            if kind in pred.thresholds_:
                row["predictor_threshold"] = round(pred.thresholds_[kind], 4)
            row["predictor_out_of_fold"] = pred.out_of_fold_.get(kind)
        row["fit_s"] = round(time.perf_counter() - started, 1)
        summary[kind] = row
    detectors = [mv] + ([pred] if pred.models_ else [])
    return detectors, summary


def train(paths: list[Path], out: Path, interval_s: float = TICK_S, stride: int = 10,
          horizon_s: float = 12 * 3600.0, progress=None, jobs: int = 1) -> ModelBundle:
    """Collect (``jobs`` processes at once), fit and save; returns the bundle (its ``meta`` holds the figures)."""
    started = time.perf_counter()
    collected = collect(paths, interval_s, stride, progress, horizon_s, jobs=jobs)
    collect_s = time.perf_counter() - started
    detectors, summary = fit(collected, horizon_s)
    meta = {
        "raswarden": __version__,
        "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "interval_s": interval_s,
        "horizon_s": horizon_s,
        "stride": stride,
        "training_data": fingerprint(paths),
        "training": summary,
        "collect_s": round(collect_s, 1),
        "collect_jobs": jobs,
        "fit_s": round(time.perf_counter() - started - collect_s, 1),
    }
    bundle = ModelBundle(detectors, meta)
    bundle.save(out)
    return bundle
