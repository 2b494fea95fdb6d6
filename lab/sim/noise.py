"""Background errors of healthy parts: the counts a fleet's error counters show when nothing is wrong.

Healthy links see a symbol error now and then, healthy GPUs a correctable ECC error or a PCIe replay; some parts
much more than others (a slightly worse cable, a GPU in a noisier slot), and errors come in bursts (a cable moved,
a retraining). Each counter's noise is a per-part rate drawn once (log-normal around ``rate_per_h`` with
``spread``) plus bursts (``bursts_per_day`` per part, each of a geometric number of errors with mean
``burst_size``). A scenario names a preset (``noise: realistic``) or gives counters of its own::

    noise:
      symbol_error_total: {rate_per_h: 0.05, spread: 1.5, bursts_per_day: 0.3, burst_size: 5}

``quiet`` is the engine's noise before this module: one homogeneous rare rate per counter, no bursts. Every
counter's draws come from streams of their own, step by step (:mod:`lab.sim.streams`).

What the presets rest on (assumptions to vary, not measurements of one fleet; docs/simulator.md): IBTA's symbol
error budget of a healthy link is a bit error rate of 1e-12 (NVSentinel flags 120/h; a healthy 400G link sits
orders below it); a real H100 node's ports each showed 14 ``port_rcv_errors`` and no symbol errors since boot
(leptonai/gpud testdata, fixtures/real); NVSentinel's own guidance that PAM4 links show some raw errors as
normal; rasdaemon's page-offlining threshold of 50 corrected memory errors in 24 h as what a healthy part stays
well under; corrected PCIe errors that some hosts log for healthy devices (the AER lines quoted in public issues,
fixtures/real/quoted). ``realistic`` puts a median port at half a symbol error a day and one in twenty at several a
day, and a median GPU's kernel log at a corrected AER line every three weeks; ``noisy`` five times that, wider
spread and more bursts; ``bursty`` is ``realistic`` with a touched cable now and then, a rare burst that alone
crosses a limit's hourly count (``touches_per_day``, ``touch_size``); ``loaded`` is ``noisy`` whose errors come
with use: a GPU's replays, corrected memory errors, NVLink CRC errors and logged AER lines, and a port's receive
errors, at a tenth of the part's rate while its GPU (its node's GPUs, for a port) is idle (``idle_share``), so a
healthy part steps up by ten when a job starts on it. Assumed, not measured: no public source gives a healthy
part's errors by load; errors that need traffic (a replayed TLP, a corrupted packet, a memory read) cannot come
without it, and a link's symbol errors come on an idle link too (its lanes carry idle symbols).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from lab.sim.faults import TemplateError
from lab.sim.streams import StepStreams


@dataclass(frozen=True)
class CounterNoise:
    """One counter's healthy background."""

    rate_per_h: float
    spread: float = 0.0
    bursts_per_day: float = 0.0
    burst_size: float = 1.0
    touches_per_day: float = 0.0
    """Rare large bursts per part and day (a cable touched or reseated, a link retraining storm), each a geometric
    number of errors with mean ``touch_size``: alone over a rule's hourly limit now and then, on a healthy part."""
    touch_size: float = 0.0
    idle_share: float = 1.0
    """The part's rate while idle as a share of its rate while busy (``rate_per_h``): 1 is a rate that does not
    follow the load (a link's symbol errors: its lanes carry symbols whether or not a job sends data); less is
    errors that come with use (a GPU's PCIe replays and corrected memory errors, a port's receive errors)."""


# A healthy part stays within a tenth of what shipped tools call a fault (the rules' limits, docs/rules.md: symbol
# errors 120/h, link error recoveries 300/h, correctable ECC 50/h, the PCIe replay budget 921.6/h): a part's
# drawn rate is clipped there, or "healthy" would include parts out of spec.
AER_LOGGED = "aer_corrected_logged"
"""Not a counter: corrected PCIe errors the kernel logs for a healthy GPU, one AER line each (``Simulator``)."""
AER_LINE = "nvidia {pci}: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"

HEALTHY_MAX_PER_H = {"symbol_error_total": 12.0, "rcv_errors_total": 12.0, "link_error_recovery_total": 30.0,
                     "ecc_sbe_total": 5.0, "pcie_replay_total": 92.0, "nvlink_crc_flit_total": 100.0,
                     AER_LOGGED: 5.0}


QUIET = {"ecc_sbe_total": CounterNoise(1 / 2000), "pcie_replay_total": CounterNoise(0.01),
         "symbol_error_total": CounterNoise(1 / 168), "rcv_errors_total": CounterNoise(1 / 336)}
