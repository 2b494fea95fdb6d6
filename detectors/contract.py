"""The detector contract: what every detector reads in a tick, what it says, and what the pipeline calls on it.

A detector is a streaming estimator in scikit-learn's manner (``__init__`` stores its parameters, ``fit``
learns what it needs up front and returns the detector, fitted attributes end in ``_``). Each tick the pipeline
hands every detector one :class:`TickInput` and collects the :class:`Evidence` it returns; health, not the
detector, turns evidence into states. :class:`Detector` is the whole interface; ``tests/detectors/test_contract.py``
checks that every registered detector implements it, so the pipeline calls it without probing.

``decision_function`` is not part of it: it is an estimator's score of a feature matrix, which only the learned
detectors have (:class:`detectors.learned.LearnedDetector`); a streaming detector's score of an entity is the
``score`` of its evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

import pandas as pd

from detectors.schema import State
from detectors.table import Table

TICK_S = 30.0
"""The default tick, in seconds: the daemon's ``[service] interval_s``, replay's, evaluation's and training's
``--interval``, the closed loop's step. The one place it is written (the starter config names it for operators)."""

_SCORE = {State.FAILED: 1.0, State.SUBHEALTHY: 0.75, State.SUSPECT: 0.4}


@dataclass
class Evidence:
    """What one detector says of one entity in one tick."""

    entity: str
    level: State
    category: str
    reasons: list[str]
    detector: str = "rules"
    hard: bool = False
    score: float = field(default=0.0)
    latched: bool = False
    """Held by its detector once raised: a discrete event or an alarm over a window held for a while, or a state the
    detector leaves only well under where it entered it (the peer detector's hot GPU, a Schmitt trigger on a smoothed
    residual). It cannot flicker from tick to tick, so health enters its level at once instead of waiting for a
    second tick of it; a plain level (a temperature over a limit) waits."""

    def __post_init__(self) -> None:
        if not self.score:
            self.score = _SCORE.get(self.level, 0.0)


@dataclass
class TickInput:
    """What a detector reads in one tick: events, counter increases, gauge levels, and the features."""

    now: float
    events: pd.DataFrame
    # detectors.table.Table in the pipeline (a DataFrame serves too): read columns as np.asarray(t[c]), name_codes
    increases: pd.DataFrame | Table  # entity, metric, increase, resets
    gauges: pd.DataFrame | Table  # entity, metric, last, max (and mean: the tick's finite samples, where the pipeline
    # made it)
    grace_nodes: frozenset[str] = frozenset()
    features: dict | None = None  # kind -> detectors.features.FeatureFrame, when a detector needs them
    models: Mapping[str, str] | None = None  # accelerator -> model from the telemetry (peer groups never mix)
    racks: Mapping[str, str] | None = None  # node -> rack from the topology (a rack's GPUs share its coolant)


@runtime_checkable
class Detector(Protocol):
    """Every detector the pipeline runs (see the module docstring)."""

    #: the detector's name in evidence, findings and the registry
    name: ClassVar[str]
    #: it reads ``TickInput.features``: the pipeline keeps the streaming feature state while one such runs
    needs_features: ClassVar[bool]
    #: canonical metrics it reads, each with what for (so a replay or the service can say which sources leave
    #: it blind: stock dcgm-exporter exports no ECC counters); the learned detectors read the features instead
    inputs: ClassVar[Mapping[str, str]]

    def fit(self, X=None, y=None) -> Detector:
        """Learn what is needed up front (thresholds, catalogs, a fitted model) and return the detector."""
        ...

    def update(self, tick: TickInput) -> list[Evidence]:
        """Fold one tick in; the evidence of this tick."""
        ...

    def forget(self, scope: str) -> None:
        """Drop what is remembered of the entities in ``scope`` (:func:`detectors.schema.within`): a node whose parts
        were replaced, or one part (a GPU replaced in its slot: its neighbours keep their records)."""
        ...

    def restore(self, flagged: set[str]) -> None:
        """A restarted daemon's entities that were sub-healthy or worse before it stopped (from the store)."""
        ...

    def steady_until(self, now: float) -> float:
        """Until when (inclusive) the evidence of the update at ``now`` stands without new input: an update at a
        later time up to then, with the same held readings and no sample, event or counter increase, would return
        the same evidence and change nothing a later update depends on. The pipeline does not run the detector on
        such an idle tick (:class:`daemon.judgement.idle_ticks.IdleTicks`); ``now`` itself: run it every tick."""
        ...
