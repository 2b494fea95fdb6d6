"""The long columnar form ``ts, entity, metric, value`` (Parquet or CSV), as ``raswarden convert`` writes it.

Events travel beside the samples in the same form with the event columns
(:data:`detectors.schema.EVENT_COLUMNS`); a file is told apart by its columns.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from daemon import metrics
from daemon.ingest.batch import Batch, events_table, samples_from_codes
from daemon.ingest.formats.reader import ReadContext, open_binary
from detectors.schema import EVENT_COLUMNS, SAMPLE_COLUMNS, events_frame

FORMAT = "columnar"


#: the longest field the CSV reader reads (a row with a longer one breaks the file there); NAME_MAX the longest
#: name, time, value or code it takes in a row (a longer one is a corrupt row, rejected alone)
FIELD_MAX = 16 * 1024 * 1024
NAME_MAX = 1024


def _text_lines(path: Path, ctx: ReadContext) -> io.TextIOWrapper:
    """The file as UTF-8 text (a bad byte read as U+FFFD), decompressed as its name says, split at newlines only."""
    return io.TextIOWrapper(open_binary(path, ctx.rejects, FORMAT), encoding="utf-8", errors="replace", newline="\n")


WIDTH_MARK = "\ufffdfields:"
"""The first field of a row handed on for a line with the wrong number of fields (then the count)."""


class _OneRowPerLine(io.TextIOBase):
    """A CSV file's lines with each one a row: a line the csv module would run on past its end (an odd number of
    quotes opens a field that swallows the lines after it) or stop at (a carriage return or NUL inside it) is
    handed on as a row of ``width`` fields marked unreadable (U+FFFD), which costs that row alone, at its own line.
    raswarden's writer puts no line break inside a field."""

    def __init__(self, fh, width: int):
        self.fh, self.width = fh, width
        self.read_lines = 0  # lines of the file read so far
        # the file's line of each row handed on after the header (blank ones skipped), until the reader takes them
        self.row_lines: list[int] = []

    def readable(self) -> bool:
        return True

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = next(self.fh)
        self.read_lines += 1
        body = line.rstrip("\r\n")
        while not body.strip() and "\r" not in body and "\x00" not in body:  # a blank line: skipped here, so the
            line = next(self.fh)  # rows' line numbers stay the file's (pandas skipped it and miscounted after)
            self.read_lines += 1
            body = line.rstrip("\r\n")
        if self.read_lines > 1:
            self.row_lines.append(self.read_lines)
        if body.count('"') % 2 or "\r" in body or "\x00" in body:
            return "\ufffd" + "," * (self.width - 1) + "\n"
        fields = body.count(",") + 1 if '"' not in body else len(next(csv.reader([body]), []))
        if fields != self.width:  # rejected at its line (pandas' own bad-line hook is told no line number)
            return f"{WIDTH_MARK}{fields}" + "," * (self.width - 1) + "\n"
        return line

    def readline(self, size: int = -1) -> str:
        return next(self, "")

    def read(self, size: int = -1) -> str:
        return "".join(self)


