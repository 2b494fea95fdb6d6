"""Vectorized grouping on integer codes: persistent rows for names, dense group keys, group medians.

Every detector works on whole-fleet arrays each tick; these are the few operations they share for
turning names and (entity, metric) pairs into array positions without a Python loop per row.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from detectors.schema import node_of


def peer_group(entity: str, models: Mapping[str, str] | None = None) -> str:
    """The peer group of an accelerator: its node, the kind of its id (``gpu``, ``npu``, ``dcu``) and its model
    where the telemetry names one, so that peers never mix vendors or models (a node with two models has two
    groups)."""
    node, _, local = entity.partition("/")
    kind = local.rstrip("0123456789")
    model = models.get(entity, "") if models else ""
    return f"{node}|{kind}|{model}"


DENSE_LIMIT = 1 << 25
"""Largest key space grouped through a dense table (32 Mi slots, 128 MB of int32); above it, hashing."""


class RowIndex:
    """Persistent dense row numbers for string keys, looked up vectorized (a pandas hash index); unseen
    keys get the next rows, in order of first appearance.

    Successive ticks usually ask for the same keys in the same order: that case is answered from the
    previous lookup after one elementwise comparison, without hashing the strings again.
    """

    def __init__(self) -> None:
        self.index = pd.Index([], dtype=object)
        self.keys = np.empty(0, dtype=object)
        self._last: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def rows_of_node(self, node: str) -> np.ndarray:
        """Rows of the node's own entities (``node`` and ``node/...``)."""
        return np.flatnonzero([node_of(k) == node for k in self.keys])

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``keys`` and the keys that were new (already given their rows)."""
        last = self._last
        if last is not None and len(last[0]) == len(keys) and np.array_equal(last[0], keys):
            return last[1].copy(), self.keys[:0]
        rows = self.index.get_indexer(keys)
        new = rows < 0
        fresh = self.keys[:0]
        if new.any():
            fresh = np.asarray(pd.unique(keys[new]), dtype=object)
            self.keys = np.concatenate([self.keys, fresh])
            self.index = pd.Index(self.keys, dtype=object)
            rows[new] = self.index.get_indexer(keys[new])
        self._last = (np.array(keys, dtype=object), rows.copy())
        return rows, fresh


class SeriesSlots:
    """Persistent dense slots for (entity, metric) series, looked up from a tick's integer codes.

    A tick names its series by ``entity code * (len(metric names) + 1) + metric code`` over the tick's own name
    arrays; a code table is kept while the name arrays are the same objects (equal names are handed out as one
    array by :func:`~detectors.schema.name_codes`), so steady ticks look their series up without a string.
    """

    def __init__(self) -> None:
        self.index: dict[tuple[str, str], int] = {}
        self._cats: tuple[np.ndarray, np.ndarray] | None = None
        self._table = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.index)

    def lookup(self, keys: np.ndarray, ent_names: np.ndarray, met_names: np.ndarray) -> tuple[np.ndarray, int]:
        """Slots of the series ``keys`` (new series numbered in order of first sight), and how many were new."""
        if self._cats is None or self._cats[0] is not ent_names or self._cats[1] is not met_names:
            self._table = np.full(len(ent_names) * (len(met_names) + 1), -1, dtype=np.int64)
        self._cats = (ent_names, met_names)
        out = self._table[keys]
        missing = np.flatnonzero(out < 0)
        before = len(self.index)
        if len(missing):
            width = len(met_names) + 1
            for i, k in zip(missing.tolist(), keys[missing].tolist()):
                pair = (ent_names[k // width], met_names[k % width])
                slot = self.index.get(pair)
                if slot is None:
                    slot = self.index[pair] = len(self.index)
                out[i] = slot
            self._table[keys[missing]] = out[missing]
        return out, len(self.index) - before


def group_keys(key: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Group integer keys in ``[0, n_keys)``: (each row's group number, the sorted distinct keys).

    A dense table when the key space is small enough (linear time, no hashing), hashing otherwise.
    """
    if n_keys <= DENSE_LIMIT:
        present = np.zeros(n_keys, dtype=bool)
        present[key] = True
        uniq = np.flatnonzero(present)
        position = np.empty(n_keys, dtype=np.int32 if len(uniq) < 2**31 else np.int64)
        position[uniq] = np.arange(len(uniq), dtype=position.dtype)
        return position[key].astype(np.int64), uniq
    inverse, uniq = pd.factorize(key, sort=True)
    return inverse, uniq


def last_and_max(inverse: np.ndarray, n_groups: int, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the value of its last row (rows in time order) and the largest value."""
    last_row = np.zeros(n_groups, dtype=np.int64)
    np.maximum.at(last_row, inverse, np.arange(len(inverse)))
    peak = np.full(n_groups, -np.inf)
    np.maximum.at(peak, inverse, values)
    return values[last_row], peak


def group_median(codes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and count of the finite values per group code (vectorized: one sort)."""
    n_groups = int(codes.max()) + 1 if len(codes) else 0
    ok = np.isfinite(values)
    c, v = codes[ok], values[ok]
    order = np.lexsort((v, c))
    c, v = c[order], v[order]
    count = np.bincount(c, minlength=n_groups)
    start = np.concatenate(([0], np.cumsum(count)[:-1]))
    median = np.full(n_groups, np.nan)
    has = count > 0
    lo = start[has] + (count[has] - 1) // 2
    hi = start[has] + count[has] // 2
    median[has] = (v[lo] + v[hi]) / 2.0
    return median, count
