"""Put recorded telemetry in time order with bounded memory, and cut it into tick batches.

Readers deliver rows in file order: concatenated scrapes are time-major, ``promtool tsdb
dump-openmetrics`` writes one series after another. :class:`TimeSpill` partitions every incoming
chunk by time bucket into Arrow IPC files on disk (one file per chunk and bucket), then replays the
buckets in order, sorting one bucket at a time. Events are spilled the same way. Memory is bounded
by a chunk plus a bucket, whatever the trace length.

Tick ``k`` covers ``(k*interval - interval, k*interval]`` (docs/architecture.md §1). Within a bucket rows are
sorted by (time, entity, metric, value) on the *names*, never on interning order, and exact
duplicates (same entity, metric and time) are dropped, so the batches — and so the findings — are
the same whatever the file order, chunk size or speed.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather

from daemon.ingest.batch import Batch, events_table
from detectors.contract import TICK_S
from detectors.schema import EVENT_COLUMNS, empty_events, empty_samples, events_frame


def tick_index(ts: np.ndarray, interval: float) -> np.ndarray:
    """Index ``k`` of the tick ``(k*interval - interval, k*interval]`` each time falls in."""
    return np.ceil(np.asarray(ts, dtype=np.float64) / interval).astype(np.int64)


@dataclass
class TimeSpill:
    """An on-disk, time-partitioned buffer; ``add`` chunks in any order, then iterate ``ticks``."""

    interval: float = TICK_S
    bucket_ticks: int = 120
    directory: Path | None = None
    duplicates: int = 0
    jumps: list[tuple[float, float]] = field(default_factory=list)  # stretches without data jumped over
    _files: dict[int, list[Path]] = field(default_factory=lambda: defaultdict(list))
    _event_files: dict[int, list[Path]] = field(default_factory=lambda: defaultdict(list))
    _owned: bool = False
    _seq: int = 0
    _first: int | None = None
    _last: int | None = None

    def __post_init__(self) -> None:
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="raswarden-spill-"))
            self._owned = True
        else:
            Path(self.directory).mkdir(parents=True, exist_ok=True)

    def _span(self, ticks: np.ndarray) -> None:
        lo, hi = int(ticks.min()), int(ticks.max())
        self._first = lo if self._first is None else min(self._first, lo)
        self._last = hi if self._last is None else max(self._last, hi)

    def add(self, batch: Batch) -> None:
        """Partition a batch's rows by bucket and spill them."""
        if len(batch.samples):
            self._add_samples(batch.samples)
        if len(batch.events):
            ev = batch.events
            ticks = tick_index(ev["ts"].to_numpy(), self.interval)
            self._span(ticks)
            buckets = ticks // self.bucket_ticks
            for b in np.unique(buckets):
                part = ev[buckets == b]
                table = events_table(part)
                path = Path(self.directory) / f"e{int(b)}-{self._seq}.arrow"
                self._seq += 1
                feather.write_feather(table, path, compression="uncompressed")
                self._event_files[int(b)].append(path)

    def _add_samples(self, frame: pd.DataFrame) -> None:
        ticks = tick_index(frame["ts"].to_numpy(), self.interval)
        self._span(ticks)
        buckets = ticks // self.bucket_ticks
        order = np.argsort(buckets, kind="stable")
        sorted_buckets = buckets[order]
        cuts = np.flatnonzero(np.diff(sorted_buckets)) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [len(order)]))
        ent = frame["entity"].cat
        met = frame["metric"].cat
        ent_dict = pa.array(np.asarray(ent.categories, dtype=object), type=pa.string())
        met_dict = pa.array(np.asarray(met.categories, dtype=object), type=pa.string())
        ts = frame["ts"].to_numpy()
        val = frame["value"].to_numpy()
        ent_codes = ent.codes.to_numpy() if hasattr(ent.codes, "to_numpy") else np.asarray(ent.codes)
        met_codes = met.codes.to_numpy() if hasattr(met.codes, "to_numpy") else np.asarray(met.codes)
        for s, e in zip(starts, ends):
            idx = order[s:e]
            table = pa.table({
                "ts": ts[idx],
                "entity": pa.DictionaryArray.from_arrays(pa.array(ent_codes[idx].astype(np.int32)), ent_dict),
                "metric": pa.DictionaryArray.from_arrays(pa.array(met_codes[idx].astype(np.int32)), met_dict),
                "value": val[idx],
            })
            bucket = int(sorted_buckets[s])
            path = Path(self.directory) / f"b{bucket}-{self._seq}.arrow"
            self._seq += 1
            feather.write_feather(table, path, compression="uncompressed")
            self._files[bucket].append(path)

    def _load_samples(self, bucket: int) -> pd.DataFrame:
        paths = self._files.pop(bucket, [])
        if not paths:
            return empty_samples()
        tables = [feather.read_table(p, memory_map=False) for p in paths]
        for p in paths:
            p.unlink(missing_ok=True)
        table = pa.concat_tables(tables).unify_dictionaries().combine_chunks()
        frame = pd.DataFrame({
            "ts": table.column("ts").to_numpy(),
            "entity": _sorted_categorical(table.column("entity")),
            "metric": _sorted_categorical(table.column("metric")),
            "value": table.column("value").to_numpy(),
        })
        order, repeats = _row_order(frame["ts"].to_numpy(), frame["entity"].cat.codes.to_numpy(),
                                    frame["metric"].cat.codes.to_numpy(), frame["value"].to_numpy())
        frame = frame.iloc[order].reset_index(drop=True)
        if not repeats:
            return frame
        ts = frame["ts"].to_numpy()
        ent = frame["entity"].cat.codes.to_numpy()
        met = frame["metric"].cat.codes.to_numpy()
        dup = np.zeros(len(frame), dtype=bool)  # sorted, so duplicates are neighbours
        dup[1:] = (ts[1:] == ts[:-1]) & (ent[1:] == ent[:-1]) & (met[1:] == met[:-1])
        if dup.any():
            self.duplicates += int(dup.sum())
            frame = frame[~dup].reset_index(drop=True)
        return frame

    def _load_events(self, bucket: int) -> pd.DataFrame:
        paths = self._event_files.pop(bucket, [])
        if not paths:
            return empty_events()
        table = pa.concat_tables([feather.read_table(p, memory_map=False) for p in paths])
        for p in paths:
            p.unlink(missing_ok=True)
        frame = table.to_pandas()
        frame = frame.sort_values(
            ["ts", "entity", "kind", "code", "message", "source"], kind="stable", na_position="first"
        ).reset_index(drop=True)
        records = frame[list(EVENT_COLUMNS)].itertuples(index=False, name=None)
        rows = [(t, e, k, None if pd.isna(c) else int(c), sev, msg, src, pci, dev)
                for t, e, k, c, sev, msg, src, pci, dev in records]
        return events_frame(rows)

    @property
    def span(self) -> tuple[int, int] | None:
        """First and last tick index seen, or None when nothing was added."""
        if self._first is None or self._last is None:
            return None
        return self._first, self._last

    def ticks(self, idle_ticks: int | None = None, tail_ticks: int = 0) -> Iterator[tuple[float, Batch]]:
        """The ticks in order, each with its (possibly empty) batch.

        With ``idle_ticks`` None, every tick from the first to the last. Otherwise a stretch with no data is
        walked for ``idle_ticks`` empty ticks after the last data (enough for what the pipeline does without
        data: staleness, latches running out) and then jumped over to the next tick with data (recorded in
        :attr:`jumps`): a 2020 dmesg beside this year's syslog costs nothing. ``tail_ticks`` empty ticks follow
        the last data, so that evidence of the last tick still passes the health hysteresis.
        """
        if self.span is None:
            return
        first, last = self.span
        buckets = sorted(set(self._files) | set(self._event_files))
        walk = math.inf if idle_ticks is None else idle_ticks
        last_data = first - 1  # the last tick with data so far
        next_tick = first  # the next tick to yield: never one twice, never back in time
        empty = Batch(samples=empty_samples(), events=empty_events())
        for bucket, samples, events in self._loaded(buckets):
            start = bucket * self.bucket_ticks
            if idle_ticks is None:
                for k in range(next_tick, start):
                    yield k * self.interval, empty
                next_tick = max(next_tick, start)
            else:
                for k in range(next_tick, min(start, last_data + idle_ticks + 1)):
                    yield k * self.interval, empty
                    next_tick = k + 1
            s_ticks = tick_index(samples["ts"].to_numpy(), self.interval)
            e_ticks = tick_index(events["ts"].to_numpy(), self.interval)
            bounds = np.arange(start, start + self.bucket_ticks + 1)
            s_cuts = np.searchsorted(s_ticks, bounds)
            e_cuts = np.searchsorted(e_ticks, bounds)
            for j in range(self.bucket_ticks):
                k = start + j
                if k < next_tick or k > last:
                    continue
                has_data = s_cuts[j + 1] > s_cuts[j] or e_cuts[j + 1] > e_cuts[j]
                if not has_data and k > last_data + walk:
                    continue
                if k > next_tick and next_tick > last_data + walk:
                    self.jumps.append(((next_tick - 1) * self.interval, k * self.interval))
                if has_data:
                    last_data = k
                next_tick = k + 1
                yield k * self.interval, Batch(
                    samples=samples.iloc[s_cuts[j] : s_cuts[j + 1]],
                    events=events.iloc[e_cuts[j] : e_cuts[j + 1]],
                )
        for k in range(max(next_tick, last + 1), last + tail_ticks + 1):
            yield k * self.interval, empty

    def _loaded(self, buckets: list[int]) -> Iterator[tuple[int, pd.DataFrame, pd.DataFrame]]:
        """Each bucket with its samples and events, in order, the next bucket loaded in a thread while the caller
        ticks this one (reading and sorting it is mostly Arrow's and numpy's work, which let go of the interpreter's
        lock): two buckets in memory at most."""
        def load(bucket: int) -> tuple[int, pd.DataFrame, pd.DataFrame]:
            return bucket, self._load_samples(bucket), self._load_events(bucket)

        if not buckets:
            return
        with ThreadPoolExecutor(1, thread_name_prefix="raswarden-spill") as pool:
            ahead = pool.submit(load, buckets[0])
            for following in [*buckets[1:], None]:
                loaded = ahead.result()
                if following is not None:
                    ahead = pool.submit(load, following)
                yield loaded

    def close(self) -> None:
        """Remove spilled files (the whole directory when this spill created it)."""
        if self._owned and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        else:
            for paths in [*self._files.values(), *self._event_files.values()]:
                for p in paths:
                    p.unlink(missing_ok=True)
        self._files.clear()
        self._event_files.clear()

    def __enter__(self) -> TimeSpill:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _row_order(ts: np.ndarray, ent: np.ndarray, met: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, bool]:
    """The order of a bucket's rows by (time, entity, metric, value), and whether a (time, entity, metric) may
    repeat (whether one does, unless the single key would overflow).

    Without repeats the value never decides, and one sort of a single integer key (the time's rank, then the
    codes) gives the order of the four-key ``np.lexsort`` in a fraction of its time; with repeats, the four-key
    sort."""
    n = len(ts)
    if not n:
        return np.zeros(0, dtype=np.int64), False
    step = np.diff(ts)
    if (step >= 0).all():  # readers deliver time order nearly always: the rank without a sort
        rank = np.zeros(n, dtype=np.int64)
        np.cumsum(step > 0, out=rank[1:])
    else:
        rank = np.unique(ts, return_inverse=True)[1].astype(np.int64).reshape(-1)
    n_ent, n_met = int(ent.max(initial=-1)) + 2, int(met.max(initial=-1)) + 2
    if (int(rank.max()) + 1) * n_ent * n_met < 2**62:
        key = (rank * n_ent + (ent.astype(np.int64) + 1)) * n_met + (met.astype(np.int64) + 1)
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        if not (ordered[1:] == ordered[:-1]).any():
            return order, False
    return np.lexsort((value, met, ent, ts)), True


def _sorted_categorical(column: pa.ChunkedArray) -> pd.Categorical:
    """A categorical whose categories are in name order, so code order is name order."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    cats = np.asarray(arr.dictionary.to_pylist(), dtype=object)
    codes = arr.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(cats, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return pd.Categorical.from_codes(rank[codes], categories=pd.Index(cats[order], dtype=object), validate=False)
