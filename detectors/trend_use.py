"""Each part's time in use, for the trend detector's counters whose healthy errors may come with use.

A GPU's PCIe replays, corrected memory errors, NVLink CRC errors and corrected AER errors, and a port's receive
errors, may come with traffic: a replayed TLP, a corrupted packet, a memory read with a corrected bit need a TLP, a
packet, a read. Where they do, a healthy part counts several times more of them running a job than idle, and judged
on wall time a part idle for hours and then given a job has a quiet record and then a rise: a week of a fleet idle
half the time between jobs, its healthy parts erring at a tenth of their busy rate while idle, was flagged 311 times
in 560 node-days (bench/records/detectors-history.md, "Run 16"). Where they do not (no public source says how a
healthy part's errors follow its load), the time a part was idle is as much a record of it as the time it was busy.

So the fleet says. Each counter of :data:`USE_FOLLOWING` runs on its part's **clock in use**: the wall clock less the
time the part was idle (an accelerator whose utilisation is under :data:`~detectors.smoothing.BUSY_UTIL_PCT`; a port
while fewer than half its node's accelerators with a known utilisation are busy), its samples while idle left out (no
episode, no exposure), until the fleet shows that its errors do not follow use. Its samples with errors are counted
idle and busy, pooled over every such counter of a kind of part (accelerators, ports): once it has ``min_busy`` of
them busy, more idle than a quarter of the busy rate could give (Poisson chance at most ``follows_alpha``) says they
do not follow use, and that kind of part runs on the wall clock from then on; fewer than half the busy rate could
give says they do, and the clock in use stays. Until one is said the records judged are on the clock in use (a part
is not flagged for a job starting on it while the fleet has not yet said), and the trend detector keeps records on
the wall clock beside them, every sample in: when the fleet says its errors do not follow use, those replace the
ones in use, as had it been known from the start (:meth:`detectors.trend.TrendDetector._settle`; without them a
part's idle stretch before the answer was lost, or read as quiet: Run 16). A part whose utilisation is not exported
is always in use: its clock is the wall clock.

A symbol error or a link error recovery comes on an idle link too (its lanes carry idle symbols): those counters
run on the wall clock always.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import pdtr, pdtrc

from detectors.schema import entity_kind, name_code, name_codes, node_of
from detectors.smoothing import BUSY_UTIL_PCT
from detectors.trend_counters import LOGGED_AER, CounterRecord

USE_FOLLOWING = frozenset({
    "ecc_sbe_total", "pcie_replay_total", "nvlink_crc_flit_total", "nvlink_crc_data_total", "nvlink_replay_total",
    "xgmi_ce_total", "aer_correctable_total", "pcie_nack_received_total", LOGGED_AER, "rcv_errors_total",
    "crc_errors_total", "roce_rx_err_pkt_total", "excessive_buffer_overrun_total", "nvlink_effective_error_total",
    "c2c_crc_error_total", "c2c_replay_total", "pcie_correctable_total",
    *(f"hccs_crc_lane{n}_total" for n in range(1, 8))})
"""Counters whose healthy errors may come with traffic (see the module docstring); the others run on wall time."""

_OTHER, _ACCELERATOR, _PORT = 0, 1, 2
_KINDS = (_ACCELERATOR, _PORT)
_KIND_NAMES = {_ACCELERATOR: "accelerator", _PORT: "port"}
_NO_ROWS = np.zeros(0, dtype=np.int64)


class InUseClock:
    """Per accelerator and per node (for its ports): the seconds its clock in use lags the wall clock and whether it
    is idle now, from the utilisation the tick's gauges hold; and per kind of part, whether the fleet's errors
    follow use (None until it says)."""

    def __init__(self, min_busy: int = 50, min_expected: float = 10.0, follows_alpha: float = 1e-3) -> None:
        self.min_busy = min_busy
        self.min_expected = min_expected
        self.follows_alpha = follows_alpha
        self.follows: dict[int, bool | None] = {kind: None for kind in _KINDS}
        # per kind: samples with errors while busy, hours busy, samples with errors while idle, hours idle
        self._evidence = {kind: np.zeros(4) for kind in _KINDS}
        self._accelerators: dict[str, int] = {}
        self._nodes: dict[str, int] = {}
        self._node_of_accelerator = np.zeros(0, dtype=np.int64)
        self._lag_s = {kind: np.zeros(0) for kind in _KINDS}
        self._idle_now = {kind: np.zeros(0, dtype=bool) for kind in _KINDS}
        self._names_memo: dict[int, tuple] = {}  # id -> (names array, each name's kind, its accelerator or node index)

    def __getstate__(self) -> dict:
        """Without the names arrays kept for the last ticks (a cache: a warm state need not carry it)."""
        return dict(self.__dict__, _names_memo={})

    def settled(self) -> bool:
        """The fleet said of every kind of part that its errors do not follow use: no part lags any more, and the
        tick's utilisation need not be read."""
        return all(v is False for v in self.follows.values())

    def deciding(self) -> bool:
        """Some kind of part's errors are not yet said to follow use or not."""
        return any(v is None for v in self.follows.values())

    def observe(self, gauges, tick_s: float) -> None:
        """Take the tick's utilisation readings (held ones too): which accelerators and nodes are idle in it, and
        ``tick_s`` seconds more lag for each (of a kind whose errors may follow use)."""
        at, idle = _NO_ROWS, np.zeros(0, dtype=bool)
        if len(gauges):
            mcodes, mnames = name_codes(gauges["metric"])
            util_code = name_code(mnames, "gpu_util_pct")
            rows = np.flatnonzero(mcodes == util_code) if util_code >= 0 else _NO_ROWS
            if len(rows):
                ecodes, enames = name_codes(gauges["entity"])
                kind, index = self._index(enames)
                util = np.asarray(gauges["last"], dtype=float)[rows]
                codes = ecodes[rows]
                ok = codes >= 0
                ok[ok] &= kind[codes[ok]] == _ACCELERATOR
                ok &= np.isfinite(util)
                at, idle = index[codes[ok]], util[ok] < BUSY_UTIL_PCT
        idle_acc = np.zeros(len(self._accelerators), dtype=bool)
        known = np.zeros(len(self._accelerators), dtype=bool)
        idle_acc[at] = idle
        known[at] = True
        node = self._node_of_accelerator
        counted = np.bincount(node[known], minlength=len(self._nodes))
        busy = np.bincount(node[known & ~idle_acc], minlength=len(self._nodes))
        self._idle_now = {_ACCELERATOR: idle_acc, _PORT: (counted > 0) & (2 * busy < counted)}
        if tick_s > 0:
            for kind, idle_now in self._idle_now.items():
                if self.follows[kind] is not False:
                    self._lag_s[kind][idle_now] += tick_s

    def rows(self, ecodes: np.ndarray, enames: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For rows naming entities ``enames[ecodes]``: each part's kind, whether it is idle this tick, and the
        seconds its clock in use lags the wall clock."""
        kind, index = self._index(enames)
        k, i = kind[ecodes], index[ecodes]
        idle = np.zeros(len(ecodes), dtype=bool)
        lag = np.zeros(len(ecodes))
        for which in _KINDS:
            sel = np.flatnonzero(k == which)
            if len(sel):
                at = i[sel]
                idle[sel] = self._idle_now[which][at]
                lag[sel] = self._lag_s[which][at]
        return k, idle, lag

    def idle_counts(self, kind: np.ndarray) -> np.ndarray:
        """Whether a row of each kind counts while idle: the fleet said its errors do not follow use."""
        return self._rows_said(kind, False)

    def undecided(self, kind: np.ndarray) -> np.ndarray:
        """Whether rows of each kind are of a kind of part not yet said to follow use or not."""
        return self._rows_said(kind, None)

    def _rows_said(self, kind: np.ndarray, answer: bool | None) -> np.ndarray:
        """Rows of a kind of part whose answer is ``answer`` (False, True, or None: not yet said)."""
        out = np.zeros(len(kind), dtype=bool)
        for which in _KINDS:
            if self.follows[which] is answer:
                out |= kind == which
        return out

    def learn(self, kind: np.ndarray, idle: np.ndarray, erred: np.ndarray, hours: np.ndarray) -> list[tuple[str, bool]]:
        """Take samples of counters that may follow use (each one's kind of part, idle or not, with errors or not,
        hours it covers), and say for a kind not yet judged whether its errors follow use; returns the kinds said now
        (``accelerator``, ``port``) and what was said."""
        said = []
        for which in _KINDS:
            if self.follows[which] is not None:
                continue
            sel = kind == which
            if not sel.any():
                continue
            busy, lazy = sel & ~idle, sel & idle
            self._evidence[which] += (np.count_nonzero(busy & erred), float(hours[busy].sum()),
                                      np.count_nonzero(lazy & erred), float(hours[lazy].sum()))
            n_busy, h_busy, n_idle, h_idle = self._evidence[which]
            if n_busy < self.min_busy or h_idle <= 0:
                continue
            busy_rate = n_busy / h_busy
            half, quarter = 0.5 * busy_rate * h_idle, 0.25 * busy_rate * h_idle  # expected idle at those rates
            if quarter >= self.min_expected and pdtrc(n_idle - 1, quarter) <= self.follows_alpha:
                self.follows[which] = False  # more errors idle than a quarter of the busy rate could give
                self._lag_s[which][:] = 0.0  # the wall clock, its records the ones kept on it (TrendDetector)
            elif half >= self.min_expected and pdtr(n_idle, half) <= self.follows_alpha:
                self.follows[which] = True  # fewer than half the busy rate could give
            if self.follows[which] is not None:
                said.append((_KIND_NAMES[which], bool(self.follows[which])))
        return said

    def said(self) -> dict[str, bool | None]:
        """Per kind of part (``accelerator``, ``port``): whether the fleet's errors follow use (None: not yet
        known)."""
        return {_KIND_NAMES[k]: v for k, v in self.follows.items()}

    def lag_s(self, entity: str) -> float:
        """Seconds part ``entity``'s clock in use lags the wall clock (0 for a part of no known use)."""
        kind = entity_kind(entity)
        if kind == "accelerator":
            at = self._accelerators.get(entity)
            return 0.0 if at is None else float(self._lag_s[_ACCELERATOR][at])
        if kind == "port":
            at = self._nodes.get(node_of(entity))
            return 0.0 if at is None else float(self._lag_s[_PORT][at])
        return 0.0

    def _index(self, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each name's kind and its accelerator or node index (new ones registered), kept while the same names
        array comes."""
        memo = self._names_memo.get(id(names))
        if memo is not None and memo[0] is names:
            return memo[1], memo[2]
        kind = np.zeros(len(names), dtype=np.int8)
        index = np.zeros(len(names), dtype=np.int64)
        for j, name in enumerate(names.tolist()):
            what = entity_kind(name)
            if what == "accelerator":
                kind[j], index[j] = _ACCELERATOR, self._accelerator(name)
            elif what == "port":
                kind[j], index[j] = _PORT, self._node(node_of(name))
        if len(self._names_memo) > 8:
            self._names_memo.clear()
        self._names_memo[id(names)] = (names, kind, index)  # (holds the array: its id stays its own)
        return kind, index

    def _grow(self, kind: int) -> None:
        self._lag_s[kind] = np.append(self._lag_s[kind], 0.0)
        self._idle_now[kind] = np.append(self._idle_now[kind], False)

    def _node(self, node: str) -> int:
        at = self._nodes.get(node)
        if at is None:
            at = self._nodes[node] = len(self._nodes)
            self._grow(_PORT)
        return at

    def _accelerator(self, name: str) -> int:
        at = self._accelerators.get(name)
        if at is None:
            at = self._accelerators[name] = len(self._accelerators)
            self._node_of_accelerator = np.append(self._node_of_accelerator, self._node(node_of(name)))
            self._grow(_ACCELERATOR)
        return at


class InUseRecords:
    """The trend detector's side of the clock in use: each part's clock, the records kept on the wall clock while the
    fleet has not said, and taking them up when it says.

    A part of :class:`detectors.trend.TrendDetector`.
    """

    def _on_wall(self) -> dict[tuple[str, str], CounterRecord]:
        """The records of counters that may follow use kept on the wall clock, every sample in, while the fleet has
        not said whether they do (the records judged meanwhile are on the clock in use)."""
        wall = getattr(self, "_wall", None)
        if wall is None:
            wall = self._wall = {}
        return wall

    def _group_kinds(self) -> dict[tuple[str, str], str]:
        """The kind of part (``accelerator``, ``port``) of each exposure group of a counter that may follow use."""
        kinds = getattr(self, "_group_kind", None)
        if kinds is None:
            kinds = self._group_kind = {}
        return kinds

    def _settle(self, kind: str, follows: bool) -> None:
        """The fleet said whether its parts of ``kind``'s errors follow use: if not, their records on the wall clock
        (every sample in) replace those on the clock in use, and the fleet's exposure of their counters is every hour
        sampled; either way the wall clock's records of that kind are done with."""
        wall = self._on_wall()
        for key in [k for k in wall if entity_kind(k[0]) == kind]:
            record = wall.pop(key)
            if not follows:
                self._series[key] = record
        if not follows:  # (a series with errors counted in use has them on the wall clock too: replaced above)
            for name, acc in self._exposure.items():
                if len(acc) > 2 and self._group_kinds().get(name) == kind:
                    acc[0] = acc[2]

    def _in_use(self) -> InUseClock:
        """The parts' clocks in use (a warm state from before them starts them now)."""
        use = getattr(self, "_use", None)
        if use is None:
            use = self._use = InUseClock()
        return use

    def _series_time(self, key: tuple[str, str], now: float) -> float:
        """Series ``key``'s time: its part's clock in use for a counter whose errors follow use, else ``now``."""
        return self._series_clock(now)(key)

    def _series_clock(self, now: float) -> Callable[[tuple[str, str]], float]:
        """:meth:`_series_time` at ``now`` as a function of a series' key, worked out once for many series (the
        fleet's learning folds thousands)."""
        use = self._in_use()
        if use.settled():
            return lambda key: now
        return lambda key: now - use.lag_s(key[0]) if key[1] in USE_FOLLOWING else now
