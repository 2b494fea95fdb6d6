"""What the learned detectors share: training rows from labelled traces, the feature transform, reasons in
an operator's words, and the scoring cadence with persistence.

Training rows (:class:`TrainingSet`) are feature-frame rows with their time. :func:`label_rows` marks each
row against the ground truth (docs/architecture.md §8 labels): *positive* when its entity (or the node or rack
holding it) carries a non-benign fault whose failure is at most ``horizon_s`` ahead and whose onset has
passed; *healthy* when no non-benign fault touches the entity at all; rows of a faulty entity outside that
window (before the horizon, after the failure) are left out of training rather than called healthy.
Confounders stay in as healthy rows: the models must learn that a reboot or a warm slot is no fault.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

import numpy as np
from threadpoolctl import ThreadpoolController

from detectors.evaluation import Fault
from detectors.features import FEATURES, RATE_HORIZONS, FeatureFrame
from detectors.contract import Evidence, TickInput
from detectors.schema import State, within

# Feature name fragments -> (category, words); the first match wins.
_WORDS = (
    ("ecc_sbe", "gpu_memory", "HBM correctable ECC"),
    ("ecc_dbe", "gpu_memory", "double-bit ECC"),
    ("row_remap", "gpu_memory", "row remaps"),
    ("pcie_replay", "gpu_bus", "PCIe replays"),
    ("aer", "gpu_bus", "PCIe AER events"),
    ("nvlink", "scaleup_link", "scale-up link CRC errors (NVLink, XGMI, HCCS)"),
    ("hbm_temp", "gpu_thermal", "HBM temperature"),
    ("gpu_temp", "gpu_thermal", "GPU temperature"),
    ("throttle", "gpu_thermal", "thermal throttling"),
    ("sm_clock", "gpu_compute", "SM clock"),
    ("power", "gpu_compute", "power"),
    ("gpu_util", "gpu_compute", "utilisation"),
    ("xid_hardware", "gpu_compute", "hardware Xids"),
    ("xid_application", "application", "application Xids"),
    ("symbol_error", "fabric_link", "symbol errors"),
    ("link_error_recovery", "fabric_link", "link error recoveries"),
    ("link_downed", "fabric_link", "link down events"),
    ("rcv_errors", "fabric_link", "receive errors"),
    ("port_state", "fabric_link", "port state"),
    ("link_events", "fabric_link", "link events"),
)


# Features that read a steady property of a slot as much as a fault (a warm slot, a GPU that draws a little
# more), and temperatures below the limits the rules judge (a warm slot's HBM at 90 °C under load is in
# spec): they explain an alarm but never support one alone (see LearnedDetector.support_z). A fault shows as
# their change over the GPU's own baseline, or as throttling.
STEADY_OFFSETS = frozenset({"gpu_temp_c_peer_residual", "hbm_temp_c_peer_residual", "power_w_peer_residual",
                            "gpu_temp_c_level", "hbm_temp_c_level"})
# Features that follow the job rather than the hardware: utilisation, power and clocks, and how fast they and
# the temperatures move, rise and fall with every job start and stop on the whole node. They explain an alarm
# but never support one (a GPU's own clocks or power against its peers' do, through the peer features).
LOAD_FOLLOWING = frozenset({
    "gpu_util_pct_level", "gpu_util_pct_slope_per_h", "power_w_level", "power_w_slope_per_h",
    "sm_clock_mhz_level", "sm_clock_mhz_slope_per_h", "gpu_temp_c_slope_per_h", "hbm_temp_c_slope_per_h",
})
# An alarm's support must also lie outside the range of all but this share of the healthy training rows at
# either end: a rare-event rate (two symbol errors in an hour on a healthy link) is many robust scales from a
# fleet whose median is 0, and no fault.
HEALTHY_TAIL = 1e-4
# A counter rate supports an alarm only with at least this many errors behind it (the rate times its EWMA's
# half-life over ln 2): two stray symbol errors within a quarter of an hour are Poisson noise that a
# 100,000-port fleet sees every day, whatever a model learned from a fault that starts at 5/h.
MIN_EVENTS = 3.0


def _events_per_rate(names: tuple[str, ...]) -> np.ndarray:
    """Per feature, the errors behind a rate of 1/h (NaN for features that are not counter rates)."""
    half = {h: s / 3600.0 for h, s in RATE_HORIZONS}
    return np.array([half[n.rsplit("_", 1)[1]] / np.log(2) if "_per_h_" in n else np.nan for n in names])


def describe(name: str) -> tuple[str, str]:
    """Category and operator words for a feature name."""
    for fragment, category, words in _WORDS:
        if fragment in name:
            suffix = name.rsplit("_", 1)[-1]
            if "_per_h_" in name:
                return category, f"{words} rate over {suffix}"
            if name.endswith("_change"):
                return category, f"{words} against peers, change over its own 6 h baseline"
            if name.endswith("_slope_per_h"):
                return category, f"{words} trend per hour"
            if "peer" in name:
                return category, f"{words} against peers"
            if "_events_" in name:
                return category, f"{words} in {suffix}"
            return category, words
    return "gpu_compute", name


def transform(X: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    """Signed log of rates and event counts (heavy-tailed), other features as they are."""
    out = X.copy()
    heavy = np.array([("_per_h_" in n) or ("_events_" in n) for n in names])
    out[:, heavy] = np.sign(out[:, heavy]) * np.log1p(np.abs(out[:, heavy]))
    return out


class TrainingSet:
    """Feature rows of one entity kind collected from training traces.

    Rows given to :meth:`add` are all kept; rows given to :meth:`sample` (the healthy fleet's, which a month of
    a supernode gives by the million) go into a uniform reservoir of at most ``sample_cap`` rows, re-weighted to
    stand for all that were offered, so memory stays bounded however long the traces are.
    """

    def __init__(self, kind: str, sample_cap: int = 400_000, seed: int = 0):
        self.kind = kind
        self.sample_cap = sample_cap
        self._rng = np.random.default_rng(seed)
        self._kept: list[tuple[np.ndarray, ...]] = []  # (X, entities, ts, weight, trace)
        self._pool: list[tuple[np.ndarray, ...]] = []  # the same plus each row's random key
        self._pool_rows = 0
        self.offered_rows = 0
        self._offered_weight = 0.0

    def add(self, frame: FeatureFrame, pick: np.ndarray, weight: float, trace: int) -> None:
        """Keep these rows of the frame."""
        if len(pick):
            self._kept.append(self._rows(frame, pick, weight, trace))

    def sample(self, frame: FeatureFrame, pick: np.ndarray, weight: float, trace: int) -> None:
        """Offer these rows of the frame to the reservoir."""
        if not len(pick):
            return
        self.offered_rows += len(pick)
        self._offered_weight += weight * len(pick)
        self._pool.append(self._rows(frame, pick, weight, trace) + (self._rng.random(len(pick)),))
        self._pool_rows += len(pick)
        if self._pool_rows > 2 * self.sample_cap:
            self._thin()

    def merge(self, other: TrainingSet) -> None:
        """Take in another set's rows (a part of the traces collected elsewhere): its kept rows, and its reservoir
        into this one (the smallest keys of the two are the smallest of all the rows both were offered)."""
        self._kept += other._kept
        self._pool += other._pool
        self._pool_rows += other._pool_rows
        self.offered_rows += other.offered_rows
        self._offered_weight += other._offered_weight
        if self._pool_rows > 2 * self.sample_cap:
            self._thin()

    @staticmethod
    def _rows(frame: FeatureFrame, pick: np.ndarray, weight: float, trace: int) -> tuple[np.ndarray, ...]:
        return (frame.X[pick].astype(np.float32),  # half the memory of a month of rows; the fit is float32
                frame.entities[pick], np.full(len(pick), frame.now), np.full(len(pick), weight),
                np.full(len(pick), trace))

    def _thin(self) -> None:
        """Keep the ``sample_cap`` pooled rows with the smallest keys: a uniform sample of all offered."""
        cols = [np.concatenate(c) for c in zip(*self._pool)]
        if len(cols[0]) > self.sample_cap:
            keep = np.sort(np.argpartition(cols[-1], self.sample_cap - 1)[:self.sample_cap])
            cols = [c[keep] for c in cols]
        self._pool = [tuple(cols)]
        self._pool_rows = len(cols[0])

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(X, entities, ts, weight, trace)`` of the kept rows, then the reservoir's (weighted up)."""
        width = len(FEATURES[self.kind])
        parts = list(self._kept)
        if self._pool:
            self._thin()
            X, ents, ts, w, trace, _ = self._pool[0]
            parts.append((X, ents, ts, w * (self._offered_weight / w.sum()), trace))
        if not parts:
            return np.empty((0, width)), np.empty(0, object), np.empty(0), np.empty(0), np.empty(0, int)
        return tuple(np.concatenate(c) for c in zip(*parts))


