"""The shared vocabulary of the pipeline: column names, entity kinds, health states and categories.

Everything here is defined in docs/architecture.md §3 and §4; change both together.
"""

from __future__ import annotations

import enum
import re
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd

from detectors.table import Names

SAMPLE_COLUMNS = ("ts", "entity", "metric", "value")
EVENT_COLUMNS = ("ts", "entity", "kind", "code", "severity", "message", "source", "pci", "device")

EVENT_KINDS = frozenset({"xid", "sxid", "amdgpu", "ascend", "afid", "ecc", "aer", "mce", "edac", "arm", "cper", "disk",
                         "link", "devlink", "thermal", "boot", "telemetry", "gpu_init", "gpu_state",
                         "sel"})

CATEGORIES = (
    "gpu_memory",
    "gpu_bus",
    "gpu_thermal",
    "gpu_compute",
    "scaleup_link",
    "fabric_link",
    "host",
    "cooling",
    "telemetry",
    "application",
)


class State(enum.IntEnum):
    """Health of an entity, ordered from good to bad; ``UNKNOWN`` sits apart (stale telemetry)."""

    HEALTHY = 0
    SUSPECT = 1
    SUBHEALTHY = 2
    FAILED = 3
    UNKNOWN = -1

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> State:
        return cls[text.upper()]


_PORT_RE = re.compile(r"^[^/]+/[^/:]+:[^/]+$")
_ACCEL_RE = re.compile(r"^[^/]+/(gpu|npu|dcu|xpu)\d+$")


def entity_kind(entity: str) -> str:
    """Kind of an entity id as named in docs/architecture.md §3 (``node``, ``accelerator``, ``port``...).

    Ids from the topology file (racks, supernodes, cooling loops, switch ports) are classified by
    the topology itself; this function only reads the shape of node-side ids.
    """
    if "/" not in entity:
        return "node"
    if _ACCEL_RE.match(entity):
        return "accelerator"
    if _PORT_RE.match(entity):
        return "port"
    return "component"


def node_of(entity: str) -> str:
    """The node that holds an entity (the entity itself for a node)."""
    return entity.split("/", 1)[0]


def within(entity: str, scope: str) -> bool:
    """Whether ``entity`` is in ``scope``: a node (the node and all its parts) or one part (that part alone)."""
    return entity == scope or ("/" not in scope and node_of(entity) == scope)


def name_codes(column) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes and their names for a name column (``entity``, ``metric``): a :class:`~detectors.table.Names`
    column's or a categorical's own codes, or a plain column factorized. Codes index the names; rows compare as
    integers, not strings."""
    if isinstance(column, Names):
        return column.codes, column.names
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.codes if isinstance(column, pd.Categorical) else column.array.codes  # no Series
        return codes, _names_of(column.dtype.categories)
    codes, names = pd.factorize(np.asarray(column, dtype=object))
    return codes, np.asarray(names, dtype=object)


_NAMES: OrderedDict[int, tuple[pd.Index, np.ndarray]] = OrderedDict()


def category_names(dtype: pd.CategoricalDtype) -> np.ndarray:
    """A categorical dtype's names as :func:`name_codes` hands them out for a column of it (the same array object),
    for a :class:`~detectors.table.Names` column built from its codes."""
    return _names_of(dtype.categories)


def _names_of(categories: pd.Index) -> np.ndarray:
    """The categories as a read-only object array, converted once per categories object: the frames of a
    tick share their name columns' dtype, and Arrow-backed names would otherwise be copied out each time."""
    hit = _NAMES.get(id(categories))
    if hit is not None and hit[0] is categories:
        return hit[1]
    names = np.asarray(categories, dtype=object)
    # Successive batches usually carry equal names in new objects: hand out the array already known, so the
    # caches downstream (kinds, rows) recognise it by identity.
    known = next((v for _, v in reversed(_NAMES.values()) if len(v) == len(names) and np.array_equal(v, names)),
                 None)
    if known is None:
        known = names.view()  # a view of its own: read-only, the Index untouched
        known.flags.writeable = False
    _NAMES[id(categories)] = (categories, known)  # holding the Index keeps its id from being reused
    while len(_NAMES) > 8:
        _NAMES.popitem(last=False)
    return known


