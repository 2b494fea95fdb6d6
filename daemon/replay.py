"""Replay: recorded telemetry through the whole pipeline, with the trace's own clock.

Readers stream every file into a :class:`~daemon.ingest.timeorder.TimeSpill`; the spill hands back one
batch per tick in time order, and each goes through the same :meth:`Pipeline.tick` the daemon runs.
Actions are never sent to a scheduler here.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO
from collections.abc import Callable

import numpy as np

from daemon.ingest.batch import Batch
from daemon.ingest.formats import ReadContext
from daemon.ingest.naming import SeriesMapper
from daemon.judgement.pipeline import Finding, Pipeline, PipelineConfig
from daemon.ingest.rejects import RejectLog
from daemon.store import Store
from daemon.ingest.timeorder import TimeSpill
from daemon.timetext import parse_zone
from daemon.ingest.trace import Trace


@dataclass
class ReplayStats:
    """What a replay read and found, for the summary."""

    files: int = 0
    samples: int = 0
    events: int = 0
    ticks: int = 0
    findings: int = 0
    duplicates: int = 0
    implausible: int = 0  # rows stamped before 2000-01-01 or after now plus the margin (corrupted stamps), rejected
    jumps: list[tuple[float, float]] = field(default_factory=list)  # stretches without data jumped over
    skipped: list[tuple[str, str]] = field(default_factory=list)  # files not read, and what they are
    wall_s: float = 0.0
    read_s: float = 0.0
    first_ts: float | None = None
    last_ts: float | None = None
    events_by_kind: dict[str, int] = field(default_factory=dict)


@dataclass
class ReplayResult:
    pipeline: Pipeline
    stats: ReplayStats
    rejects: RejectLog
    trace: Trace


EARLIEST_TS = 946684800.0  # 2000-01-01: telemetry stamped before it is a corrupted stamp, not history
LAST_PRINTABLE_TS = 253402300799.0  # 9999-12-31T23:59:59Z: past it no date can be printed, whatever is allowed
#: how far after now a replay takes a stamp by default (clocks a little ahead); ``future_s`` says otherwise
FUTURE_MARGIN_S = 86400.0
# How long replay walks a stretch without data before it jumps to the next data: longer than anything the pipeline
# does without data (a hard fault's evidence is held six hours; staleness and the telemetry incident come sooner).
IDLE_WALK_S = 6 * 3600.0


def _plausible(batch, source: str, ctx: ReadContext, stats: ReplayStats, latest: float = LAST_PRINTABLE_TS):
    """The batch without rows stamped before 2000 or after ``latest`` (rejected and counted: one flipped digit must
    not make replay walk fifty years of ticks, nor a stamp past year 9999 crash the summary after the whole run);
    widens the span that dates syslog lines (daemon.ingest.formats.kernellog)."""
    parts = {}
    for name, frame in (("samples", batch.samples), ("events", batch.events)):
        if not len(frame):
            parts[name] = frame
            continue
        ts = frame["ts"].to_numpy(dtype=float)
        early = ~(ts >= EARLIEST_TS)
        late = ts > latest
        bad = early | late | ~np.isfinite(ts)
        if bad.any():
            n = int(bad.sum())
            stats.implausible += n
            if early.any():
                ctx.rejects.reject("replay", source, f"{int(early.sum())} {name} stamped before 2000-01-01 (first: "
                                                     f"{ts[early][0]!r} s); a corrupted stamp", "")
            if late.any():
                when = "after year 9999" if latest >= LAST_PRINTABLE_TS else "more than a day after now"
                ctx.rejects.reject("replay", source, f"{int(late.sum())} {name} stamped {when} (first: "
                                                     f"{ts[late][0]!r} s); a corrupted stamp (replay --future takes "
                                                     "a trace stamped ahead)", "")
            frame = frame[~bad]
            ts = ts[~bad]
        if len(ts):
            ctx.extend_span(float(ts.min()), float(ts.max()))
        parts[name] = frame
    return Batch(samples=parts["samples"], events=parts["events"])


def _within(batch, window: tuple[float, float]):
    """The batch's rows stamped in ``(since, until]``."""
    since, until = window
    for name in ("samples", "events"):
        frame = getattr(batch, name)
        if len(frame):
            ts = frame["ts"].to_numpy(dtype=float)
            inside = (ts > since) & (ts <= until)
            if not inside.all():
                setattr(batch, name, frame[inside].reset_index(drop=True))
    return batch


