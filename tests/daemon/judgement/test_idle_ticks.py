"""Idle ticks take the evidence of the tick before, and the findings are those of running every detector every tick."""

import numpy as np
import pandas as pd

from daemon.ingest.batch import Batch
from daemon.ingest.naming import SeriesMapper
from daemon.judgement.idle_ticks import IdleTicks
from daemon.judgement.pipeline import Pipeline, PipelineConfig
from detectors.contract import Evidence
from detectors.schema import State, empty_events, events_frame


def _samples(ts: float, rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    return pd.DataFrame({"ts": [ts] * len(rows), "entity": pd.Series([r[0] for r in rows], dtype=object),
                         "metric": pd.Series([r[1] for r in rows], dtype=object), "value": [r[2] for r in rows]})


def _fleet(hours: float) -> list[tuple[float, Batch]]:
    """Five-minute samples of four nodes judged every 30 s: n2/gpu5 warming away from its peers after an hour, a
    port over the symbol-error limit for a while (the rate rule speaks every tick), an Xid latched on n1/gpu3 (its
    latch ends), and node n4's telemetry gone for an hour (its readings stop being current between two ticks)."""
    rng = np.random.default_rng(11)
    out = []
    symbols = 0.0
    for k in range(int(hours * 120)):
        now = 30.0 * (k + 1)
        rows: list[tuple[str, str, float]] = []
        if k % 10 == 0:
            for n in range(1, 5):
                if n == 4 and 3 * 3600 <= now < 4 * 3600:
                    continue
                for g in range(8):
                    temp = 60.0 + rng.normal(0, 0.5) + (max(0.0, (now - 3600.0) / 300.0) if (n, g) == (2, 5) else 0)
                    rows += [(f"n{n}/gpu{g}", "gpu_temp_c", temp), (f"n{n}/gpu{g}", "power_w", 400.0),
                             (f"n{n}/gpu{g}", "gpu_util_pct", 95.0)]
                symbols += 40.0 if n == 3 and 2 * 3600 <= now < 2.5 * 3600 else 0.0
                rows += [(f"n{n}/mlx5_0:1", "port_state", 4.0),
                         (f"n{n}/mlx5_0:1", "symbol_error_total", symbols if n == 3 else 0.0)]
        events = empty_events()
        if k == 300:
            events = events_frame([(now - 5.0, "n1/gpu3", "xid", 48, "error", "NVRM: Xid (PCI:0000:1b:00): 48, "
                                    "pid=1, DBE", "kernel", "0000:1b:00.0", None)])
        out.append((now, Batch(samples=_samples(now, rows), events=events)))
    return out


def _findings(reuse: bool) -> tuple[list[tuple], int]:
    p = Pipeline(SeriesMapper(), PipelineConfig(reuse_idle_evidence=reuse))
    said = []
    for now, b in _fleet(5.0):
        said += [(f.ts, f.entity, f.state, f.detector, tuple(f.reasons)) for f in p.tick(now, b).findings]
    return said, p.idle.reused


def test_idle_ticks_say_what_running_every_detector_says():
    full, none_reused = _findings(reuse=False)
    reused, count = _findings(reuse=True)
    assert none_reused == 0
    assert reused == full
    assert count > 0.5 * 5 * 120 * 0.9  # most of the nine ticks in ten without a sample
    states = {(e, s) for _, e, s, _, _ in full}
    # the warming GPU, the port over its limit (and back), the Xid's GPU all said
    assert {("n2/gpu5", "subhealthy"), ("n3/mlx5_0:1", "subhealthy"), ("n3/mlx5_0:1", "healthy"),
            ("n1/gpu3", "failed")} <= states


def test_the_evidence_of_the_tick_before_stands_only_as_long_as_every_detector_says():
    class Steady:
        name = "steady"

        def __init__(self, until: float):
            self.until = until

        def steady_until(self, now: float) -> float:
            return self.until

    idle = IdleTicks()
    assert idle.evidence_for(30.0, frozenset()) is None  # nothing ran yet
    ev = [Evidence("n1/gpu0", State.SUSPECT, "gpu_thermal", ["warm"])]
    idle.ran(30.0, ev, frozenset(), [Steady(200.0), Steady(120.0)], lambda: 95.0)
    assert idle.evidence_for(60.0, frozenset()) == ev
    assert idle.evidence_for(90.0, frozenset({"n1"})) is None  # a reboot grace began
    assert idle.evidence_for(90.0, frozenset()) == ev
    assert idle.evidence_for(120.0, frozenset()) is None  # a reading stopped being current at 95 s
    idle.ran(120.0, ev, frozenset(), [Steady(120.0)], lambda: np.inf)  # the detector's own word: run every tick
    assert idle.evidence_for(150.0, frozenset()) is None
    idle.ran(150.0, ev, frozenset(), [Steady(np.inf)], lambda: np.inf)
    assert idle.evidence_for(165.0, frozenset()) == ev
    idle.forget()  # parts replaced
    assert idle.evidence_for(180.0, frozenset()) is None and idle.reused == 3