REALISTIC = {
    "symbol_error_total": CounterNoise(0.02, 1.5, 0.2, 4.0),
    "rcv_errors_total": CounterNoise(0.02, 1.5, 0.1, 3.0),
    "link_error_recovery_total": CounterNoise(0.001, 1.0, 0.02, 1.0),
    "ecc_sbe_total": CounterNoise(0.002, 2.0, 0.02, 3.0),
    "pcie_replay_total": CounterNoise(0.05, 2.0, 0.1, 10.0),
    "nvlink_crc_flit_total": CounterNoise(0.1, 2.0, 0.1, 20.0),
    # a healthy GPU's kernel log: a corrected PCIe error line every few weeks, a few slots every hour or so, and
    # a retraining now and then logs a handful at once (the lines real hosts print: fixtures/real/quoted)
    AER_LOGGED: CounterNoise(0.002, 2.0, 0.02, 3.0),
}
NOISY = {m: CounterNoise(n.rate_per_h * 5, n.spread + 0.5, n.bursts_per_day * 3, n.burst_size * 2)
         for m, n in REALISTIC.items()}
# ``realistic`` with a touched cable now and then (issue 53): rare bursts that alone cross a limit's hourly count, as an
# independent fleet showed (symbol errors 134/h and 165/h after one burst each, on healthy ports). Assumed, not
# measured: a port touched once in 20 days, the burst a geometric count with mean 120 (over 120 in a third of them);
# a GPU's replays the same at mean 900 (the budget's hour in one burst), link error recoveries at mean 20.
BURSTY = {**REALISTIC,
          "symbol_error_total": CounterNoise(0.02, 1.5, 0.2, 4.0, touches_per_day=0.05, touch_size=120.0),
          "link_error_recovery_total": CounterNoise(0.001, 1.0, 0.02, 1.0, touches_per_day=0.05, touch_size=20.0),
          "pcie_replay_total": CounterNoise(0.05, 2.0, 0.1, 10.0, touches_per_day=0.05, touch_size=900.0)}
LOAD_FOLLOWING = ("rcv_errors_total", "ecc_sbe_total", "pcie_replay_total", "nvlink_crc_flit_total", AER_LOGGED)
"""The counters whose healthy errors come with use (``loaded``)."""
LOADED = {m: replace(n, idle_share=0.1) if m in LOAD_FOLLOWING else n for m, n in NOISY.items()}
PRESETS = {"quiet": QUIET, "realistic": REALISTIC, "noisy": NOISY, "bursty": BURSTY, "loaded": LOADED}


def parse_noise(d: str | dict | None, where: str) -> tuple[str, dict[str, CounterNoise]]:
    """A scenario's ``noise``: a preset name or counters of its own; returns (name, counters)."""
    if d is None:
        return "quiet", QUIET
    if isinstance(d, str):
        if d not in PRESETS:
            raise TemplateError(f"{where}: unknown noise preset '{d}' (known: {', '.join(PRESETS)})")
        return d, PRESETS[d]
    if not isinstance(d, dict):
        raise TemplateError(f"{where}: a preset name or a mapping of counters")
    out = {}
    for metric, spec in d.items():
        try:
            out[str(metric)] = CounterNoise(**{k: float(v) for k, v in (spec or {}).items()})
        except TypeError as exc:
            raise TemplateError(f"{where}.{metric}: {exc}") from None
    return "custom", out


class PartNoise:
    """Per-part rates of one counter over ``n`` parts, and their increments step by step (``name``: the counter's,
    naming its draws' streams, :mod:`lab.sim.streams`)."""

    def __init__(self, spec: CounterNoise, n: int, rng: np.random.Generator, max_per_h: float = np.inf,
                 name: str = ""):
        self.spec = spec
        self.name = name
        spread = rng.normal(0.0, spec.spread, n) if spec.spread > 0 else np.zeros(n)
        self.rate_per_h = np.minimum(spec.rate_per_h * np.exp(spread), max_per_h)

    def increments(self, streams: StepStreams, steps: int, dt: float, load: np.ndarray | None = None) -> np.ndarray:
        """``[parts x steps]`` errors in steps of ``dt`` seconds; ``load`` (``[parts x steps]``, 0 idle to 1 busy)
        moves a rate that follows the load (``idle_share`` below 1) between its idle and its busy rate."""
        n, name = len(self.rate_per_h), self.name
        lam = (self.rate_per_h * dt / 3600.0)[:, None]
        if self.spec.idle_share < 1.0 and load is not None:
            lam = lam * (self.spec.idle_share + (1.0 - self.spec.idle_share) * load)
        out = streams.poisson(f"{name}.errors", lam, n, steps).astype(np.float64)
        if self.spec.bursts_per_day > 0:
            bursts = streams.poisson(f"{name}.bursts", self.spec.bursts_per_day * dt / 86400.0, n, steps)
            hit, size = streams.geometric_at(f"{name}.burst_size", 1.0 / max(self.spec.burst_size, 1.0), bursts)
            out[hit] += size * bursts[hit]
        if self.spec.touches_per_day > 0:
            touches = streams.poisson(f"{name}.touches", self.spec.touches_per_day * dt / 86400.0, n, steps)
            hit, size = streams.geometric_at(f"{name}.touch_size", 1.0 / max(self.spec.touch_size, 1.0), touches)
            out[hit] += size * touches[hit]
        return out
