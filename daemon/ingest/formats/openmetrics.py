"""OpenMetrics and Prometheus text exposition with timestamps, as scrapes or promtool dumps.

Timestamps are seconds in OpenMetrics (the file ends with ``# EOF``) and milliseconds in the
Prometheus text format. Both concatenated scrapes (time-major) and ``promtool tsdb
dump-openmetrics`` output (one series after another) are read the same way; ordering in time is
the job of :mod:`daemon.ingest.timeorder`. Histogram and summary series, and any metric not in the name
tables, are skipped by rule and counted; malformed lines are rejected with their position.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from pathlib import Path
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from daemon import metrics
from daemon.ingest.batch import Batch, samples_from_codes
from daemon.ingest.formats.reader import (COMPRESSED, ReadContext, decode_lines, iter_byte_blocks, open_binary,
                                          read_tail, scanned_ahead)
from daemon.ingest.naming import NOT_JOINED, reads_nan, split_series

log = logging.getLogger("raswarden.formats.openmetrics")

FORMAT = "openmetrics"
SAVED_SCRAPE_MAX = 64 << 20  # a scrape of a node's exporters is a few MB at most
_PLAUSIBLE_SECONDS = (9.0e8, 4.2e9)  # 1998 .. 2103


class OpenMetricsReader:
    """Streaming reader of exposition text; see the module docstring."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        if _saved_scrape(path):
            yield from self._read_saved_scrape(path, ctx)
            return
        mapper = ctx.mapper
        tail = read_tail(path)
        # Compressed files cannot be read from the end: their unit is told by magnitude alone.
        scale: float | None = None if tail is None else (1.0 if b"# EOF" in tail else 0.001)
        scale_checked = False
        cache: dict[str, int] = {}
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        pending = 0
        src = str(path)

        def flush() -> Batch:
            nonlocal parts, pending
            sid = np.concatenate([p[0] for p in parts])
            ts = np.concatenate([p[1] for p in parts]) * (scale or 1.0)
            value = np.concatenate([p[2] for p in parts])
            parts, pending = [], 0
            return Batch(samples=samples_frame(mapper, sid, ts, value, FORMAT))

        blocks = iter_byte_blocks(path, ctx.read_bytes, ctx.rejects, FORMAT)
        for first, raw, scanned in scanned_ahead(blocks, scan_block, ctx.scan_threads):
            block = None if scanned is None else self._name_block(scanned, first, ctx, cache, src)
            if block is None:
                sids: list[int] = []
                tss: list[float] = []
                vals: list[float] = []
                self._parse_lines(decode_lines(raw), first, ctx, cache, src, sids, tss, vals)
                block = (np.asarray(sids, dtype=np.int64), np.asarray(tss, dtype=np.float64),
                         np.asarray(vals, dtype=np.float64))
            if len(block[0]):
                parts.append(block)
                pending += len(block[0])
                if not scale_checked:  # the unit by the block's typical stamp: one damaged line cannot decide it
                    typical = float(np.median(block[1]))
                    scale = (0.001 if typical > 1e11 else 1.0) if scale is None else self._check_scale(
                        scale, typical, src)
                    scale_checked = True
            if pending >= ctx.chunk_rows:
                yield flush()
        if pending:
            yield flush()

    @staticmethod
    def _read_saved_scrape(path: Path, ctx: ReadContext) -> Iterator[Batch]:
        """One scrape saved as the exporter served it (``curl .../metrics > FILE``): no timestamps, so it is read at
        the file's modification time, said in the summary. Several scrapes in one such file cannot be told apart
        in time: refused."""
        src = str(path)
        stat = path.stat()
        if stat.st_size > SAVED_SCRAPE_MAX:
            ctx.rejects.refuse(FORMAT, src, "exposition text without timestamps, too large for one saved scrape: "
                                            "record with timestamps (promtool tsdb dump, or Prometheus' API)")
            return
        with open_binary(path, ctx.rejects, FORMAT) as fh:
            raw = fh.read()
        when = stat.st_mtime
        host = host_of_saved_scrape(path)
        saved_labels = ctx.target_labels
        if host is not None:  # beneath the series' own labels: a host they name wins
            ctx.target_labels = {"instance": host, **saved_labels}
        try:
            sid, ts, value = parse_scrape_arrays(raw, ctx, {}, src, when)
        finally:
            ctx.target_labels = saved_labels
        named = sid[ts == when]
        if len(np.unique(named)) < len(named):
            ctx.rejects.refuse(FORMAT, src, "several scrapes without timestamps in one file: their times cannot be "
                                            "told apart; save one scrape a file, or record with timestamps")
            return
        ctx.rejects.note(FORMAT, src, "a scrape without timestamps: read at the file's modification time, "
                                      f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(when))}"
                                      + (f"; series that name no host are taken to be on {host} (the file's name)"
                                         if host is not None else ""))
        if len(sid):
            yield Batch(samples=samples_frame(ctx.mapper, sid, ts, value.copy(), FORMAT))

    def _parse_block_fast(self, raw: bytes, first: int, ctx: ReadContext, cache: dict[str, int], src: str,
                          default_ts: float | None = None):
        """Parse a block of clean lines with Arrow kernels; None when the block needs the line-by-line path
        (:func:`scan_block`, then :meth:`_name_block`)."""
        scanned = scan_block(raw, default_ts)
        return None if scanned is None else self._name_block(scanned, first, ctx, cache, src)

    def _name_block(self, scanned: ScannedBlock, first: int, ctx: ReadContext, cache: dict[str, int],
                    src: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A scanned block's series ids (each new key named once, through ``cache``), stamps and values; a key
        that names no series, and a value or stamp that is not finite, rejected with its line number."""
        rows, indices, keys, v, t = scanned

        def line_no(row: int) -> int:
            return first + int(rows[row])

        firsts = np.full(len(keys), -1, dtype=np.int64)
        firsts[indices[::-1]] = np.arange(len(indices))[::-1]
        key_sid = np.empty(len(keys), dtype=np.int64)
        for k, key in enumerate(keys):
            sid = cache.get(key)
            if sid is None:
                sid = cache[key] = self._new_series(key, ctx, f"{src}:{line_no(int(firsts[k]))}")
            key_sid[k] = sid
        sid = key_sid[indices]
        good = sid >= 0
        finite = np.isfinite(v) & np.isfinite(t)
        bad = np.flatnonzero(good & ~finite)
        if len(bad):  # (an exporter's NaN "no reading", naming.NAN_MEANS_NA, goes on to be counted as not read)
            na = np.isnan(v[bad]) & np.isfinite(t[bad]) & reads_nan(ctx.mapper, sid[bad])
            finite[bad[na]] = True
            bad = bad[~na]
        for i in bad:
            why = "timestamp is not finite" if not np.isfinite(t[i]) else "value is NaN or infinite"
            ctx.rejects.reject(FORMAT, f"{src}:{line_no(int(i))}", why)
        ok = good & finite
        return sid[ok], t[ok], v[ok]

    def _parse_lines(self, lines: list[str], first: int, ctx: ReadContext, cache: dict[str, int], src: str,
                     sids: list[int], tss: list[float], vals: list[float], default_ts: float | None = None) -> None:
        """The exact, line-by-line parser: every bad line rejected with its number.

        With ``default_ts`` (a live scrape) a line without a timestamp takes it."""
        rejects = ctx.rejects
        last_key = None
        last_sid = -1
        for offset, line in enumerate(lines):
            if not line or line[0] == "#":
                continue
            if " # " in line:  # OpenMetrics exemplar: drop it
                line = line[: line.index(" # ")]
            close = line.rfind("}")
            if close == -1:
                space = line.find(" ")
                if space == -1:
                    rejects.reject(FORMAT, f"{src}:{first + offset}", "no value", line)
                    continue
                key = line[:space]
                rest = line[space:]
            else:
                key = line[: close + 1]
                rest = line[close + 1 :]
            if key != last_key:
                sid = cache.get(key)
                if sid is None:
                    sid = self._new_series(key, ctx, f"{src}:{first + offset}")
                    cache[key] = sid
                last_key = key
                last_sid = sid
            if last_sid < 0:
                continue
            parts = rest.split()
            if len(parts) == 1 and default_ts is not None:
                parts.append(default_ts)
            if len(parts) != 2:
                why = "no timestamp" if len(parts) == 1 else "expected 'value timestamp'"
                rejects.reject(FORMAT, f"{src}:{first + offset}", why, line)
                continue
            try:
                v = float(parts[0])
                t = float(parts[1])
            except ValueError:
                rejects.reject(FORMAT, f"{src}:{first + offset}", "value or timestamp is not a number", line)
                continue
            if not (math.isfinite(v) and math.isfinite(t)) and not (
                    math.isnan(v) and math.isfinite(t) and reads_nan(ctx.mapper, np.array([last_sid]))[0]):
                why = "timestamp is not finite" if not math.isfinite(t) else "value is NaN or infinite"
                rejects.reject(FORMAT, f"{src}:{first + offset}", why, line)
                continue
            sids.append(last_sid)
            tss.append(t)
            vals.append(v)

    @staticmethod
    def _new_series(key: str, ctx: ReadContext, position: str) -> int:
        try:
            name, labels = split_series(key)
        except ValueError as exc:
            ctx.rejects.reject(FORMAT, position, f"malformed series: {exc}", key)
            return -1
        if ctx.target_labels:
            labels = {**ctx.target_labels, **labels}
        return ctx.mapper.series_id(name, labels, position, FORMAT)

    @staticmethod
    def _check_scale(scale: float, typical_ts: float, src: str) -> float:
        """Guard against a file whose timestamps are in the other unit than its format implies."""
        lo, hi = _PLAUSIBLE_SECONDS
        if lo <= typical_ts * scale <= hi:
            return scale
        other = 0.001 if scale == 1.0 else 1.0
        if lo <= typical_ts * other <= hi:
            log.warning(
                "%s: timestamps look like %s although the file %s '# EOF'; reading them as %s",
                src, "milliseconds" if other == 0.001 else "seconds",
                "ends with" if scale == 1.0 else "does not end with",
                "milliseconds" if other == 0.001 else "seconds",
            )
            return other
        return scale


#: extensions of a saved scrape's file; a name before them that is an exporter's or a generic word names no host
class ScannedBlock(NamedTuple):
    """A block of clean lines as arrays, before any series is named: each data line's row in the block, its key's
    index into ``keys`` (the block's distinct series keys in order of first sight), its value and stamp."""

    rows: np.ndarray
    indices: np.ndarray
    keys: list[str]
    values: np.ndarray
    stamps: np.ndarray


def scan_block(raw: bytes | memoryview, default_ts: float | None = None) -> ScannedBlock | None:
    """Split a block of lines into keys, values and stamps with Arrow kernels; None when the block needs the
    line-by-line path.

    The block's bytes become an Arrow string array without copying (line offsets found with numpy). Clean means
    valid UTF-8 and every non-comment line exactly ``series value timestamp`` separated by single spaces (or, with
    ``default_ts``, every line ``series value``: a live scrape), with no exemplar and numbers Arrow can parse.
    Anything else goes line by line, which rejects bad lines with their numbers. It touches no shared state and
    Arrow's kernels let go of the interpreter's lock: blocks of one file are scanned side by side in threads
    (:meth:`OpenMetricsReader.read`).
    """
    buf = np.frombuffer(raw, dtype=np.uint8)
    if (buf >= 0x80).any():  # (not ASCII, which is UTF-8 and what exporters write: checked as UTF-8 whole)
        try:
            str(raw, "utf-8")
        except UnicodeDecodeError:
            return None
    empty = ScannedBlock(np.empty(0, np.int64), np.empty(0, np.int64), [], np.empty(0), np.empty(0))
    if not len(buf):
        return empty
    newlines = np.flatnonzero(buf == 10)
    starts = np.empty(len(newlines) + 1, dtype=np.int64)
    starts[0] = 0
    starts[1:] = newlines + 1
    offsets = np.append(starts, len(buf))
    lines = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(raw))
    lengths = np.diff(offsets)
    lengths[:-1] -= 1  # without the newline
    first_byte = buf[np.minimum(starts, len(buf) - 1)]
    rows = np.flatnonzero((lengths > 0) & (first_byte != ord("#")))
    if not len(rows):
        return empty
    data = lines if len(rows) == len(starts) else lines.take(pa.array(rows))
    width = 3 if default_ts is None else 2
    parts = pc.split_pattern(data, " ", max_splits=width - 1, reverse=True)
    lengths_of = pc.list_value_length(parts)
    if pc.min(lengths_of).as_py() != width or pc.max(lengths_of).as_py() != width:
        return None
    flat = parts.flatten()  # key, value[, timestamp], key, value, ... (zero copy)
    n = len(data)
    try:
        values = flat.take(pa.array(np.arange(1, width * n, width)))
        if default_ts is None:
            v = pc.cast(values, pa.float64()).to_numpy()
            stamps = pc.utf8_rtrim(flat.take(pa.array(np.arange(2, 3 * n, 3))), characters="\n")
            t = pc.cast(stamps, pa.float64()).to_numpy()
        else:
            v = pc.cast(pc.utf8_rtrim(values, characters="\r\n"), pa.float64()).to_numpy()
            t = np.full(n, default_ts)
    except pa.ArrowException:  # an unparsable number: the exact path says which line
        return None
    enc = pc.dictionary_encode(flat.take(pa.array(np.arange(0, width * n, width))))
    keys = enc.dictionary.to_pylist()
    if any(" # " in k for k in keys):  # an exemplar: the exact path strips it
        return None
    if default_ts is not None and any(" " in k and not k.endswith("}") for k in keys):
        return None  # a scrape line with its own timestamp: the exact path reads it
    return ScannedBlock(rows, enc.indices.to_numpy(), keys, v, t)


_SCRAPE_SUFFIXES = (".prom", ".metrics", ".om", ".txt")
_NOT_HOSTS = frozenset({"metrics", "scrape", "exporter", "node-exporter", "node_exporter", "dcgm-exporter",
                        "dcgm_exporter", "e2e-output", "output", "out", "dump"})


def host_of_saved_scrape(path: Path) -> str | None:
    """The host a saved scrape's file name gives, as ``<host>.dmesg`` does for a kernel log: ``gpu-node-7.prom``,
    ``gpu-node-7.node_exporter.prom``, ``10.0.1.11.metrics.gz`` (an address whole, for the topology's aliases).
    None for a name without a scrape's extension or a generic one (``metrics.prom``, ``node-exporter.prom``)."""
    name = next((path.name.removesuffix(z) for z in COMPRESSED if path.name.endswith(z)), path.name)
    stem = next((name[: -len(x)] for x in _SCRAPE_SUFFIXES if name.endswith(x)), None)
    if not stem:
        return None
    try:
        return str(ipaddress.ip_address(stem))
    except ValueError:
        pass
    host = stem.split(".", 1)[0]
    return host if host and host.lower() not in _NOT_HOSTS else None


def _saved_scrape(path: Path) -> bool:
    """Whether a file is a scrape saved as served: no sample line of its head has a timestamp (``name{labels}
    value``). One line with a timestamp makes it a recording, its lines without one rejected."""
    with open_binary(path) as fh:
        head = fh.read(65536)
    lines = head.decode("utf-8", "replace").splitlines()
    without = 0
    for line in lines[:-1] if len(head) == 65536 else lines:  # a last line cut by the head's end is not judged
        line = line.split(" # ", 1)[0].strip()  # (an exemplar)
        if not line or line.startswith("#"):
            continue
        rest = line[line.rfind("}") + 1:] if "}" in line else line.partition(" ")[2]
        if len(rest.split()) != 1:
            return False
        without += 1
    return without > 0


def points_batch(mapper, sids: list[int], tss: list[float], vals: list[float], source: str) -> Batch:
    """The points a reader collected in lists (series id, seconds, value), as one batch (:func:`samples_frame`)."""
    return Batch(samples=samples_frame(mapper, np.asarray(sids, dtype=np.int64), np.asarray(tss, dtype=np.float64),
                                       np.asarray(vals, dtype=np.float64), source))


def samples_frame(mapper, sid: np.ndarray, ts: np.ndarray, value: np.ndarray, source: str):
    """A samples frame from series ids, with each series' transform applied (bitmask to flag, scale, value map);
    values the exporter flags as not read are dropped (and counted by :meth:`SeriesMapper.transform_values`)."""
    ent_of, met_of, transform_of = mapper.series_table()
    named = ent_of[sid] >= 0
    if not named.all():  # series whose accelerator an info series has not named yet (naming.JOINS)
        mapper.values_not_read[NOT_JOINED] += int((~named).sum())
        metrics.SAMPLES_NOT_READ.labels(source).inc(int((~named).sum()))
        sid, ts, value = sid[named], ts[named], value[named]
    mapper.stamp_identities(sid, ts)
    value = mapper.transform_values(transform_of[sid], value, source)
    read = ~np.isnan(value)
    if not read.all():
        sid, ts, value = sid[read], ts[read], value[read]
    frame = samples_from_codes(ts, ent_of[sid], met_of[sid], value, mapper.entities, mapper.metrics)
    metrics.SAMPLES_INGESTED.labels(source).inc(len(frame))
    return frame


def parse_scrape_arrays(raw: bytes, ctx: ReadContext, cache: dict[str, int], src: str,
                        now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One live scrape (Prometheus text format, as exporters serve it) as arrays ``(series id, ts, value)``.

    Lines without a timestamp take ``now`` (the scrape time); an explicit timestamp is in milliseconds, as
    the text format says. ``cache`` maps series keys to ids across scrapes of the same target, so each
    series is named once. Bad lines are rejected with ``src:line``, as in a file. No frame is built here: a
    collector scraping thousands of targets builds one frame for all of them (:func:`samples_frame`).
    """
    reader = OpenMetricsReader()
    default = -1.0  # marks "no timestamp on the line": such samples take ``now`` exactly
    block = reader._parse_block_fast(raw, 1, ctx, cache, src, default_ts=default)
    if block is None:
        sids: list[int] = []
        tss: list[float] = []
        vals: list[float] = []
        reader._parse_lines(decode_lines(raw), 1, ctx, cache, src, sids, tss, vals, default_ts=default)
        block = (np.asarray(sids, dtype=np.int64), np.asarray(tss, dtype=np.float64),
                 np.asarray(vals, dtype=np.float64))
    return block[0], np.where(block[1] == default, now, block[1] * 0.001), block[2]


def parse_scrape(raw: bytes, ctx: ReadContext, cache: dict[str, int], src: str, now: float,
                 source: str = "scrape") -> Batch:
    """One live scrape as a batch (see :func:`parse_scrape_arrays`)."""
    sid, ts, value = parse_scrape_arrays(raw, ctx, cache, src, now)
    if not len(sid):
        return Batch()
    return Batch(samples=samples_frame(ctx.mapper, sid, ts, value.copy(), source))
