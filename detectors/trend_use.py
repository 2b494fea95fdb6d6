"""Each part's time in use, for the trend detector's counters whose healthy errors come with use.

A GPU's PCIe replays, corrected memory errors, NVLink CRC errors and corrected AER errors, and a port's receive
errors, come with traffic: a healthy part counts several times more of them running a job than idle (a replayed TLP,
a corrupted packet, a memory read with a corrected bit need a TLP, a packet, a read). Judged on wall time, a healthy
part idle for hours and then given a job has a quiet record and then a rise, and the trend detector flagged it
(a week of a fleet idle half the time between jobs, its healthy parts erring at a tenth of their busy rate while
idle: 311 false flags in 560 node-days; bench/records/detectors-history.md, "Run 16"). A link's symbol errors and
link error recoveries come on an idle link too (its lanes carry idle symbols) and are judged on wall time.

So a counter of :data:`USE_FOLLOWING` is judged on its part's **clock in use**: the wall clock less the time the part
was idle (an accelerator whose utilisation is under :data:`~detectors.smoothing.BUSY_UTIL_PCT`; a port while fewer
than half its node's accelerators with a known utilisation are busy). Its samples while idle are left out (no
episode, no exposure), and its windows (1, 3 and 12 hours) are hours in use. A part whose utilisation is not
exported is always in use: its clock is the wall clock, as before.
"""

from __future__ import annotations

import numpy as np

from detectors.schema import entity_kind, name_codes, name_code, node_of
from detectors.smoothing import BUSY_UTIL_PCT
from detectors.trend_counters import LOGGED_AER

USE_FOLLOWING = frozenset({
    "ecc_sbe_total", "pcie_replay_total", "nvlink_crc_flit_total", "nvlink_crc_data_total", "nvlink_replay_total",
    "xgmi_ce_total", "aer_correctable_total", "pcie_nack_received_total", LOGGED_AER, "rcv_errors_total",
    "crc_errors_total", "roce_rx_err_pkt_total", "excessive_buffer_overrun_total",
    *(f"hccs_crc_lane{n}_total" for n in range(1, 8))})
"""Counters whose healthy errors come with traffic (see the module docstring); the others run on wall time."""

_OTHER, _ACCELERATOR, _PORT = 0, 1, 2
_NO_ROWS = np.zeros(0, dtype=np.int64)


class InUseClock:
    """Idle seconds per accelerator and per node (for its ports), from the utilisation the tick's gauges hold."""

    def __init__(self) -> None:
        self._accelerators: dict[str, int] = {}
        self._nodes: dict[str, int] = {}
        self._node_of_accelerator = np.zeros(0, dtype=np.int64)
        self._idle_s = {_ACCELERATOR: np.zeros(0), _PORT: np.zeros(0)}
        self._idle_now = {_ACCELERATOR: np.zeros(0, dtype=bool), _PORT: np.zeros(0, dtype=bool)}
        self._names_memo: dict[int, tuple] = {}  # id -> (names array, each name's kind, its accelerator or node index)

    def observe(self, gauges, tick_s: float) -> None:
        """Take the tick's utilisation readings (held ones too) and count ``tick_s`` seconds idle for each
        accelerator and node idle in it."""
        at, idle = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
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
        idle_node = (counted > 0) & (2 * busy < counted)
        self._idle_now = {_ACCELERATOR: idle_acc, _PORT: idle_node}
        if tick_s > 0:
            for kind, idle_now in self._idle_now.items():
                self._idle_s[kind][idle_now] += tick_s

    def rows(self, ecodes: np.ndarray, enames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For rows naming entities ``enames[ecodes]``: whether each part is idle this tick, and the seconds it has
        been idle (its clock in use is the wall clock less those)."""
        kind, index = self._index(enames)
        k, i = kind[ecodes], index[ecodes]
        idle = np.zeros(len(ecodes), dtype=bool)
        idle_s = np.zeros(len(ecodes))
        for which in (_ACCELERATOR, _PORT):
            sel = np.flatnonzero(k == which)
            if len(sel):
                at = i[sel]
                idle[sel] = self._idle_now[which][at]
                idle_s[sel] = self._idle_s[which][at]
        return idle, idle_s

    def idle_s(self, entity: str) -> float:
        """Seconds part ``entity`` has been idle (0 for a part of no known use)."""
        kind = entity_kind(entity)
        if kind == "accelerator":
            at = self._accelerators.get(entity)
            return 0.0 if at is None else float(self._idle_s[_ACCELERATOR][at])
        if kind == "port":
            at = self._nodes.get(node_of(entity))
            return 0.0 if at is None else float(self._idle_s[_PORT][at])
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

    def _node(self, node: str) -> int:
        at = self._nodes.get(node)
        if at is None:
            at = self._nodes[node] = len(self._nodes)
            self._idle_s[_PORT] = np.append(self._idle_s[_PORT], 0.0)
            self._idle_now[_PORT] = np.append(self._idle_now[_PORT], False)
        return at

    def _accelerator(self, name: str) -> int:
        at = self._accelerators.get(name)
        if at is None:
            at = self._accelerators[name] = len(self._accelerators)
            self._node_of_accelerator = np.append(self._node_of_accelerator, self._node(node_of(name)))
            self._idle_s[_ACCELERATOR] = np.append(self._idle_s[_ACCELERATOR], 0.0)
            self._idle_now[_ACCELERATOR] = np.append(self._idle_now[_ACCELERATOR], False)
        return at

    def __getstate__(self) -> dict:
        """Without the names arrays kept for the last ticks (a cache: a warm state need not carry it)."""
        return dict(self.__dict__, _names_memo={})