def label_rows(entities: np.ndarray, ts: np.ndarray, faults: Iterable[Fault], horizon_s: float,
               rack_of=lambda node: None) -> tuple[np.ndarray, np.ndarray]:
    """``(positive, healthy)`` masks for rows (see the module docstring)."""
    positive = np.zeros(len(entities), dtype=bool)
    touched = np.zeros(len(entities), dtype=bool)
    nodes = np.array([e.split("/", 1)[0] for e in entities], dtype=object)
    racks = np.array([rack_of(n) for n in nodes], dtype=object)
    for f in faults:
        if f.benign:
            continue
        mine = (entities == f.entity) | (nodes == f.entity) | (racks == f.entity)
        if not mine.any():
            continue
        touched |= mine
        end = f.failure if f.failure is not None else np.inf
        positive |= mine & (ts >= max(f.onset, end - horizon_s)) & (ts < end)
    return positive, ~touched


class Persistence:
    """Scores each entity every ``every`` ticks and raises evidence only after ``k`` scorings in a row at or
    above the threshold; memory is the entities above it.

    The entities are scored in slices of at least ``min_batch`` rows, one slice per tick, round robin (a
    large fleet's cost is spread over the ticks; a small one is scored in one call every ``every`` ticks,
    because a tree ensemble's cost per call is mostly per tree, whatever the rows).
    """

    def __init__(self, every: int, k: int, min_batch: int = 4096):
        self.every = max(1, every)
        self.k = k
        self.min_batch = max(1, min_batch)
        self.tick = 0
        self.above: dict[str, int] = {}
        self.evidence: dict[str, Evidence] = {}
        self.scored_at: dict[str, int] = {}

    def slice(self, frame: FeatureFrame) -> np.ndarray:
        """Rows of the frame to score this tick."""
        if not len(frame.rows):
            return np.empty(0, dtype=np.int64)
        slices = min(self.every, -(-(int(frame.rows.max()) + 1) // self.min_batch))
        phase = self.tick % self.every
        if phase >= slices:
            return np.empty(0, dtype=np.int64)
        return np.flatnonzero(frame.rows % slices == phase)

    def record(self, entities: np.ndarray, alarm: np.ndarray, make) -> None:
        """Update the run lengths of the scored entities; ``make(i)`` builds the evidence of row ``i``."""
        for i in np.flatnonzero(alarm):
            e = entities[i]
            n = self.above.get(e, 0) + 1
            self.above[e] = n
            self.scored_at[e] = self.tick
            if n >= self.k:
                self.evidence[e] = make(i)
        for e in entities[~alarm]:
            if e in self.above:
                self._forget(e)

    def forget_within(self, scope: str) -> None:
        """Drop the run lengths and evidence of the entities in ``scope`` (a node's or one part's)."""
        for e in [e for e in self.above if within(e, scope)]:
            self._forget(e)

    def _forget(self, e: str) -> None:
        del self.above[e]
        self.scored_at.pop(e, None)
        self.evidence.pop(e, None)

    def advance(self) -> list[Evidence]:
        """The evidence in force this tick; an entity no longer scored (gone from the frames) drops out."""
        for e in [e for e, t in self.scored_at.items() if self.tick - t > 2 * self.every]:
            self._forget(e)
        self.tick += 1
        return list(self.evidence.values())


# Scoring a slice of a few hundred rows per tick: OpenMP threads cost more than they give there (and
# spin against the daemon's other work), so per-tick scoring runs on one thread.
_THREADS = ThreadpoolController()


class LearnedDetector(ABC):
    """Base of the detectors that score feature frames with a fitted model per entity kind.

    Subclasses implement ``_score(kind, Xt) -> scores`` and ``_level(kind, score)``, and name their own
    per-kind fitted dicts in ``fitted_per_kind``. Evidence names the features furthest from the healthy
    training fleet (robust z) with their values and that fleet's median.
    """

    name = "learned"
    needs_features = True
    inputs: dict[str, str] = {}  # no metric of its own: it reads the features (detectors.features)
    fitted_per_kind: tuple[str, ...] = ()  # a subclass's own fitted attributes, one dict entry per kind
    # An alarm also needs one feature this many robust scales from the healthy fleet's median (None: no such
    # gate). A supervised model can key on a pattern of small deviations (a load step, a clock wobble) that
    # no operator would call a fault; held-out faults sat 19 or more scales out, such false alarms near 3.
    min_support_z: float | None = None
    # No alarm on an accelerator whose load changed less than this long ago: its smoothed levels are still
    # between idle and busy (a clock half-way up with utilisation past 50 % looks like fail-slow).
    min_load_age_s: float = 1200.0

    def __init__(self, score_every_ticks: int = 10, persist: int = 3):
        self.score_every_ticks = score_every_ticks
        self.persist = persist

    def _start(self) -> None:
        """Create the fitted state on the first ``fit`` (kinds are fitted one call each)."""
        for attr in ("models_", "thresholds_", "healthy_median_", "healthy_scale_", "healthy_range_") + \
                self.fitted_per_kind:
            if not hasattr(self, attr):
                setattr(self, attr, {})

    @property
    def threshold_(self) -> float:
        """The lowest of the per-kind thresholds (``inf`` before any kind is fitted)."""
        return min(self.thresholds_.values()) if getattr(self, "thresholds_", None) else float("inf")

    def _fit_reference(self, kind: str, X: np.ndarray) -> None:
        """Median, robust scale and extreme quantiles of the healthy fleet's features, for reasons and support."""
        med = np.nanmedian(X, axis=0) if len(X) else np.zeros(X.shape[1])
        med = np.where(np.isfinite(med), med, 0.0)
        q75, q25 = (np.nanpercentile(X, 75, axis=0), np.nanpercentile(X, 25, axis=0)) if len(X) else (med, med)
        scale = np.where(np.isfinite(q75 - q25), (q75 - q25) / 1.349, 0.0)
        spread = np.nanstd(X, axis=0) if len(X) else np.zeros(X.shape[1])
        # Rare-event features have IQR 0 in healthy fleets: fall back to the standard deviation, then 1.
        scale = np.where(scale > 0, scale, np.where(np.isfinite(spread) & (spread > 0), spread, 1.0))
        self.healthy_median_[kind] = med
        self.healthy_scale_[kind] = scale
        if len(X):
            low, high = np.nanquantile(X, [HEALTHY_TAIL, 1.0 - HEALTHY_TAIL], axis=0)
            self.healthy_range_[kind] = (np.where(np.isfinite(low), low, med), np.where(np.isfinite(high), high, med))

    def support_z(self, kind: str, X: np.ndarray) -> np.ndarray:
        """Per row, the largest distance of a supporting feature from the healthy fleet's median, in robust
        scales; a feature supports only outside the healthy fleet's range (:data:`HEALTHY_TAIL`), and a
        counter rate only with :data:`MIN_EVENTS` errors behind it.

        Steady offsets against peers (:data:`STEADY_OFFSETS`) are no support: a GPU in a warm slot sits
        above its peers from the day it was installed. Their change over the GPU's own baseline is. Nor is
        what follows the job (:data:`LOAD_FOLLOWING`): a job start ramps the clocks of every GPU of the node.
        """
        med, scale = self.healthy_median_[kind], self.healthy_scale_[kind]
        z = np.abs(np.where(np.isfinite(X), (X - med) / scale, 0.0))
        context = [i for i, n in enumerate(FEATURES[kind]) if n in STEADY_OFFSETS or n in LOAD_FOLLOWING]
        z[:, context] = 0.0
        per_rate = _events_per_rate(FEATURES[kind])
        rates = np.flatnonzero(np.isfinite(per_rate))
        z[:, rates] = np.where(X[:, rates] * per_rate[rates] >= MIN_EVENTS, z[:, rates], 0.0)
        if kind in self.healthy_range_:  # models saved before the range was kept: the scales alone
            low, high = self.healthy_range_[kind]
            z[(X >= low) & (X <= high)] = 0.0
        return z.max(axis=1)

    def reasons(self, kind: str, x: np.ndarray, score: float, top: int = 3) -> tuple[str, list[str]]:
        """The category of the strongest deviation and up to ``top`` reasons."""
        names = FEATURES[kind]
        med, scale = self.healthy_median_[kind], self.healthy_scale_[kind]
        z = np.abs(np.where(np.isfinite(x), (x - med) / scale, 0.0))
        order = [i for i in np.argsort(-z) if z[i] >= 3.0][:top]
        if not order:
            order = list(np.argsort(-z)[:1])
        category = describe(names[order[0]])[0]
        parts = []
        for i in order:
            _, words = describe(names[i])
            parts.append(f"{words} {_fmt(x[i])} (healthy fleet {_fmt(med[i])})")
        return category, [f"{self.name} score {score:.2f} over {self.thresholds_.get(kind, 0):.2f}: " +
                          "; ".join(parts)]

    def decision_function(self, X: np.ndarray, kind: str = "accelerator") -> np.ndarray:
        """Scores of raw feature rows of ``kind`` (higher = worse; compare with ``thresholds_[kind]``)."""
        return self._score(kind, transform(np.asarray(X, dtype=float), FEATURES[kind]))

    @abstractmethod
    def _level(self, kind: str, score: float) -> State:
        """The health level of evidence with this score (at or above the kind's threshold)."""

    @abstractmethod
    def _score(self, kind: str, Xt: np.ndarray) -> np.ndarray:
        """Scores of transformed feature rows of ``kind``, higher = worse."""

    def restore(self, flagged: set[str]) -> None:
        """Nothing to restore: scoring starts again from the features, and health keeps a restarted daemon's
        states until they are clean for as long as they must be."""
        return None  # a deliberate no-op of the contract, not an abstract method

    def steady_until(self, now: float) -> float:
        """Never: the features move every tick (the pipeline runs every tick while a learned detector does)."""
        return now

    def forget(self, scope: str) -> None:
        """Drop the run lengths above the threshold of the entities in ``scope`` (replaced; the features they are
        scored on forget their past in :meth:`detectors.features.FeatureState.forget`)."""
        if hasattr(self, "_persist"):
            self._persist.forget_within(scope)

    def update(self, tick: TickInput) -> list[Evidence]:
        self._start()
        if not hasattr(self, "_persist"):
            self._persist = Persistence(self.score_every_ticks, self.persist)
        p = self._persist
        for kind, frame in (tick.features or {}).items():
            if kind not in self.models_ or not len(frame.entities):
                continue
            rows = p.slice(frame)
            if not len(rows):
                continue
            X = frame.X[rows]
            with _THREADS.limit(limits=1, user_api="openmp"):
                scores = self._score(kind, transform(X, frame.names))
            alarm = scores >= self.thresholds_[kind]
            if frame.load_age_s is not None and alarm.any():
                alarm &= ~(frame.load_age_s[rows] < self.min_load_age_s)  # NaN (never seen): no objection
            if self.min_support_z is not None and alarm.any():
                hit = np.flatnonzero(alarm)
                alarm[hit] = self.support_z(kind, X[hit]) >= self.min_support_z
            ents = frame.entities[rows]

            def make(i: int, kind=kind, X=X, scores=scores, ents=ents) -> Evidence:
                category, reasons = self.reasons(kind, X[i], float(scores[i]))
                return Evidence(ents[i], self._level(kind, float(scores[i])), category, reasons, detector=self.name,
                                score=float(min(1.0, scores[i])))

            p.record(ents, alarm, make)
        return p.advance()


def _fmt(v: float) -> str:
    if not np.isfinite(v):
        return "n/a"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.1f}"
    return f"{v:.2g}"
