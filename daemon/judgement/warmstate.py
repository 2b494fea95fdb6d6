"""The warm state: what the pipeline has learned from the telemetry, kept across restarts, reloads and failover.

What the detectors learn takes hours to build: the trend detector's record of episodes per part and the fleet's
spread of healthy rates, the peer detector's baselines per load state, each series' sampling interval, the
counters' last values. The store keeps incidents and reported states (:meth:`Pipeline.restore`); without the rest a
restarted daemon, a reloaded config or a standby taking over a shard starts a new warm-up, with its first hours'
false flags and late findings (bench/records/detectors-history.md, Run 6: the only false flags were in a warm-up's
first hours).

A warm state is the pipeline's :meth:`~daemon.judgement.pipeline.Pipeline.warm_state`, pickled and compressed, written
to the
store (table ``warm_state``, one row per shard, so a standby on the same PostgreSQL takes it up) every
``service.warm_state_interval_s`` and at a clean stop. It is taken up only when the same detection code and
detection config wrote it (a digest of both) and it is no older than ``service.warm_state_max_age_s``; otherwise
the daemon says why and warms up afresh. Between two saves a crash loses what the detectors learned since the
last one (what was reported is in the store). A pickle is code: the store is trusted as a model directory is, and
only raswarden writes this table.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import time
import zlib
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path

from daemon import metrics
from daemon.judgement.pipeline import Pipeline, PipelineConfig
from daemon.store import Store
from daemon.timetext import fmt_ts

log = logging.getLogger("raswarden.warmstate")

FORMAT = 1
ROOT = Path(__file__).resolve().parents[2]
# The modules whose objects a warm state holds: the detectors, the pipeline's own trackers and health.
CODE = ("detectors", "daemon/judgement/pipeline.py", "daemon/judgement/pipeline_memory.py",
        "daemon/judgement/node_tracking.py", "daemon/judgement/health.py")


@dataclass
class WarmState:
    """One saved warm state."""

    saved_at: float  # the time of the last tick it holds
    digest: str  # of the code and detection config that wrote it (:func:`digest`)
    blob: bytes  # the compressed pickle

    @property
    def size(self) -> int:
        return len(self.blob)


@cache
def _code_digest() -> str:
    h = hashlib.sha256(f"raswarden warm state format {FORMAT}\n".encode())
    for part in CODE:
        path = ROOT / part
        for f in sorted(path.glob("*.py")) if path.is_dir() else [path]:
            h.update(f"{f.relative_to(ROOT)}\n".encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def digest(config: PipelineConfig) -> str:
    """The code and the detection config a warm state depends on (the learned model is not in it: its detectors
    are not saved)."""
    detection = {f.name: getattr(config, f.name) for f in fields(config) if f.name != "model"}
    return hashlib.sha256(f"{_code_digest()}\n{detection!r}".encode()).hexdigest()


class _Deflating:
    """A file that compresses what is written to it: a pickle dumped into it is never held whole (at 100,000
    accelerators the pickle is some 290 MB beside the pipeline it is taken from, its compressed form 27 MB)."""

    def __init__(self, level: int) -> None:
        self._zlib = zlib.compressobj(level)
        self._parts: list[bytes] = []

    def write(self, data) -> int:
        view = memoryview(data)  # (bytes, or a PickleBuffer: protocol 5 hands a large array's memory as it is)
        self._parts.append(self._zlib.compress(view))
        return view.nbytes

    def compressed(self) -> bytes:
        """What was written, compressed (zlib's format: ``zlib.decompress`` reads it); the file is done then."""
        self._parts.append(self._zlib.flush())
        return b"".join(self._parts)


def capture(pipeline: Pipeline, now: float) -> WarmState:
    """The pipeline's warm state as of its tick at ``now``."""
    out = _Deflating(1)
    pickle.dump(pipeline.warm_state(), out, protocol=pickle.HIGHEST_PROTOCOL)
    return WarmState(now, digest(pipeline.config), out.compressed())


def refusal(pipeline: Pipeline, state: WarmState, now: float, max_age_s: float) -> str | None:
    """Why ``state`` must not be taken up by ``pipeline`` at ``now`` (None: it may)."""
    if state.digest != digest(pipeline.config):
        return "it was written by other detection code or config (an upgrade or a changed [service] setting)"
    age = now - state.saved_at
    if age > max_age_s:
        return f"it is {age / 3600:.1f} h old (service.warm_state_max_age_s: {max_age_s / 3600:.1f} h)"
    if age < -60.0:
        return f"it was saved {-age:.0f} s in the future of this clock"
    return None


def take_up(pipeline: Pipeline, state: WarmState | None, now: float, max_age_s: float, source: str) -> bool:
    """Give ``pipeline`` the warm state if it may have it; says why not otherwise (and counts it), never raises.
    Call before :meth:`Pipeline.restore`."""
    if state is None:
        log.info("%s: no warm state; the detectors warm up from the next samples", source)
        return False
    why = refusal(pipeline, state, now, max_age_s)
    if why is None:
        try:
            data = pickle.loads(zlib.decompress(state.blob))
            missing = {"health", "detectors"}.difference(data) if isinstance(data, dict) else {"everything"}
            if missing:
                raise ValueError(f"it lacks {', '.join(sorted(missing))}")
        except Exception as exc:  # a truncated or foreign blob: start afresh, never stop the daemon
            why = f"it cannot be read ({type(exc).__name__}: {exc})"
    if why is not None:
        log.warning("%s: warm state of %s not taken up: %s; the detectors warm up afresh", source,
                    fmt_ts(state.saved_at), why)
        metrics.WARM_STATE.labels("take_up", "refused").inc()
        return False
    taken = pipeline.take_warm_state(data)
    log.info("%s: warm state of %s taken up (%d kB, detectors %s)", source, fmt_ts(state.saved_at),
             state.size // 1024, ", ".join(taken) or "none")
    metrics.WARM_STATE.labels("take_up", "taken").inc()
    return True


def hand_over(old: Pipeline, new: Pipeline) -> bool:
    """A reload's new pipeline takes the old one's memory as it is (no pickling: the old one is dropped), when the
    same detection code and config run both; says why not otherwise."""
    if digest(old.config) != digest(new.config):
        log.warning("reload: the detection config changed; the detectors warm up afresh")
        metrics.WARM_STATE.labels("take_up", "refused").inc()
        return False
    taken = new.take_warm_state(old.warm_state())
    log.info("reload: the detectors keep what they learned (%s)", ", ".join(taken) or "none")
    metrics.WARM_STATE.labels("take_up", "taken").inc()
    return True


def save(store: Store, shard: str, pipeline: Pipeline, now: float) -> WarmState | None:
    """Write the pipeline's warm state for ``shard`` (one row, replaced); None when it could not be written
    (logged and counted: the daemon goes on)."""
    started = time.perf_counter()
    try:
        state = capture(pipeline, now)
        store.save_warm_state(shard, state.saved_at, state.digest, state.blob)
    except Exception as exc:
        log.error("warm state for shard %s not saved: %s", shard, exc)
        metrics.WARM_STATE.labels("save", "failed").inc()
        return None
    metrics.WARM_STATE.labels("save", "saved").inc()
    metrics.WARM_STATE_BYTES.set(state.size)
    metrics.WARM_STATE_SAVE_SECONDS.set(time.perf_counter() - started)
    return state


def load(store: Store, shard: str, pipeline: Pipeline, now: float, max_age_s: float) -> bool:
    """Take up the shard's saved warm state, if any and if it may be (see :func:`take_up`)."""
    try:
        row = store.warm_state(shard)
    except Exception as exc:
        log.error("warm state for shard %s not read: %s; the detectors warm up afresh", shard, exc)
        metrics.WARM_STATE.labels("take_up", "refused").inc()
        return False
    state = WarmState(row.saved_at, row.digest, bytes(row.blob)) if row is not None else None
    return take_up(pipeline, state, now, max_age_s, f"shard {shard}")