def replay(
    paths: list[str | Path],
    findings_out: TextIO | None = None,
    db_url: str | None = None,
    config: PipelineConfig | None = None,
    chunk_rows: int | None = None,
    spill_dir: Path | None = None,
    progress: Callable[[str, float, float], None] | None = None,
    on_tick: Callable[[float, Pipeline], None] | None = None,
    window: tuple[float, float] | None = None,
    on_start: Callable[[Pipeline], None] | None = None,
    timezone: str | None = None,
    future_s: float | None = FUTURE_MARGIN_S,
) -> ReplayResult:
    """Replay trace paths; findings go to ``findings_out`` as JSON lines (docs/architecture.md §8). With ``window``
    ``(since, until)``, only the rows stamped in ``(since, until]``, the ticks' own bounds (a part of a long
    trace, for training). ``on_start`` is given the pipeline before its first tick (e.g. to take up the warm
    state of a replay of the part before). ``timezone`` is the zone of the stamps that name none (syslog, dmesg -T,
    nvidia-smi's CSV): the topology's ``timezone`` when not given, else UTC. Rows stamped more than ``future_s``
    after now are rejected as corrupt (None: any stamp up to year 9999, for a trace made for a date ahead)."""
    config = config or PipelineConfig()
    started = time.perf_counter()
    trace = Trace.discover(paths)
    topology = trace.topology()
    mapper = SeriesMapper(topology=topology, rejects=RejectLog())
    ctx = ReadContext(mapper=mapper, window=window, zone=parse_zone(timezone or topology.timezone or "UTC"))
    if chunk_rows:
        ctx.chunk_rows = chunk_rows
    stats = ReplayStats(files=len(trace.files))
    latest = LAST_PRINTABLE_TS if future_s is None else min(time.time() + future_s, LAST_PRINTABLE_TS)
    store = Store(db_url) if db_url else None

    def write(f: Finding) -> None:
        if findings_out is not None:
            findings_out.write(json.dumps(f.as_dict(), ensure_ascii=False) + "\n")

    pipeline = Pipeline(mapper, config, store, on_finding=write)
    if on_start is not None:
        on_start(pipeline)
    stats.skipped = [(str(p), why) for p, why in trace.skipped]
    with TimeSpill(interval=config.interval_s, directory=spill_dir) as spill:
        total_bytes = sum(p.stat().st_size for p, _ in trace.files) or 1
        done_bytes = 0
        for path, reader in trace.files:
            for batch in reader.read(path, ctx):
                batch = _plausible(batch, str(path), ctx, stats, latest)
                if window is not None:
                    batch = _within(batch, window)
                stats.samples += len(batch.samples)
                stats.events += len(batch.events)
                spill.add(batch)
            done_bytes += path.stat().st_size
            if progress:
                progress("read", done_bytes, total_bytes)
        stats.read_s = time.perf_counter() - started
        span = spill.span
        n_ticks = (span[1] - span[0] + 1) if span else 0
        idle = math.ceil(IDLE_WALK_S / config.interval_s)
        for i, (now, batch) in enumerate(spill.ticks(idle_ticks=idle, tail_ticks=config.health.enter_n)):
            result = pipeline.tick(now, batch)
            if on_tick is not None:
                on_tick(now, pipeline)
            stats.ticks += 1
            stats.findings += len(result.findings)
            if stats.first_ts is None:
                stats.first_ts = now
            stats.last_ts = now
            if progress and (i % 200 == 0 or i == n_ticks - 1):
                progress("replay", i + 1, n_ticks)
        stats.duplicates = spill.duplicates
        stats.jumps = list(spill.jumps)
    stats.events_by_kind = dict(pipeline.events_by_kind)
    stats.wall_s = time.perf_counter() - started
    if store is not None:
        store.close()
    return ReplayResult(pipeline, stats, mapper.rejects, trace)
