"""When each entity was last observed and how long its telemetry stays current, as arrays over a lasting row index.

Health asks every tick which entities went stale (no telemetry for their window: ``unknown``). As dicts, that was a
Python pass over every entity each tick, a tenth of a 100,000-accelerator tick (issue 56). Here an entity has a row
for life; a tick's sampled entities are marked by rows found once per name array (the readers hand the same array
from tick to tick while the names do not change, see :func:`detectors.schema.name_codes`), and the stale ones are one
comparison over the arrays.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from detectors.grouping import PerNameArray


class Freshness:
    """Last observation and staleness window of every entity (``default_s`` where none was learned)."""

    def __init__(self, default_s: float):
        self.default_s = default_s
        self.names: list[str] = []
        self.row_of: dict[str, int] = {}
        self.seen = np.empty(0)  # the tick an entity was last observed at; NaN: never
        self.window = np.empty(0)  # its staleness window; NaN: the default
        self._rows = PerNameArray(self._rows_of, size=8)  # (the sampled entities' arrays, and nodes')

    def __len__(self) -> int:
        return len(self.names)


    def _row(self, name: str) -> int:
        row = self.row_of.get(name)
        if row is None:
            row = self.row_of[name] = len(self.names)
            self.names.append(name)
            if row >= len(self.seen):
                grow = max(64, len(self.seen))
                self.seen = np.concatenate((self.seen, np.full(grow, np.nan)))
                self.window = np.concatenate((self.window, np.full(grow, np.nan)))
        return row

    def rows(self, names: np.ndarray) -> np.ndarray:
        """The rows of a name array's names (given rows on first sight), kept while the same array is asked
        about."""
        return self._rows.get(names)

    def _rows_of(self, names: np.ndarray) -> np.ndarray:
        return np.fromiter((self._row(n) for n in names.tolist()), dtype=np.int64, count=len(names))

    def observe_rows(self, rows: np.ndarray, now: float) -> None:
        """Mark the entities of ``rows`` (from :meth:`rows`) observed at ``now``."""
        self.seen[rows] = now

    def observe(self, entities: Iterable[str], now: float) -> None:
        """Mark entities observed at ``now``."""
        for e in entities:
            row = self._row(e)  # (first: it may grow the arrays)
            self.seen[row] = now

    def set_window(self, entity: str, window_s: float) -> None:
        """The staleness window of ``entity`` from its sampling interval (called for hundreds of entities a tick
        when jittered scrapes move their learned intervals: a known entity's row without a further call)."""
        row = self.row_of.get(entity)
        if row is None:
            row = self._row(entity)  # (first: it may grow the arrays)
        self.window[row] = window_s

    def window_of(self, entity: str) -> float:
        row = self.row_of.get(entity)
        w = self.window[row] if row is not None else np.nan
        return self.default_s if np.isnan(w) else float(w)

    def last(self, entity: str) -> float | None:
        """When ``entity`` was last observed (None: never)."""
        row = self.row_of.get(entity)
        if row is None or np.isnan(self.seen[row]):
            return None
        return float(self.seen[row])

    def is_fresh(self, entity: str, now: float) -> bool:
        seen = self.last(entity)
        return seen is not None and now - seen <= self.window_of(entity)

    def stale(self, now: float) -> list[str]:
        """The entities observed once and not within their window of ``now``."""
        n = len(self.names)
        seen, window = self.seen[:n], self.window[:n]
        with np.errstate(invalid="ignore"):
            out = now - seen > np.where(np.isnan(window), self.default_s, window)  # never observed: NaN, not stale
        return [self.names[i] for i in np.flatnonzero(out)]

    def items(self) -> list[tuple[str, float]]:
        """(entity, last observed) of every entity observed once (for reading and tests)."""
        n = len(self.names)
        return [(self.names[i], float(self.seen[i])) for i in np.flatnonzero(~np.isnan(self.seen[:n]))]
