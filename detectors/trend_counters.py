"""The counters the trend detector judges (detectors/trend.py): each one's prior healthy rate, category and words, the
windows, and one counter's record on one part (:class:`CounterRecord`)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from operator import itemgetter

import numpy as np

LOGGED_AER = "aer_corrected_logged"
LOGGED_AER_NAMES = np.array([LOGGED_AER], dtype=object)

# counter -> (prior healthy episodes per hour, category, words)
#
# Where the priors come from: no public source gives a healthy part's rate per counter, so they are bounds, not
# measurements. The ceilings are the limits shipped tools call a fault (docs/fleet-stats.md: IBTA's bit error rate of
# 1e-12, i.e. 120 symbol errors an hour; DCGM's PCIe replay budget; rasdaemon offlining a page after 50 corrected
# errors in 24 h); the floors are what real healthy parts showed (leptonai/gpud's H100 node, fixtures/real: no
# symbol errors and 14 receive errors per port since boot; treydock/infiniband_exporter's perfquery fixtures:
# SymbolErrorCounter 0 on every port). Each prior sits orders of magnitude under its ceiling and near one
# episode a day or two. It only matters while the fleet's own spread is unknown: the fleet's log-normal is fitted
# with its median drawn towards the prior (a normal of sd 3 on the log rate) and its spread towards
# ``prior_spread`` (sd 1 on the log), which a fleet of a thousand parts outweighs within hours; and until a part
# has a record as long as the window an alarm is only a watch.
COUNTERS = {
    "ecc_sbe_total": (1 / 500, "gpu_memory", "correctable ECC errors"),
    "pcie_replay_total": (1 / 50, "gpu_bus", "PCIe replays"),
    "symbol_error_total": (1 / 50, "fabric_link", "symbol errors"),
    "link_error_recovery_total": (1 / 500, "fabric_link", "link error recoveries"),
    "rcv_errors_total": (1 / 100, "fabric_link", "receive errors"),
    # an Ethernet (RoCE) port's, from mlx5's ethtool counters (node_exporter's ethtool collector): symbol errors FEC
    # did not correct, and frames with a bad CRC (detectors/rules.py, LINK_DOWN_COUNTERS)
    "pcs_symbol_error_total": (1 / 50, "fabric_link", "symbol errors after FEC"),
    # InfiniBand counters of a link out of its specification (detectors/rules_levels.py, LINK_INTEGRITY_COUNTERS):
    # zero on every healthy port sampled (infiniband_exporter's perfquery fixtures, fixtures/real), like link error
    # recoveries
    "local_link_integrity_errors_total": (1 / 500, "fabric_link", "local link integrity errors"),
    "excessive_buffer_overrun_total": (1 / 500, "fabric_link", "excessive buffer overrun errors"),
    "crc_errors_total": (1 / 100, "fabric_link", "CRC errors"),
    # an Ascend NPU's own RoCE port (npu-exporter): packets received in error. Not its retransmissions
    # (roce_retry_total): a transport's retries follow the far end and the fabric's congestion, not this link
    "roce_rx_err_pkt_total": (1 / 100, "fabric_link", "RoCE receive errors"),
    "nvlink_crc_flit_total": (1 / 10, "scaleup_link", "NVLink CRC errors"),
    # DCGM's other NVLink error counters (its health watch judges all four against its NVLink error threshold):
    # data CRC errors and replays like the flit CRC errors, recoveries (a link retrained) rarer
    "nvlink_crc_data_total": (1 / 10, "scaleup_link", "NVLink data CRC errors"),
    "nvlink_replay_total": (1 / 10, "scaleup_link", "NVLink replays"),
    "nvlink_recovery_total": (1 / 500, "scaleup_link", "NVLink recoveries"),
    # NVLink 5's (Blackwell) own counters (DCGM fields 1209, 1219): errors forward error correction left (each one a
    # replay), and the link's local errors over their threshold; its successful recoveries (1211) are
    # nvlink_recovery_total (here, and a rate rule at DCGM's limit: rules_levels), its failed ones a rule. Rare on a
    # healthy link, as the InfiniBand counters they follow: a GB200 link that went down (Xid 149) had counted 505
    # recoveries and kept counting in the five days before, where the 5,759 other links swept with it counted none
    # (marin-community/marin issue 9086)
    "nvlink_effective_error_total": (1 / 500, "scaleup_link", "NVLink errors after FEC"),
    "nvlink_link_integrity_total": (1 / 500, "scaleup_link", "NVLink local link integrity errors"),
    # Grace-Blackwell's chip-to-chip link between the CPU and the GPU (DCGM fields 1400, 1401): CRC errors and replays
    "c2c_crc_error_total": (1 / 10, "gpu_bus", "C2C link CRC errors"),
    "c2c_replay_total": (1 / 10, "gpu_bus", "C2C link replays"),
    # the GPU's own count of its PCIe correctable errors (DCGM field 1501), beside the kernel's (aer_correctable_total,
    # sysfs): named apart, as a fleet may read both and they count from different starts
    "pcie_correctable_total": (1 / 50, "gpu_bus", "PCIe correctable errors"),
    "xgmi_ce_total": (1 / 10, "scaleup_link", "XGMI correctable errors"),
    # The kernel's per-device AER counters (sysfs aer_dev_correctable): any vendor's PCIe link, and for an
    # NPU whose exporter has no replay counter the only early sign of a link going bad.
    "aer_correctable_total": (1 / 50, "gpu_bus", "PCIe AER corrected errors"),
    # AMD's own PCIe link counters (device-metrics-exporter): NAKs received (a TLP the far end had to ask again for,
    # as replays) and link recoveries (the link retrained)
    "pcie_nack_received_total": (1 / 50, "gpu_bus", "PCIe NAKs received"),
    "pcie_recovery_total": (1 / 500, "gpu_bus", "PCIe link recoveries"),
    **{f"hccs_crc_lane{n}_total": (1 / 10, "scaleup_link", f"HCCS lane {n} CRC errors") for n in range(1, 8)},
    # The kernel's AER lines of severity Corrected on an accelerator, counted as the counter the kernel log is:
    # most fleets see PCIe link trouble only there (a GPU about to fall off the bus logs them for hours). Its
    # exposure is the accelerators' sampled time (kernel logs are taken to cover the fleet's nodes).
    LOGGED_AER: (1 / 50, "gpu_bus", "PCIe AER corrected errors in the kernel log"),
}
WINDOWS_S = (3600.0, 3 * 3600.0, 12 * 3600.0)
SIZE_QUANTILE = 0.9
"""An episode is "large" when it is larger than this share of the part's own record of episodes."""
SIZE_RECORD = 288
"""Episode sizes a part keeps from before its longest window (a day of an episode every 5 minutes)."""


