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


class PerNameArray:
    """A value computed once per name array and kept for the last ``size`` arrays, by identity: the readers and
    :func:`~detectors.schema.name_codes` hand out the same array while the names do not change, and a few alternate
    (sources sampled at different intervals). An entry holds its array, so its id is not reused while it stands.
    Left out of a pickle (a warm state's arrays are new objects)."""

    def __init__(self, make, size: int = 4):
        self.make, self.size = make, size
        self._entries: dict[int, tuple[np.ndarray, object]] = {}

    def get(self, names: np.ndarray):
        hit = self._entries.get(id(names))
        if hit is not None and hit[0] is names:
            return hit[1]
        value = self._entries[id(names)] = (names, self.make(names))
        while len(self._entries) > self.size:
            del self._entries[next(iter(self._entries))]
        return value[1]

    def clear(self) -> None:
        self._entries.clear()

    def __getstate__(self) -> dict:
        return {"make": self.make, "size": self.size}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _entries={})


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

    def rows_within(self, scope: str) -> np.ndarray:
        """Rows of the entities in ``scope``: a node's (all of them) or one part's."""
        return self.rows_of_node(scope) if "/" not in scope else np.flatnonzero(self.keys == scope)

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
    array by :func:`~detectors.schema.name_codes`), so steady ticks look their series up without a string. When the
    name arrays change (a metric appears, a replay's next bucket), each name is mapped to a lasting id once and the
    series found by their id pairs in a sorted array: a 100,000-accelerator tick does not look up a million pairs
    one by one.
    """

    def __init__(self) -> None:
        self._ent_id: dict[str, int] = {}
        self._met_id: dict[str, int] = {}
        self._pairs = np.empty(0, dtype=np.int64)  # sorted ent_id << 20 | met_id of every series
        self._pair_slots = np.empty(0, dtype=np.int64)
        self._n = 0
        self._cats: tuple[np.ndarray, np.ndarray] | None = None
        self._table = np.empty(0, dtype=np.int64)
        self._ent_ids = np.empty(0, dtype=np.int64)
        self._met_ids = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return self._n

    @staticmethod
    def _ids(names: np.ndarray, ids: dict[str, int]) -> np.ndarray:
        return np.fromiter((ids.setdefault(n, len(ids)) for n in names.tolist()), dtype=np.int64, count=len(names))

    def lookup(self, keys: np.ndarray, ent_names: np.ndarray, met_names: np.ndarray) -> tuple[np.ndarray, int]:
        """Slots of the series ``keys`` (new series numbered in order of first sight), and how many were new."""
        if self._cats is None or self._cats[0] is not ent_names or self._cats[1] is not met_names:
            self._table = np.full(len(ent_names) * (len(met_names) + 1), -1, dtype=np.int64)
            self._ent_ids = self._ids(ent_names, self._ent_id)
            self._met_ids = np.concatenate((self._ids(met_names, self._met_id), [-1]))
        self._cats = (ent_names, met_names)
        out = self._table[keys]
        missing = np.flatnonzero(out < 0)
        before = self._n
        if len(missing):
            width = len(met_names) + 1
            k = keys[missing]
            pair = (self._ent_ids[k // width] << 20) | self._met_ids[k % width]
            at = np.searchsorted(self._pairs, pair)
            known = (at < len(self._pairs)) & (self._pairs[np.minimum(at, len(self._pairs) - 1)] == pair) \
                if len(self._pairs) else np.zeros(len(pair), dtype=bool)
            found = np.full(len(pair), -1, dtype=np.int64)
            found[known] = self._pair_slots[at[known]]
            new = np.flatnonzero(~known)
            if len(new):  # first sight, in order; a pair twice in one tick gets one slot
                uniq, first, inverse = np.unique(pair[new], return_index=True, return_inverse=True)
                order = np.argsort(first, kind="stable")  # slots by first sight
                slot_of = np.empty(len(uniq), dtype=np.int64)
                slot_of[order] = self._n + np.arange(len(uniq))
                found[new] = slot_of[inverse.ravel()]
                self._n += len(uniq)
                merged = np.concatenate((self._pairs, uniq))
                sort = np.argsort(merged, kind="stable")
                self._pairs = merged[sort]
                self._pair_slots = np.concatenate((self._pair_slots, slot_of))[sort]
            out[missing] = found
            self._table[k] = found
        return out, self._n - before


def stable_order(key: np.ndarray, n_keys: int) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` of integer keys in ``[0, n_keys)``: the same order, by a radix sort when the
    keys fit 16 bits (numpy sorts those in linear time; wider ones by comparisons, several times slower)."""
    if n_keys <= 2**16:
        return np.argsort(key.astype(np.uint16), kind="stable")
    return np.argsort(key, kind="stable")


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


def group_mean(inverse: np.ndarray, n_groups: int, values: np.ndarray) -> np.ndarray:
    """Per group: the mean of its finite values (NaN where it has none)."""
    ok = np.isfinite(values)
    total = np.bincount(inverse[ok], weights=values[ok], minlength=n_groups)
    count = np.bincount(inverse[ok], minlength=n_groups)
    return np.divide(total, count, out=np.full(n_groups, np.nan), where=count > 0)


def group_median(codes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and count of the finite values per group code (vectorized: one sort).

    The usual case, codes in order and groups of a few sizes (a node's accelerators, a half node's), sorts the groups
    of each size as the rows of a matrix instead of the whole by two keys (a tenth of the time at 100,000
    accelerators); the stable sort keeps equal values in the order the two-key sort does, so the medians are the same
    to the bit."""
    n_groups = int(codes.max()) + 1 if len(codes) else 0
    ok = np.isfinite(values)
    c, v = codes[ok], values[ok]
    count = np.bincount(c, minlength=n_groups)
    has = count > 0
    median = np.full(n_groups, np.nan)
    if len(c) and (c[1:] >= c[:-1]).all():
        sizes = np.unique(count[has])
        if len(sizes) <= _ROW_SORT_SIZES:
            size_of_row = count[c]
            for k in sizes.tolist():
                rows = np.sort(v[size_of_row == k].reshape(-1, k), axis=1, kind="stable")
                median[count == k] = (rows[:, (k - 1) // 2] + rows[:, k // 2]) / 2.0
            return median, count
    v = v[np.lexsort((v, c))]
    start = np.concatenate(([0], np.cumsum(count)[:-1]))
    lo = start[has] + (count[has] - 1) // 2
    hi = start[has] + count[has] // 2
    median[has] = (v[lo] + v[hi]) / 2.0
    return median, count


_ROW_SORT_SIZES = 8
"""group_median sorts groups as rows while they come in at most this many sizes (a pass over the rows a size)."""


def nanmedian(values: np.ndarray) -> float:
    """``np.nanmedian`` of a 1-D array with at least one number, equal to it bit for bit without its per-call
    overhead (a third of its time at 1,000 values): the middle value of the numbers, or the mean of the middle two
    as ``np.median`` takes it (their sum over two), found by one partition."""
    v = values[~np.isnan(values)]
    k = len(v) // 2
    if len(v) % 2:
        return float(np.partition(v, k)[k])
    part = np.partition(v, (k - 1, k))
    return float((part[k - 1] + part[k]) / 2.0)
