"""``raswarden train``: replay labelled traces, collect feature rows, fit the learned detectors, save a model.

Rows of entities that carry a fault or injected confounder label are kept at every tick while the label is
in force (from ``horizon_s`` before a fault's onset, whose rows may be positives, to an hour after its
failure; a confounder's own window); the rest of the fleet, and those entities at other times, are offered
every ``stride`` ticks with weight ``stride`` to a uniform reservoir of ``sample_cap`` rows per entity kind
(re-weighted to stand for all). Rows are kept as float32. So memory is bounded by the labelled rows and the
reservoir, not by the traces' length (a node labelled once for a 10-minute exporter gap is not kept at every
tick for the month), while every labelled minute is seen. The replay computes the feature frames only. The
model's metadata records the traces (name, labels digest, file sizes) as the training data fingerprint, the
row counts and, with ``--holdout``, the evaluation figures on traces it never saw.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from daemon import __version__
from daemon.evaluate import read_labels
from daemon.pipeline import Pipeline, PipelineConfig
from daemon.replay import replay
from daemon.trace import Trace
from detectors.evaluation import Fault
from detectors.features import FEATURES
from detectors.learned import TrainingSet, label_rows
from detectors.model import ModelBundle
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


def collect(paths: list[Path], interval_s: float = 30.0, stride: int = 10, progress=None,
            horizon_s: float = 12 * 3600.0, sample_cap: int = 400_000) -> Collected:
    """Feature rows of every trace (see the module docstring)."""
    sets = {kind: TrainingSet(kind, sample_cap) for kind in FEATURES}
    labels: dict[int, list[Fault]] = {}
    racks: dict[int, object] = {}
    for t, path in enumerate(paths):
        faults = read_labels(path, "train on")
        labels[t] = faults
        # The workload's own confounders (load steps, half-used nodes) touch nearly every node: they are
        # sampled with the fleet, not kept at every tick.
        windows = label_windows(faults, horizon_s)
        state = {"tick": 0}

        def on_tick(now: float, pipeline: Pipeline, t=t, windows=windows, state=state) -> None:
            frames = pipeline.features.frames if pipeline.features else {}
            every = state["tick"] % stride == 0
            state["tick"] += 1
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

        # Only the features: the detectors, health and incidents a replay runs are half its time and no
        # training row reads them.
        result = replay([path], config=PipelineConfig(interval_s=interval_s, features_only=True), on_tick=on_tick)
        racks[t] = result.pipeline.mapper.topology.rack_of
        if progress:
            progress(path, result.stats)
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


def train(paths: list[Path], out: Path, interval_s: float = 30.0, stride: int = 10,
          horizon_s: float = 12 * 3600.0, progress=None) -> ModelBundle:
    """Collect, fit and save; returns the bundle (its ``meta`` holds the figures)."""
    started = time.perf_counter()
    collected = collect(paths, interval_s, stride, progress, horizon_s)
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
        "fit_s": round(time.perf_counter() - started - collect_s, 1),
    }
    bundle = ModelBundle(detectors, meta)
    bundle.save(out)
    return bundle