CATEGORY_COUNTERS: dict[str, tuple[str, ...]] = {
    category: tuple(m for m, (_, c, _) in COUNTERS.items() if c == category) for _, category, _ in COUNTERS.values()}
"""The counters of each category, judged together on one part."""

_EPISODE_TIME = itemgetter(0)
"""An episode's time (its first element)."""
EPISODE_SIZE = itemgetter(1)
"""An episode's errors (its second element)."""


class CounterRecord:
    """One counter of one entity: its episodes of the last 12 h and its forgotten long-run history.

    Its episodes change through :meth:`open_episode`, :meth:`grow_last` and :meth:`retire_oldest`, which keep the
    sums of their sizes and of the past sizes (:meth:`size_sums`)."""

    __slots__ = ("first", "last_active", "episodes", "k_hist", "t_hist", "hist_at", "group", "past_sizes",
                 "size_sum", "past_sum", "whole")

    def __init__(self, first: float, group: tuple[str, str]):
        self.first = first  # the detector's first tick: a part without errors since has that much exposure
        self.last_active = -math.inf
        self.episodes: deque = deque()  # [ts, errors, start of its first sample's interval]
        self.k_hist = 0.0  # decayed episodes older than the longest window
        self.t_hist = 0.0  # decayed hours of exposure older than the longest window
        self.hist_at = first  # time up to which history has been folded in (now - longest window)
        self.group = group
        self.past_sizes: deque = deque(maxlen=SIZE_RECORD)  # errors of the latest episodes older than that
        self.size_sum = 0.0  # the episodes' errors, summed as they came and went
        self.past_sum = 0.0  # the past sizes', likewise
        self.whole = True  # every size so far a whole number: the sums above exact

    def open_episode(self, episode: list) -> None:
        """Append a new ``[ts, errors, start]`` episode."""
        self.episodes.append(episode)
        self._added(episode[1])

    def grow_last(self, errors: float) -> None:
        """Add ``errors`` to the newest episode."""
        self.episodes[-1][1] += errors
        self._added(errors)

    def retire_oldest(self) -> tuple[float, float]:
        """Move the oldest episode's size into the past sizes; its ``(ts, errors)``."""
        ts, errors = self.episodes.popleft()[:2]
        self.size_sum -= errors
        if len(self.past_sizes) == self.past_sizes.maxlen:
            self.past_sum -= self.past_sizes[0]
        self.past_sizes.append(errors)
        self.past_sum += errors
        return ts, errors

    def _added(self, errors: float) -> None:
        self.size_sum += errors
        self.whole = self.whole and float(errors).is_integer()

    def size_sums(self) -> tuple[float, float]:
        """The errors of the episodes kept and of the past sizes: from the running sums while they are exact (whole
        numbers of errors, as counters count, below 2**53), else summed afresh."""
        if self.whole and self.size_sum + self.past_sum < 2.0 ** 53:
            return self.size_sum, self.past_sum
        return sum(map(EPISODE_SIZE, self.episodes)), sum(self.past_sizes)

    def window_counts(self, now: float) -> list[int]:
        """The episodes of each of :data:`WINDOWS_S` (those begun after ``now`` less the window), found by bisection
        (episodes are in time order: a noisy part has a hundred in its longest window)."""
        n = len(self.episodes)
        return [n - bisect_right(self.episodes, now - w, key=_EPISODE_TIME) for w in WINDOWS_S]

    def count_since(self, since: float) -> int:
        """The episodes begun after ``since`` (within the longest window)."""
        return len(self.episodes) - bisect_right(self.episodes, since, key=_EPISODE_TIME)
