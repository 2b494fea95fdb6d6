"""The unit of data that flows from readers and collectors into the pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from detectors.schema import empty_events, empty_samples, frame
from detectors.table import Table


# Events as Arrow (spill files, Parquet): ``code`` travels as float64 so that a missing code is null.
EVENT_ARROW_SCHEMA = pa.schema([
    ("ts", pa.float64()), ("entity", pa.string()), ("kind", pa.string()), ("code", pa.float64()),
    ("severity", pa.string()), ("message", pa.string()), ("source", pa.string()), ("pci", pa.string()),
    ("device", pa.string()),
])


def events_table(events: pd.DataFrame) -> pa.Table:
    """An events frame as an Arrow table with :data:`EVENT_ARROW_SCHEMA`."""
    return pa.Table.from_pandas(events.astype({"code": "float64"}), schema=EVENT_ARROW_SCHEMA, preserve_index=False)


@dataclass
class Batch:
    """Samples (``ts, entity, metric, value``) and events (``ts, entity, kind, code, ...``) as frames. The lab's
    simulated paths (the closed loop, the evaluation) hand the pipeline their samples as a
    :class:`~detectors.table.Table` instead, which is what it reads (a frame a tick costs more than its judging)."""

    samples: pd.DataFrame | Table = field(default_factory=empty_samples)
    events: pd.DataFrame = field(default_factory=empty_events)

    def __len__(self) -> int:
        return len(self.samples) + len(self.events)


def samples_from_codes(
    ts: np.ndarray, entity_codes: np.ndarray, metric_codes: np.ndarray, values: np.ndarray,
    entities: list[str], metrics: list[str],
) -> pd.DataFrame:
    """Build a samples frame from interned codes without creating a Python object per sample (name categories
    of object dtype: a str-dtype Index makes every read of a name column an Arrow round trip)."""
    return frame(
        {
            "ts": np.asarray(ts, dtype=np.float64),
            "entity": pd.Categorical.from_codes(entity_codes, categories=pd.Index(entities, dtype=object),
                                                validate=False),
            "metric": pd.Categorical.from_codes(metric_codes, categories=pd.Index(metrics, dtype=object),
                                                validate=False),
            "value": np.asarray(values, dtype=np.float64),
        }
    )