class ColumnarReader:
    """Streams Parquet row groups or CSV chunks into batches; bad rows are rejected by row number."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        if path.suffix == ".parquet":
            yield from self._read_parquet(path, ctx)
        else:
            yield from self._read_csv(path, ctx)

    def _read_parquet(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        try:
            pf = pq.ParquetFile(path)
            names = set(pf.schema_arrow.names)
            is_events = "kind" in names
            # pre_buffer off: with it, pyarrow keeps what it read ahead for the life of the reader, and replaying a
            # 30-day trace (1,080 row groups) grew by 1.5 MB a batch to 2.4 GB (apache/arrow#39808, #39820)
            pf = pq.ParquetFile(path, pre_buffer=False,
                                read_dictionary=["entity", "metric"] if not is_events and {"entity", "metric"} <= names
                                else None)  # names arrive dictionary-encoded
        except (pa.ArrowException, OSError, ValueError) as exc:  # ValueError: a damaged string (not UTF-8) in it
            ctx.rejects.refuse(FORMAT, str(path), f"not a readable Parquet file: {exc}")
            return
        wanted = list(EVENT_COLUMNS if is_events else SAMPLE_COLUMNS)
        missing = [c for c in wanted if c not in names and c not in ("pci", "device")]
        if missing:
            ctx.rejects.refuse(FORMAT, str(path), f"missing columns {missing}")
            return
        row = 0
        try:
            for run in _row_group_runs(pf, ctx.window):
                row = _rows_before(pf, run[0])
                for rb in pf.iter_batches(batch_size=ctx.chunk_rows, columns=[c for c in wanted if c in names],
                                          row_groups=run):
                    frame = rb.to_pandas()
                    yield self._batch(frame, is_events, f"{path}:row", row + np.arange(len(frame)), ctx)
                    row += len(frame)
        except (pa.ArrowException, OSError, ValueError) as exc:
            ctx.rejects.reject(FORMAT, f"{path}:row {row}", f"file ends or breaks early: {exc}")

    def _read_csv(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        bad_lines: list[list[str]] = []
        try:  # the first line alone (a stray quote on the line after it must not run the header on)
            with _text_lines(path, ctx) as fh:
                header = next(csv.reader([fh.readline()]), [])
        except (OSError, EOFError, csv.Error) as exc:
            ctx.rejects.refuse(FORMAT, str(path), f"not a CSV with a header: {exc}")
            return
        is_events = "kind" in header
        wanted = EVENT_COLUMNS if is_events else SAMPLE_COLUMNS
        missing = [c for c in wanted if c not in header and c not in ("pci", "device")]
        if missing:
            ctx.rejects.refuse(FORMAT, str(path), f"missing columns {missing}")
            return
        twice = sorted({c for c in header if header.count(c) > 1})
        if twice:
            ctx.rejects.refuse(FORMAT, str(path), f"columns named twice in the header: {twice}")
            return
        # a field of any size is read, so that the row holding it is rejected alone (over 128 KiB, Python's csv
        # module raised and the rest of the file was lost, issue 54); names over NAME_MAX are refused per row below
        csv.field_size_limit(max(csv.field_size_limit(), FIELD_MAX))
        fh = _text_lines(path, ctx)
        lines = _OneRowPerLine(fh, len(header))
        reader = pd.read_csv(
            lines, chunksize=ctx.chunk_rows, dtype=str, keep_default_na=False,
            on_bad_lines=lambda fields: bad_lines.append(fields), engine="python",
            # the header's names given, so a first row with a field too many is a bad line like any other (inferred,
            # it became an index column and every later row lost its columns: found by the fuzz suite)
            names=header, header=0,
        )
        try:
            for frame in reader:
                for fields in bad_lines:
                    ctx.rejects.reject(FORMAT, f"{path}", "wrong number of fields", ",".join(fields))
                bad_lines.clear()
                at = np.asarray(lines.row_lines[:len(frame)], dtype=np.int64)
                del lines.row_lines[:len(frame)]  # only the rows read ahead of the chunks are kept
                yield self._batch(frame, is_events, f"{path}:line", at, ctx)
        except (pd.errors.ParserError, UnicodeDecodeError, csv.Error) as exc:
            at = lines.row_lines[0] if lines.row_lines else lines.read_lines + 1
            ctx.rejects.reject(FORMAT, f"{path}:line {at}", f"file ends or breaks early: {exc}")
        finally:
            fh.close()

    @staticmethod
    def _batch(frame: pd.DataFrame, is_events: bool, where: str, lines: np.ndarray, ctx: ReadContext) -> Batch:
        """A chunk's rows as a batch; ``lines``: each row's line in the file (a Parquet file's: its row number)."""
        # a byte that is not UTF-8 (read as U+FFFD) costs its row, not the file: rejected with its line
        names = [c for c in ("ts", "entity", "metric", "value", "kind", "code")
                 if c in frame and pd.api.types.is_string_dtype(frame[c])]  # a CSV's text, not Parquet's numbers
        garbled = np.zeros(len(frame), dtype=bool)
        for c in names:
            garbled |= frame[c].str.contains("\ufffd", regex=False, na=False).to_numpy(dtype=bool)
            garbled |= (frame[c].str.len() > NAME_MAX).to_numpy(dtype=bool, na_value=False)
        if garbled.any():
            first = frame[frame.columns[0]].to_numpy(object)
            for i in np.flatnonzero(garbled)[:50]:
                if isinstance(first[i], str) and first[i].startswith(WIDTH_MARK):
                    ctx.rejects.reject(FORMAT, f"{where} {lines[i]}", f"{first[i][len(WIDTH_MARK):]} fields where the "
                                       f"header has {len(frame.columns)}")
                    continue
                ctx.rejects.reject(FORMAT, f"{where} {lines[i]}",
                                   f"a byte that is not UTF-8, a stray quote, carriage return or NUL, or a name or "
                                   f"number over {NAME_MAX} characters")
            frame, lines = frame[~garbled], lines[~garbled]
        ts = pd.to_numeric(frame["ts"], errors="coerce").to_numpy(dtype=np.float64)
        if is_events:
            good = np.isfinite(ts)
            for i in np.flatnonzero(~good)[:50]:
                ctx.rejects.reject(FORMAT, f"{where} {lines[i]}", "ts is not a number")
            f = frame[good]
            code = pd.to_numeric(f["code"], errors="coerce") if "code" in f else None
            if code is not None:  # a code no int64 holds is a corrupt row: no code (counted as unjudged downstream)
                code = code.where(code.abs() < 2**62)
            rows = [
                (float(t), str(e), str(k), None if code is None or pd.isna(c) else int(c), str(s), str(m), str(src),
                 (p or None) if isinstance(p, str) else None, (d or None) if isinstance(d, str) else None)
                for t, e, k, c, s, m, src, p, d in zip(
                    ts[good], f["entity"], f["kind"], code if code is not None else [None] * len(f),
                    f["severity"], f["message"], f["source"],
                    f["pci"] if "pci" in f else [None] * len(f), f["device"] if "device" in f else [None] * len(f),
                )
            ]
            return Batch(events=events_frame(rows))
        value = pd.to_numeric(frame["value"], errors="coerce").to_numpy(dtype=np.float64)
        mapper = ctx.mapper
        ent_codes, ent_ok = _intern(frame["entity"], mapper.entity_code)
        met_codes, met_ok = _intern(frame["metric"], mapper.metric_code)
        good = np.isfinite(ts) & np.isfinite(value) & ent_ok & met_ok
        if not good.all():
            for i in np.flatnonzero(~good):
                ctx.rejects.reject(FORMAT, f"{where} {lines[i]}",
                                   "ts or value is not a finite number, or a name is empty")
        out = samples_from_codes(ts[good], ent_codes[good], met_codes[good], value[good],
                                 mapper.entities, mapper.metrics)
        metrics.SAMPLES_INGESTED.labels(FORMAT).inc(len(out))
        return Batch(samples=out)


def _row_group_runs(pf: pq.ParquetFile, window: tuple[float, float] | None) -> list[list[int]]:
    """The row groups that may hold rows stamped in ``window`` ``(since, until]``, as runs of neighbours: all of
    them without a window; with one, those whose ``ts`` statistics reach into it (a group without them is read)."""
    meta = pf.metadata
    groups = list(range(meta.num_row_groups))
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if window is not None and "ts" in names:
        col, (since, until) = names.index("ts"), window

        def within(g: int) -> bool:
            stats = meta.row_group(g).column(col).statistics
            return stats is None or not stats.has_min_max or not (float(stats.max) <= since or float(stats.min) > until)

        groups = [g for g in groups if within(g)]
    runs: list[list[int]] = []
    for g in groups:
        if runs and runs[-1][-1] == g - 1:
            runs[-1].append(g)
        else:
            runs.append([g])
    return runs


def _rows_before(pf: pq.ParquetFile, group: int) -> int:
    """The row number of a row group's first row (rejects name rows by their place in the file)."""
    return sum(pf.metadata.row_group(g).num_rows for g in range(group))


def _intern(column: pd.Series, code_of) -> tuple[np.ndarray, np.ndarray]:
    """Map a column of names to the mapper's codes, looking up each distinct name once."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
        names = list(column.cat.categories)
    else:
        codes, uniques = pd.factorize(column.astype(str))
        names = list(uniques)
    table = np.array([code_of(str(n)) if isinstance(n, str) and n else -1 for n in names] + [-1], dtype=np.int64)
    mapped = table[codes]  # code -1 (missing) takes the trailing -1
    return np.where(mapped < 0, 0, mapped), mapped >= 0


class ColumnarWriter:
    """Writes samples and events to ``samples.parquet``/``events.parquet`` (or ``.csv``) in a directory."""

    def __init__(self, directory: Path, fmt: str = "parquet"):
        self.directory = directory
        self.fmt = fmt
        directory.mkdir(parents=True, exist_ok=True)
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._csv_started: set[str] = set()
        self.rows = {"samples": 0, "events": 0}

    def write(self, batch: Batch) -> None:
        if len(batch.samples):
            self._write("samples", batch.samples)
        if len(batch.events):
            self._write("events", batch.events)

    def _write(self, name: str, frame: pd.DataFrame) -> None:
        self.rows[name] += len(frame)
        if self.fmt == "csv":
            target = self.directory / f"{name}.csv"
            text = [c for c in frame.columns if frame[c].dtype == object]
            if text:  # one row a line (the reader's rule): a line break inside a value becomes a space
                frame = frame.assign(**{c: frame[c].str.replace(r"[\r\n]", " ", regex=True) for c in text})
            frame.to_csv(target, mode="a", header=name not in self._csv_started, index=False)
            self._csv_started.add(name)
            return
        if name == "samples":
            table = pa.table({
                "ts": pa.array(frame["ts"].to_numpy()),
                "entity": pa.array(frame["entity"].astype(str).to_numpy()).dictionary_encode(),
                "metric": pa.array(frame["metric"].astype(str).to_numpy()).dictionary_encode(),
                "value": pa.array(frame["value"].to_numpy()),
            })
        else:
            table = events_table(frame)
        writer = self._writers.get(name)
        if writer is None:
            writer = self._writers[name] = pq.ParquetWriter(self.directory / f"{name}.parquet", table.schema)
        else:
            table = table.cast(writer.schema)
        writer.write_table(table)

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
