"""The tick's frames as plain columns: what the pipeline hands its detectors, without pandas' cost per access.

A tick builds a handful of small frames (counter samples, gauge readings, increases, held gauges) and every
detector reads a few columns of each. As pandas DataFrames, each column read made a Series (tens of microseconds)
and each frame a block manager: at a 640-accelerator fleet that container work was a third of a tick (issue 56).
A :class:`Table` is a dict of equal-length columns, numpy arrays or :class:`Names`; reading a column is a dict
lookup, selecting rows indexes each column once.

The detectors read columns the way that works for a Table and a DataFrame alike (``np.asarray(t["last"],
dtype=float)``, :func:`detectors.schema.name_codes`, ``.tolist()``), so tests and tools may still hand them
DataFrames; :meth:`Table.to_frame` gives one for reading.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pandas as pd


class Names:
    """A column of names: integer codes into one array of names (a categorical without pandas).

    ``names`` is the array :func:`detectors.schema.name_codes` hands out for a set of names, the same object from
    tick to tick while the names do not change, so the caches downstream that key on it keep working. A code of -1
    is a missing name (None).
    """

    __slots__ = ("codes", "names")

    def __init__(self, codes: np.ndarray, names: np.ndarray):
        self.codes = codes
        self.names = names

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, rows):
        if isinstance(rows, (int, np.integer)):
            code = int(self.codes[rows])
            return self.names[code] if code >= 0 else None
        return Names(self.codes[rows], self.names)

    def to_numpy(self, dtype=None) -> np.ndarray:
        """The names row by row, as an object array."""
        out = self.names[self.codes] if len(self.names) else np.full(len(self.codes), None, dtype=object)
        if len(out) and (self.codes < 0).any():
            out = out.copy()
            out[self.codes < 0] = None
        return out if dtype is None or dtype is object else out.astype(dtype)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self.to_numpy(dtype)

    def tolist(self) -> list:
        return self.to_numpy().tolist()

    def __iter__(self) -> Iterator:
        return iter(self.tolist())

    def categorical(self) -> pd.Categorical:
        """As a pandas categorical (for :meth:`Table.to_frame`)."""
        return pd.Categorical.from_codes(self.codes, categories=pd.Index(self.names, dtype=object), validate=False)


KEEP_LAYOUT_ROWS = 3_000_000
"""A tick's layout (which of a table's rows is which series, and what a detector works out from that) is kept from
tick to tick only for tables of at most this many rows (a 100,000-accelerator fleet's tick has some 2.3 million
samples): what is kept costs memory in proportion (at 100,000 accelerators the ticking peak 1.10 -> 1.22 GB) and
saves working the layout out again, a quarter of such a tick (0.29 -> 0.21 s; bench/records/benchmarks-history.md,
"Issue 56's ninth step"). A larger fleet's shard works its layout out every tick rather than hold it."""


def keeps_layout(rows: int) -> bool:
    """Whether a table of ``rows`` rows has its layout kept (see :data:`KEEP_LAYOUT_ROWS`)."""
    return rows <= KEEP_LAYOUT_ROWS


def read_only(a: np.ndarray) -> np.ndarray:
    """``a``, made read-only in place (a code array a detector may key on: it cannot change under it)."""
    a.flags.writeable = False
    return a


class TableLayout:
    """What a detector worked out from a table's two name columns (which row is which entity's which metric), kept
    while it is given the same read-only code arrays over the same names: the pipeline and the gauge hold hand out the
    same objects while a tick's series are the last one's, and read-only ones cannot have changed. Only for tables of
    at most :data:`KEEP_LAYOUT_ROWS` rows; never pickled (a warm state's tables are new objects)."""

    def __init__(self) -> None:
        self._kept: tuple | None = None

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._kept = None

    def get(self, ent_codes: np.ndarray, ent_names: np.ndarray, met_codes: np.ndarray, met_names: np.ndarray):
        """What was kept for these columns, or None."""
        kept = self._kept
        if kept is not None and kept[0] is ent_codes and kept[1] is ent_names and kept[2] is met_codes \
                and kept[3] is met_names and not ent_codes.flags.writeable and not met_codes.flags.writeable:
            return kept[4]
        return None

    def keep(self, ent_codes: np.ndarray, ent_names: np.ndarray, met_codes: np.ndarray, met_names: np.ndarray,
             value) -> None:
        """Keep ``value`` for these columns (forget what was kept for others; nothing for a table too large)."""
        self._kept = (ent_codes, ent_names, met_codes, met_names, value) if keeps_layout(len(ent_codes)) else None

    def forget(self) -> None:
        self._kept = None


NO_NAMES = Names(np.empty(0, dtype=np.int64), np.empty(0, dtype=object))
"""An empty name column."""


class Table:
    """Equal-length named columns (numpy arrays or :class:`Names`): a frame of the tick (see the module docstring).

    ``table["col"]`` is the column itself; ``table[mask]`` or ``table[indices]`` selects rows of every column;
    ``len``, ``empty``, ``columns`` and ``"col" in table`` read as a DataFrame's do.
    """

    __slots__ = ("_columns", "_rows")

    def __init__(self, columns: Mapping[str, np.ndarray | Names], rows: int | None = None):
        self._columns = dict(columns)
        lengths = {len(c) for c in self._columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of unequal length: {sorted(lengths)}")
        self._rows = lengths.pop() if lengths else (rows or 0)

    @classmethod
    def empty_of(cls, names: tuple[str, ...] | list[str]) -> Table:
        """No rows, the given columns (float arrays)."""
        return cls({n: np.empty(0) for n in names})

    def __len__(self) -> int:
        return self._rows

    @property
    def empty(self) -> bool:
        return self._rows == 0

    @property
    def columns(self) -> list[str]:
        return list(self._columns)

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __getitem__(self, key):
        if isinstance(key, str):
            return self._columns[key]
        rows = np.asarray(key)
        return Table({n: c[rows] for n, c in self._columns.items()},
                     rows=int(rows.sum()) if rows.dtype == bool else len(rows))

    def to_frame(self) -> pd.DataFrame:
        """As a DataFrame (name columns as categoricals), for reading and tests."""
        return pd.DataFrame({n: c.categorical() if isinstance(c, Names) else c for n, c in self._columns.items()})

    def __repr__(self) -> str:
        return f"Table({self._rows} rows: {', '.join(self._columns)})"