def name_column(codes: np.ndarray, names: np.ndarray, like: pd.Series | None = None) -> pd.Categorical:
    """A name column from codes into ``names`` (kept as object strings: no per-tick Arrow conversion).

    With ``like``, the categorical column the codes came from, its dtype is shared instead of checking
    the names again (a 100,000-accelerator tick has a quarter of a million of them).
    """
    if like is not None and isinstance(like.dtype, pd.CategoricalDtype):
        return pd.Categorical.from_codes(codes, dtype=like.dtype, validate=False)
    return pd.Categorical.from_codes(codes, categories=pd.Index(names, dtype=object), validate=False)


def names_in(column: pd.Series, wanted) -> np.ndarray:
    """Boolean mask of the rows of a name column whose name is in ``wanted`` (compared on codes)."""
    codes, names = name_codes(column)
    return names_mask(names, wanted)[codes]


_HITS: dict[tuple[int, int], tuple[np.ndarray, object, np.ndarray]] = {}
_CODE_OF: dict[int, tuple[np.ndarray, dict[str, int]]] = {}


def name_code(names: np.ndarray, name: str) -> int:
    """The code of ``name`` in a names array (see ``name_codes``; its names are distinct), or -2, which no row has
    (a missing name's rows are -1), where it is not there. The names' index is kept per names array, as
    :func:`names_mask` keeps its masks: rows then compare with one integer."""
    hit = _CODE_OF.get(id(names))
    if hit is None or hit[0] is not names:
        if len(_CODE_OF) > 256:
            _CODE_OF.clear()
        hit = _CODE_OF[id(names)] = (names, {n: i for i, n in enumerate(names.tolist())})  # held, as in names_mask
    return hit[1].get(name, -2)


def names_mask(names: np.ndarray, wanted) -> np.ndarray:
    """Which names are in ``wanted``, one more False for code -1 (a missing name is never wanted): index it with
    codes. Kept while the same names array (see ``name_codes``) meets the same ``wanted`` object, which callers hold
    as constants or for their lifetime (``wanted`` must not change while it is asked about)."""
    key = (id(names), id(wanted))
    hit = _HITS.get(key)
    if hit is not None and hit[0] is names and hit[1] is wanted:
        return hit[2]
    mask = np.append(np.fromiter((n in wanted for n in names), dtype=bool, count=len(names)), False)
    if len(_HITS) > 256:
        _HITS.clear()
    _HITS[key] = (names, wanted, mask)  # held: their ids cannot be reused while the entry stands
    return mask


class NamesWhere:
    """The names for which ``test`` holds, as a set :func:`names_mask` and :func:`names_in` can ask (they keep its
    answer per name array: hold one for the lifetime of the test)."""

    def __init__(self, test: Callable[[str], bool]):
        self.test = test

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.test(name)


_COLUMN_INDEX: dict[tuple[str, ...], pd.Index] = {}


def frame(data: dict) -> pd.DataFrame:
    """A DataFrame of ``data``'s columns whose column index is one shared object-dtype Index per set of names.

    pandas 3 gives a new frame a str-dtype column index and builds its lookup table again at the frame's first
    column read (some 25 us a frame): the tick's small frames, built and read once each, spent more time there than
    in their own work. A shared index keeps its table. Columns that are numeric arrays and categoricals, all of one
    length, go straight to pandas' constructor from arrays (the public one infers again what they already are); the
    frame is the same either way."""
    names = tuple(data)
    index = _COLUMN_INDEX.get(names)
    if index is None:
        index = _COLUMN_INDEX[names] = pd.Index(names, dtype=object)
    columns = list(data.values())
    if _FROM_ARRAYS is not None and columns and all(
            isinstance(c, pd.Categorical) or (isinstance(c, np.ndarray) and c.ndim == 1 and c.dtype != object)
            for c in columns):  # (pandas infers str from an object array: that goes the public way)
        n = len(columns[0])
        if all(len(c) == n for c in columns):
            try:  # pandas' constructor from columns, without inferring again what the caller built (numeric arrays
                # copied, as the public one copies them; a categorical is taken as it is)
                return _FROM_ARRAYS([c.copy() if isinstance(c, np.ndarray) else c for c in columns], columns=index,
                                    index=pd.RangeIndex(n), verify_integrity=False)
            except TypeError:  # a pandas whose private signature moved: the public constructor below
                pass
    df = pd.DataFrame(data)
    df.columns = index
    return df


