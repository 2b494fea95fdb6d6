"""A trained model on disk: the learned detectors with the metadata that says what they are.

A model is a directory with ``model.json`` (format, raswarden and scikit-learn versions, the feature list
of every entity kind, the training data's fingerprint, training figures and any evaluation figures) and
``estimators.joblib`` (the fitted detectors). :meth:`ModelBundle.load` reads the metadata first and refuses
a model whose format, feature list or scikit-learn version does not match this build, or whose estimator
file does not match its recorded digest, with a message that says which and what to do; only then does it
unpickle the estimators (a model directory is code: load only your own).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import joblib

from detectors.features import FEATURES

MODEL_FORMAT = 3  # 2: the IsolationForest keeps only varying features; 3: peer changes per load state
META = "model.json"
ESTIMATORS = "estimators.joblib"


class IncompatibleModel(ValueError):
    """The model on disk cannot be used by this build."""


def _sklearn_series(version: str) -> str:
    return ".".join(version.split(".")[:2])


@dataclass
class ModelBundle:
    """The fitted learned detectors and their metadata."""

    detectors_: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def detectors(self) -> list:
        """The learned detectors, ready for :func:`detectors.registry.build`."""
        return list(self.detectors_)

    def save(self, path: Path) -> Path:
        import sklearn  # (here and in load: importing the pipeline does not import scikit-learn)

        path.mkdir(parents=True, exist_ok=True)
        est = path / ESTIMATORS
        joblib.dump(self.detectors_, est, compress=3)
        meta = dict(self.meta)
        meta.update({
            "format": MODEL_FORMAT,
            "sklearn": sklearn.__version__,
            "features": {k: list(v) for k, v in FEATURES.items()},
            "detectors": [d.name for d in self.detectors_],
            "estimators_sha256": hashlib.sha256(est.read_bytes()).hexdigest(),
        })
        (path / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        self.meta = meta
        return path

    @classmethod
    def read_meta(cls, path: Path) -> dict:
        meta_path = Path(path) / META
        try:
            return json.loads(meta_path.read_text())
        except FileNotFoundError:
            raise IncompatibleModel(f"{path}: not a raswarden model (no {META}); train one with "
                                    "'raswarden train TRACE... --out DIR'") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise IncompatibleModel(f"{meta_path}: unreadable metadata ({exc})") from None

    @classmethod
    def load(cls, path: str | Path) -> ModelBundle:
        """Load a model, refusing an incompatible one (:class:`IncompatibleModel`)."""
        path = Path(path)
        meta = cls.read_meta(path)
        retrain = "retrain it with 'raswarden train' on this version"
        if meta.get("format") != MODEL_FORMAT:
            raise IncompatibleModel(f"{path}: model format {meta.get('format')!r}, this raswarden reads "
                                    f"{MODEL_FORMAT}; {retrain}")
        theirs = meta.get("features", {})
        for kind, names in FEATURES.items():
            if theirs.get(kind) != list(names):
                have = set(theirs.get(kind, []))
                diff = sorted(set(names) ^ have)[:5]
                raise IncompatibleModel(f"{path}: the {kind} feature list differs from this build's "
                                        f"({', '.join(diff) or 'order'}); {retrain}")
        import sklearn

        if _sklearn_series(str(meta.get("sklearn", ""))) != _sklearn_series(sklearn.__version__):
            raise IncompatibleModel(f"{path}: trained with scikit-learn {meta.get('sklearn')}, this is "
                                    f"{sklearn.__version__}; {retrain}")
        est = path / ESTIMATORS
        try:
            digest = hashlib.sha256(est.read_bytes()).hexdigest()
        except FileNotFoundError:
            raise IncompatibleModel(f"{path}: {ESTIMATORS} is missing") from None
        if digest != meta.get("estimators_sha256"):
            raise IncompatibleModel(f"{est}: does not match the digest in {META} (changed or truncated)")
        return cls(joblib.load(est), meta)
