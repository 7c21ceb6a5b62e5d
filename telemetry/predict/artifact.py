"""A trained predictor as one self-describing blob the control plane can store and version.

Layout: a magic line, a JSON header (kind, version, threshold, training window, metrics, library versions,
feature names) and the pickled model. The header can be read without unpickling, so the portal can list and
compare versions cheaply. Unpickling executes code: only load artifacts the control plane wrote itself, never
one uploaded by a user.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import platform
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import sklearn

from telemetry.predict.estimators import ModelKind, Scorer
from telemetry.predict.features import feature_names

MAGIC = b"CORRAL-FAILURE-MODEL 1\n"


class ArtifactError(ValueError):
    """The bytes are not a model artifact, or were made for other features or library versions."""


@dataclass(frozen=True, slots=True)
class ArtifactHeader:
    kind: ModelKind
    version: str  # content hash: equal models have equal versions
    created_at: float  # epoch seconds, supplied by the caller (the core never reads the clock)
    horizon_s: float
    threshold: float
    train_start: float
    train_end: float
    rows: int
    positive_rows: int
    failures: int
    feature_names: tuple[str, ...]
    # Alarm only when the score held for this many consecutive rows (telemetry.predict.alarms). Defaults to 1 (no
    # persistence) so headers written before the field existed still load.
    persist_rows: int = 1
    metrics: dict[str, Any] = field(default_factory=dict)  # validation metrics measured when it was trained
    libraries: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = str(self.kind)
        data["feature_names"] = list(self.feature_names)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ArtifactHeader:
        data = dict(data)
        data["kind"] = ModelKind(data["kind"])
        data["feature_names"] = tuple(data["feature_names"])
        return cls(**data)


@dataclass(frozen=True, eq=False)
class ModelArtifact:
    header: ArtifactHeader
    model: Scorer

    def score(self, features: np.ndarray) -> np.ndarray:
        return self.model.score(features)

    def to_bytes(self) -> bytes:
        head = json.dumps(self.header.to_json(), sort_keys=True).encode()
        return MAGIC + len(head).to_bytes(4, "big") + head + pickle.dumps(self.model, protocol=5)

    @classmethod
    def from_bytes(cls, blob: bytes) -> ModelArtifact:
        header = read_header(blob)
        start = len(MAGIC) + 4 + int.from_bytes(blob[len(MAGIC) : len(MAGIC) + 4], "big")
        model = pickle.loads(blob[start:])  # noqa: S301 - artifacts are written by our own control plane only
        artifact = cls(header=header, model=model)
        check_compatible(artifact.header)
        return artifact


def read_header(blob: bytes) -> ArtifactHeader:
    """The header alone, without unpickling the model."""
    if not blob.startswith(MAGIC):
        raise ArtifactError("not a Corral failure-model artifact")
    size = int.from_bytes(blob[len(MAGIC) : len(MAGIC) + 4], "big")
    try:
        return ArtifactHeader.from_json(json.loads(blob[len(MAGIC) + 4 : len(MAGIC) + 4 + size]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ArtifactError(f"corrupt artifact header: {exc}") from None


def check_compatible(header: ArtifactHeader) -> None:
    if header.feature_names != feature_names():
        raise ArtifactError("the model was trained on a different feature set; retrain it")


def make_header(model: Scorer, **fields: Any) -> ArtifactHeader:
    """Header with the content-hash version and library versions filled in."""
    digest = hashlib.sha256(pickle.dumps(model, protocol=5)).hexdigest()[:16]
    libraries = {"python": platform.python_version(), "numpy": np.__version__, "scikit-learn": sklearn.__version__}
    return ArtifactHeader(version=digest, libraries=libraries, feature_names=feature_names(), **fields)