_FROM_ARRAYS = getattr(pd.DataFrame, "_from_arrays", None)


def empty_samples() -> pd.DataFrame:
    """A samples frame with no rows and the canonical dtypes."""
    return frame(
        {
            "ts": np.empty(0, dtype=np.float64),
            "entity": pd.Categorical([]),
            "metric": pd.Categorical([]),
            "value": np.empty(0, dtype=np.float64),
        }
    )


EventRow = namedtuple("EventRow", EVENT_COLUMNS)
"""One event as :func:`event_records` gives it (fields as :data:`EVENT_COLUMNS`)."""


def event_rows(events: pd.DataFrame) -> Iterator[tuple]:
    """An events frame's rows as tuples of its columns' values, as ``itertuples(index=False, name=None)`` gives them
    but a code is an int (or NA), not a numpy integer; without pandas' per-row machinery, which cost a tick with a few
    kernel lines more than its rules did (0.6 ms a call)."""
    return zip(*(events[c].tolist() for c in events.columns))


def event_records(events: pd.DataFrame) -> Iterator:
    """:func:`event_rows` with the columns as fields (:class:`EventRow`; pandas' ``itertuples`` where a frame has other
    columns)."""
    if tuple(events.columns) != EVENT_COLUMNS:
        return events.itertuples(index=False)
    return map(EventRow._make, event_rows(events))


def empty_events() -> pd.DataFrame:
    """An events frame with no rows and the canonical dtypes."""
    return events_frame([])


def events_frame(rows: list[tuple]) -> pd.DataFrame:
    """Build an events frame from tuples in :data:`EVENT_COLUMNS` order.

    ``pci`` and ``device`` locate the hardware a kernel line names (a PCI id, a netdev) until the
    event is resolved to an accelerator or port; they are None after that or when unknown.
    """
    if not rows:  # most ticks: a copy of one empty frame (building one is costly in pandas)
        return _EMPTY_EVENTS.copy()
    return _events_frame(rows)


def _events_frame(rows: list[tuple]) -> pd.DataFrame:
    columns = list(zip(*rows)) if rows else [()] * len(EVENT_COLUMNS)  # built column-wise
    arrays = []
    for name, values in zip(EVENT_COLUMNS, columns):
        if name == "ts":
            arrays.append(np.asarray(values, dtype=np.float64))
        elif name == "code":
            arrays.append(pd.array(list(values), dtype="Int64"))
        else:
            column = np.empty(len(values), dtype=object)
            column[:] = values
            arrays.append(column)
    if _FROM_ARRAYS is not None:
        try:  # pandas' constructor from columns: object arrays stay object (the public one would infer str), and a
            # tick's events frame costs 0.04 ms instead of 0.5
            return _FROM_ARRAYS(arrays, columns=_event_columns(), index=pd.RangeIndex(len(rows)),
                                verify_integrity=False)
        except TypeError:  # a pandas whose private signature moved: the public way below
            pass
    return frame({name: a if name in ("ts", "code") else pd.Series(a, dtype=object, copy=False)
                  for name, a in zip(EVENT_COLUMNS, arrays)})


def _event_columns() -> pd.Index:
    index = _COLUMN_INDEX.get(EVENT_COLUMNS)
    if index is None:
        index = _COLUMN_INDEX[EVENT_COLUMNS] = pd.Index(EVENT_COLUMNS, dtype=object)
    return index


_EMPTY_EVENTS = _events_frame([])


def is_counter(metric: str) -> bool:
    """Canonical counters end in ``_total`` (the Prometheus convention the name tables follow)."""
    return metric.endswith("_total")
