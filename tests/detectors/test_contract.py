"""Every registered detector follows the shared interface (scikit-learn conventions, docs/architecture.md §5)."""

import inspect

import pandas as pd
import pytest

from detectors.registry import DETECTORS, LEARNED, build
from detectors.contract import Detector, Evidence, TickInput
from detectors.schema import events_frame

EMPTY = TickInput(30.0, events_frame([]), pd.DataFrame({"entity": [], "metric": [], "increase": [], "resets": []}),
                  pd.DataFrame({"entity": [], "metric": [], "last": [], "max": []}))


@pytest.mark.parametrize("name", sorted(DETECTORS) + sorted(LEARNED))
def test_contract(name):
    cls = DETECTORS.get(name) or LEARNED[name]
    assert cls.name == name and cls.__doc__
    assert isinstance(cls(), Detector), f"{name} lacks part of the detector contract"
    assert isinstance(cls.needs_features, bool)
    # what it reads: canonical metric names, each with words; the learned ones read the features instead
    assert all(isinstance(m, str) and m == m.lower() and words for m, words in cls.inputs.items())
    assert bool(cls.inputs) != cls.needs_features
    params = inspect.signature(cls.__init__).parameters
    det = cls()
    for p in list(params.values())[1:]:  # __init__ only stores its parameters, unchanged
        assert getattr(det, p.name) == p.default, p.name
    assert not any(k.endswith("_") and not k.startswith("_") for k in vars(det))  # nothing fitted yet
    assert det.fit() is det and hasattr(det, "threshold_")
    out = det.update(EMPTY)
    assert isinstance(out, list) and all(isinstance(e, Evidence) for e in out)
    assert det.steady_until(EMPTY.now) >= EMPTY.now  # until when its evidence stands without new input
    det.forget("sn01-b01")  # a repaired node: every detector that remembers entities forgets it
    det.restore({"sn01-b01/gpu0"})  # a restarted daemon's flagged entities
    assert cls().forget("sn01-b01") is None  # before fit too


def test_build():
    assert [d.name for d in build()] == sorted(DETECTORS, key=list(DETECTORS).index)
    (only,) = build(baseline=True)
    assert only.name == "rules" and only.baseline
