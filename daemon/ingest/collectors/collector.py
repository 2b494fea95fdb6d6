"""What every live collector shares: the context it reads into, its outcome, its saved state.

A collector reads one kind of source (an exporter endpoint list, a Prometheus server, the journal,
rasdaemon databases, sysfs) into a :class:`~daemon.ingest.batch.Batch` of samples and events, named through the
shared :class:`~daemon.ingest.naming.SeriesMapper`. It never raises for bad or missing input: an unreachable
target, a malformed line, a vanished file is recorded in its :class:`Outcome` and in the reject log, and
the rest goes on. "No data" is not an error.

Collectors that read a stream (the journal, rasdaemon tables, a followed file) keep a cursor in
:attr:`Collector.state`; the service saves it in the same transaction as the tick that consumed the data,
so a restart neither loses an event nor counts one twice.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from daemon.ingest.batch import Batch
from daemon.ingest.formats.reader import ReadContext

log = logging.getLogger("raswarden.collectors")


@dataclass
class Outcome:
    """What one collection did: how much it read, and what went wrong (per target)."""

    samples: int = 0
    events: int = 0
    errors: list[str] = field(default_factory=list)
    targets_up: int = 0
    targets_total: int = 0

    @property
    def ok(self) -> bool:
        """True unless every target failed (a partial scrape is a success with errors)."""
        return not self.errors or self.targets_up > 0


class Collector(ABC):
    """Base of the live collectors; subclasses set ``kind`` and implement :meth:`collect`."""

    kind: ClassVar[str] = ""
    #: config keys this collector accepts (beside ``enabled``), with their defaults
    options: ClassVar[dict[str, Any]] = {}

    def __init__(self, name: str, ctx: ReadContext, **options: Any):
        self.name = name
        self.ctx = ctx
        self.state: dict[str, Any] = {}
        for key, default in self.options.items():
            setattr(self, key, options.pop(key, default))
        if options:
            raise ValueError(f"unknown key(s) {', '.join(sorted(options))}")

    def restore(self, state: dict[str, Any]) -> None:
        """Take up the state saved by an earlier run (cursors, offsets)."""
        self.state = dict(state)

    @abstractmethod
    def collect(self, now: float) -> tuple[Batch, Outcome]:
        """Read what is new; never raises for bad input or unreachable sources."""

    def probe(self) -> str | None:
        """None when the source answers (for /healthz), else why not."""
        return None

    def check(self) -> list[str]:
        """What would keep it from collecting that can be seen without collecting (``check-config`` prints them as
        warnings): a file its config names that cannot be read, no target at all."""
        return []

    def close(self) -> None:  # noqa: B027 (most collectors hold nothing to release)
        """Release sockets, processes and files."""


def merge_batches(batches: list[Batch]) -> Batch:
    """Several collectors' batches as one (samples and events concatenated; categories unified)."""
    import pandas as pd

    samples = [b.samples for b in batches if len(b.samples)]
    events = [b.events for b in batches if len(b.events)]
    out = Batch()
    if samples:
        out.samples = samples[0] if len(samples) == 1 else _concat_samples(samples)
    if events:
        out.events = events[0] if len(events) == 1 else pd.concat(events, ignore_index=True)
    return out


def _concat_samples(frames):
    import pandas as pd
    from pandas.api.types import union_categoricals

    entity = union_categoricals([f["entity"] for f in frames], ignore_order=True)
    metric = union_categoricals([f["metric"] for f in frames], ignore_order=True)
    return pd.DataFrame({
        "ts": pd.concat([f["ts"] for f in frames], ignore_index=True),
        "entity": entity, "metric": metric,
        "value": pd.concat([f["value"] for f in frames], ignore_index=True),
    })
