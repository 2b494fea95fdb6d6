"""Trend: error counters that count more often than a healthy part of this fleet would, judged as counts.

Sparse error counters (symbol errors, link error recoveries, correctable ECC, PCIe replays, AER corrected,
scale-up link CRC) count rare events: a healthy part shows a handful a day, some parts more than others, often
in bursts. Reading one error after a 5-minute sample as "120 per hour" flags healthy ports; so does any test
whose baseline for a quiet counter is near zero. Here a counter is judged by how many **episodes** it had: spans
of at most ``episode_gap_s`` (5 minutes) with errors. A sample with errors starts one unless the current one
began less than that before (a burst over several samples is one episode; errors that go on for an hour are
twelve), so the count means the same at any sampling interval up to 5 minutes.

The number of episodes ``k`` in a window of ``T`` hours (1 h, 3 h and 12 h) is set against what a healthy part
of this fleet shows over that exposure. A part's healthy rate is unknown: it is taken from the fleet's spread of
rates per counter and part model, a **log-normal** fitted to every part's record (Poisson counts of a log-normal
rate, maximum a posteriori, from a prior per counter while the fleet says little), and narrowed by the part's
own record before the window (an exponentially forgotten count and exposure, half-life ``history_halflife_s``).
Healthy parts' rates spread like that: most parts alike, a few a hundred times noisier. A Gamma fitted to the same
counts has too thin a tail for the noisy few and, made vaguer to spare them, too wide a one for a quiet fleet
(bench/records/detectors-history.md, "Run 2"); the log-normal fitted to them puts both within a factor of a few of
the fleet.
The fit leaves out the top ``trim`` share of parts (at least one), those that may be failing at once, so that a
failing part does not teach the fleet that its errors are normal: one in a thousand, above what fleets show (Llama 3's
16,384 GPUs had about six hardware interruptions a day, docs/fleet-stats.md: a few parts in ten thousand a day in
their precursor). Leaving out more leaves out the fleet's noisiest healthy parts, and the fit, blind to its own tail,
finds the fleet under half as spread as it is in its first hours: its noisiest healthy parts then look risen
(bench/records/detectors-history.md, "Run 4").
A record the fleet could hardly have given (chance at most ``conflict_alpha``: a part beyond the fleet's fitted
spread) is a part unlike the fleet, judged against its own record alone (Jeffreys' prior).
The chance of ``k`` or more episodes is then the Poisson tail averaged over that rate. A window whose chance is at most
``alpha`` (over the three windows), with at least ``min_episodes``, is an alarm held for ``hold_s``. So a part
with a few errors a day against a fleet that shows them too is quiet, a part that always shows more learns its
own rate, and a rate that rises an order of magnitude is seen within an hour or two.

While a part is in alarm its windows are judged against its rate before the alarm (frozen then), not against a
record its own fault keeps raising. The 1-hour window is judged against the fleet from the start, a longer one
(a slow rise) only against a record of the part's own at least as long; and until a part has a record of its
own as long as the window before it (just after raswarden starts watching), an alarm is a watch (``suspect``):
the part may always have been so.

A part that has errors in nearly every sample (a noisy healthy GPU's PCIe replays at 5-minute sampling) can show no
more episodes when it starts to fail: its count is saturated. Its episodes' **sizes** still rise. Once a part has a
record of at least ``min_size_record`` episodes of its own, a window is also judged by how many of its episodes are
larger than nine in ten of the record's (the binomial tail of that many at the record's own share, a test that bursts
and heavy tails do not fool: a burst is one episode), when the window's episodes are also ``size_ratio`` times the
record's mean size (a part whose traffic doubles has larger episodes too; a failing one's grow by more).

A part's counters of one kind of trouble (``category``: a GPU's PCIe replays, AER counters and the kernel log's
corrected AER lines; a port's symbol errors, link error recoveries and receive errors) are also judged **together**:
a link going bad raises each a little, in a noisy fleet each too little to be told from a noisy healthy part for
hours, while on a healthy part they move independently. When no counter alone raises an alarm, the chances of the
part's counters of that kind (each its best window, as judged alone) are combined by Fisher's method over every
counter of the kind the part has counted, and a combined chance of at most ``alpha`` with at least two counters
judged is an alarm (``together``; bench/records/detectors-history.md, "Run 11").

Magnitude is otherwise the rules' to judge (symbol errors at 120/h, the PCIe replay budget, 50 correctable ECC errors
an hour); a single burst of any size is one episode here.
"""

from __future__ import annotations

import math
from collections import deque
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy.special import gammaincc
from scipy.stats import binom

from detectors.contract import Evidence, TickInput
from detectors.rate_spread import (GRID_PER_H, LOG_GRID, PRIOR_FLOOR, episodes_tail, fit_lognormal,
                                     log_rate_weights, record_log_weights)
from detectors.schema import State, entity_kind, name_codes, names_mask, within

LOGGED_AER = "aer_corrected_logged"
_LOGGED_AER_NAMES = np.array([LOGGED_AER], dtype=object)

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
    "crc_errors_total": (1 / 100, "fabric_link", "CRC errors"),
    "nvlink_crc_flit_total": (1 / 10, "scaleup_link", "NVLink CRC errors"),
    "xgmi_ce_total": (1 / 10, "scaleup_link", "XGMI correctable errors"),
    # The kernel's per-device AER counters (sysfs aer_dev_correctable): any vendor's PCIe link, and for an
    # NPU whose exporter has no replay counter the only early sign of a link going bad.
    "aer_correctable_total": (1 / 50, "gpu_bus", "PCIe AER corrected errors"),
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


_CATEGORY_COUNTERS: dict[str, tuple[str, ...]] = {
    category: tuple(m for m, (_, c, _) in COUNTERS.items() if c == category) for _, category, _ in COUNTERS.values()}
"""The counters of each category, judged together on one part."""


class _Windows(NamedTuple):
    """One series judged now: per window the chance of its episodes (times the number of windows, 1 where not
    judged), the count, exposure and record before it (hours), and the log mass over rates it was judged against."""

    p: np.ndarray
    best: int
    k: np.ndarray
    exposure: np.ndarray
    k_before: np.ndarray
    t_before: np.ndarray
    log_w: np.ndarray
    own: np.ndarray

    def expected(self) -> float:
        """The episodes an hour expected of the part, judged as in the best window."""
        w = np.exp(self.log_w[self.best] - self.log_w[self.best].max())
        return float((w * GRID_PER_H).sum() / w.sum())


def _score(p: float) -> float:
    """An alarm's score from its chance: 0.6 at 1, 1.0 at 1e-20 and below."""
    return min(1.0, 0.6 + 0.02 * -math.log10(max(p, 1e-300)))


def _fisher(p: list[float], n: int) -> float:
    """Fisher's combination of ``n`` independent chances of which ``p`` are those under 1 (the rest are 1): the
    chance of a product at most theirs, the chi-square tail at 2n degrees of freedom."""
    x = -sum(math.log(max(q, 1e-300)) for q in p)
    return float(gammaincc(n, x))


class _Series:
    """One counter of one entity: its episodes of the last 12 h and its forgotten long-run history."""

    __slots__ = ("first", "last_active", "episodes", "k_hist", "t_hist", "hist_at", "group", "past_sizes")

    def __init__(self, first: float, group: tuple[str, str]):
        self.first = first  # the detector's first tick: a part without errors since has that much exposure
        self.last_active = -math.inf
        self.episodes: deque = deque()  # [ts, errors]
        self.k_hist = 0.0  # decayed episodes older than the longest window
        self.t_hist = 0.0  # decayed hours of exposure older than the longest window
        self.hist_at = first  # time up to which history has been folded in (now - longest window)
        self.group = group
        self.past_sizes: deque = deque(maxlen=SIZE_RECORD)  # errors of the latest episodes older than that


class TrendDetector:
    """Episode counts of error counters against the fleet's healthy rate; parameters in ``__init__``."""

    name = "trend"
    needs_features = False
    inputs = {metric: f"{words} (a rate rising against the fleet's)" for metric, (_, _, words) in COUNTERS.items()}

    def __init__(self, alpha: float = 1e-7, min_episodes: int = 3, episode_gap_s: float = 300.0,
                 prior_spread: float = 1.5, history_halflife_s: float = 7 * 86400.0,
                 hold_s: float = 3600.0, min_fleet_rate_per_h: float = 1e-4, trim: float = 0.001,
                 learn_every_s: float = 600.0, conflict_alpha: float = 1e-4, min_size_record: int = 36,
                 size_ratio: float = 3.0, together: bool = True):
        self.alpha = alpha
        self.min_episodes = min_episodes
        self.episode_gap_s = episode_gap_s
        self.prior_spread = prior_spread
        self.history_halflife_s = history_halflife_s
        self.hold_s = hold_s
        self.min_fleet_rate_per_h = min_fleet_rate_per_h
        self.trim = trim
        self.learn_every_s = learn_every_s
        self.conflict_alpha = conflict_alpha
        self.min_size_record = min_size_record
        self.size_ratio = size_ratio
        self.together = together

    def fit(self, X=None, y=None) -> TrendDetector:
        self.threshold_ = -math.log10(self.alpha)
        self._series: dict[tuple[str, str], _Series] = {}
        # (entity, counter) or, for counters judged together, (entity, category) -> until, reason, score, level,
        # category
        self._alarm: dict[tuple[str, str], tuple[float, str, float, State, str]] = {}
        # (counter, part model) -> [decayed hours of exposure of all its parts, time of the last update]
        self._exposure: dict[tuple[str, str], list[float]] = {}
        # (counter, part model) -> (mu, sigma): the log-normal spread of healthy parts' episodes per hour
        self._fleet: dict[tuple[str, str], tuple[float, float]] = {}
        self._log_prior: dict[tuple[str, str], np.ndarray] = {}  # its log mass on GRID_PER_H
        self._learned_at = -math.inf
        self._start: float | None = None
        self._last_now: float | None = None
        self._flagged_before: set[str] = set()  # see restore
        self._baseline: dict[tuple[str, str], np.ndarray] = {}  # a part's log mass over rates when it went into alarm
        # a part's episode sizes when its sizes raised an alarm: (threshold, share above it, mean size)
        self._size_baseline: dict[tuple[str, str], tuple[float, float, float]] = {}
        self._model_cache: tuple | None = None
        self._accelerator_cache: tuple | None = None
        return self

    def restore(self, flagged: set[str]) -> None:
        """Entities a restarted raswarden had already flagged (from its store): their alarms are flags at once,
        not watches for want of a record (the record before the restart is what flagged them)."""
        if not hasattr(self, "_series"):
            self.fit()
        self._flagged_before.update(flagged)

    def forget(self, scope: str) -> None:
        """Drop the episodes, history and alarms of the entities in ``scope`` (a node's or one part's: replaced)."""
        if not hasattr(self, "_series"):
            return
        for d in (self._series, self._alarm, self._baseline, self._size_baseline):
            for key in [k for k in d if within(k[0], scope)]:
                del d[key]
        self._flagged_before = {e for e in self._flagged_before if not within(e, scope)}

    # -- per tick ---------------------------------------------------------------------------------
    def update(self, tick: TickInput) -> list[Evidence]:
        if not hasattr(self, "_series"):
            self.fit()
        now = tick.now
        if self._start is None:
            self._start = now
        tick_s = 0.0 if self._last_now is None else now - self._last_now
        self._last_now = now
        inc = tick.increases
        models = tick.models or {}
        if not inc.empty:
            mcodes, mnames = name_codes(inc["metric"])
            pick = names_mask(mnames, COUNTERS)[mcodes]
            if pick.any():
                ecodes, enames = name_codes(inc["entity"])
                dt = inc["dt"].to_numpy(dtype=float)[pick] if "dt" in inc else np.full(int(pick.sum()), tick_s)
                self._count(ecodes[pick], enames, mcodes[pick], mnames, inc["increase"].to_numpy(dtype=float)[pick],
                            dt, now, models)
        logged = self._logged_aer(tick.events, inc)
        if logged is not None:
            rows, names, increase, dt = logged
            self._count(rows, names, np.zeros(len(rows), dtype=np.int64), _LOGGED_AER_NAMES, increase, dt, now,
                        models)
        out = []
        for key, (until, reason, score, level, category) in list(self._alarm.items()):
            if until < now:
                del self._alarm[key]
                self._baseline.pop(key, None)
                self._size_baseline.pop(key, None)
                continue
            out.append(Evidence(key[0], level, category, [reason], detector=self.name, score=score, latched=True))
        return out

    def _logged_aer(self, events: pd.DataFrame, inc: pd.DataFrame) -> tuple | None:
        """The tick's corrected AER lines per accelerator as increases of :data:`LOGGED_AER`, with one exposure row
        per accelerator sampled this tick (the time since its counters' previous sample): ``(entity codes, entity names,
        increases, seconds)``, the names those of the counters' rows unless a line names an accelerator they lack."""
        counts: dict[str, int] = {}
        if len(events):
            hit = (events["kind"].to_numpy(object) == "aer") & (events["severity"].to_numpy(object) == "corrected")
            for e in events["entity"].to_numpy(object)[hit]:
                if entity_kind(e) == "accelerator":
                    counts[e] = counts.get(e, 0) + 1
        names, longest, accelerator = np.empty(0, dtype=object), np.empty(0), np.empty(0, dtype=bool)
        if len(inc) and "dt" in inc:
            codes, names = name_codes(inc["entity"])
            if self._accelerator_cache is None or self._accelerator_cache[0] is not names:
                self._accelerator_cache = (names, np.array([entity_kind(e) == "accelerator" for e in names], bool))
            accelerator = self._accelerator_cache[1]
            longest = np.full(len(names), np.nan)
            ok = codes >= 0
            np.fmax.at(longest, codes[ok], inc["dt"].to_numpy(dtype=float)[ok])
        increase = np.zeros(len(names))
        if counts:
            index = dict(zip(names.tolist(), range(len(names))))
            extra = [e for e in counts if e not in index]
            if extra:  # accelerators with AER lines that no counter row names this tick
                index.update((e, len(names) + i) for i, e in enumerate(extra))
                names = np.concatenate((names, np.array(extra, dtype=object)))
                longest = np.concatenate((longest, np.full(len(extra), np.nan)))
                accelerator = np.concatenate((accelerator, np.ones(len(extra), dtype=bool)))
                increase = np.concatenate((increase, np.zeros(len(extra))))
            for e, n in counts.items():
                increase[index[e]] += n
        rows = np.flatnonzero(accelerator & (np.isfinite(longest) | (increase > 0)))
        if not len(rows):
            return None
        return rows, names, increase[rows], np.nan_to_num(longest[rows], nan=0.0)

    def _count(self, ecodes: np.ndarray, enames: np.ndarray, mcodes: np.ndarray, mnames: np.ndarray, x: np.ndarray,
               dt: np.ndarray, now: float, models) -> None:
        """Fold a tick's counter increases into episodes, the fleet's exposure, and judge new episodes. A row is a
        series: its entity and counter as codes into ``enames`` and ``mnames``, its increase ``x`` over ``dt``
        seconds."""
        hours = np.nan_to_num(dt, nan=0.0) / 3600.0
        model_of, model_names = self._models_of(enames, models)
        group = mcodes.astype(np.int64) * len(model_names) + model_of[ecodes]
        for g in np.unique(group):  # the fleet's exposure per counter and part model: a few groups
            name = (mnames[g // len(model_names)], model_names[g % len(model_names)])
            acc = self._exposure.setdefault(name, [0.0, now])
            acc[0] = acc[0] * 0.5 ** ((now - acc[1]) / self.history_halflife_s) + float(hours[group == g].sum())
            acc[1] = now
        fresh: list[tuple[str, str]] = []
        for i in np.flatnonzero(x > 0):  # the few series with errors this tick
            key = (enames[ecodes[i]], mnames[mcodes[i]])
            s = self._series.get(key)
            if s is None:
                s = self._series[key] = _Series(self._start, (key[1], model_names[model_of[ecodes[i]]]))
            # an episode is at most episode_gap_s long: a burst is one, a rate that goes on is one per span
            if now - s.last_active > self.episode_gap_s or not s.episodes or now - s.episodes[-1][0] >= \
                    self.episode_gap_s:
                s.episodes.append([now, float(x[i])])
                fresh.append(key)
            elif s.episodes:
                s.episodes[-1][1] += float(x[i])
            s.last_active = now
        if now - self._learned_at >= self.learn_every_s:
            self._learn_fleet(now)
        for key in fresh:
            self._judge(key, now)

    def _models_of(self, enames: np.ndarray, models) -> tuple[np.ndarray, list[str]]:
        """Each entity name's part model as a code (and the model names), kept while the names are the same."""
        cached = self._model_cache
        if cached is not None and cached[0] is enames and cached[1] is models:
            return cached[2], cached[3]
        names = sorted({models.get(e, "") for e in enames} | {""}) if models else [""]
        index = {m: i for i, m in enumerate(names)}
        codes = np.array([index[models.get(e, "")] for e in enames] if models else np.zeros(len(enames)),
                         dtype=np.int64)
        self._model_cache = (enames, models, codes, names)
        return codes, names

    def _learn_fleet(self, now: float) -> None:
        """The fleet's spread of healthy rates per counter and part model (every ``learn_every_s``).

        From every part's record without the top ``trim`` share of parts (at least one: a failing part must not
        teach the fleet that its errors are normal): the parts that counted, those that never did (the fleet's
        exposure over the time watched says how many parts there are), each over that time, fitted as a log-normal
        (:func:`fit_lognormal`, from the counter's prior and ``prior_spread`` while the fleet says little)."""
        horizon_h = min((now - self._start) / 3600.0, self.history_halflife_s / 3600.0)
        counts: dict[tuple[str, str], list[float]] = {}
        for s in self._series.values():
            self._fold(s, now)
            counts.setdefault(s.group, []).append(s.k_hist + len(s.episodes))
        for group, (hours, _) in self._exposure.items():
            if horizon_h <= 0 or hours <= 0:
                continue
            prior = self._prior_rate(group[0])
            parts = max(hours / horizon_h, 1.0)  # exposure over time: how many parts
            k = np.sort(np.asarray(counts.get(group, []), dtype=float))
            drop = min(len(k), max(1, int(math.ceil(self.trim * parts))))
            k = k[: len(k) - drop]
            zeros = max(parts - drop - len(k), 0.0)
            mu, sigma = fit_lognormal(k, zeros, hours / parts, prior, self.prior_spread, self._fleet.get(group))
            mu = max(mu, math.log(self.min_fleet_rate_per_h) - 2.0 * sigma)
            self._fleet[group] = (mu, sigma)
            self._log_prior[group] = log_rate_weights(mu, sigma, PRIOR_FLOOR)
        self._learned_at = now

    def _fold(self, s: _Series, now: float) -> None:
        """Move episodes older than the longest window into the part's forgotten history."""
        horizon = now - WINDOWS_S[-1]
        if horizon <= s.hist_at:
            return
        decay = 0.5 ** ((horizon - s.hist_at) / self.history_halflife_s)
        start = max(s.first, s.hist_at)
        s.t_hist = s.t_hist * decay + max(0.0, horizon - start) / 3600.0
        s.k_hist *= decay
        while s.episodes and s.episodes[0][0] <= horizon:
            ts, errors = s.episodes.popleft()
            s.k_hist += 0.5 ** ((horizon - ts) / self.history_halflife_s)
            s.past_sizes.append(errors)
        s.hist_at = horizon

    def _prior_rate(self, metric: str) -> float:
        """The counter's prior healthy rate (episodes per hour), at least ``min_fleet_rate_per_h``."""
        return max(COUNTERS[metric][0], self.min_fleet_rate_per_h)

    def fleet_rate(self, metric: str, model: str = "") -> float:
        """Healthy episodes per hour of a part of this fleet, the mean of its spread (the counter's prior until the
        fleet says)."""
        mu, sigma = self._fleet.get((metric, model), (math.log(self._prior_rate(metric)), self.prior_spread))
        return max(math.exp(mu + sigma * sigma / 2.0), self.min_fleet_rate_per_h)

    def _fleet_log_prior(self, group: tuple[str, str]) -> np.ndarray:
        """The log mass over rates of a healthy part of ``group`` (the counter's prior until the fleet is fitted)."""
        lp = self._log_prior.get(group)
        if lp is None:
            lp = self._log_prior[group] = log_rate_weights(math.log(self._prior_rate(group[0])), self.prior_spread,
                                                           PRIOR_FLOOR)
        return lp

    def _windows(self, key: tuple[str, str], now: float) -> _Windows:
        """The chance of each window's episodes of series ``key`` on a healthy part (times the number of windows;
        1 where the window is not judged), and what it was judged against."""
        s = self._series[key]
        self._fold(s, now)
        times = np.array([e[0] for e in s.episodes])
        k = np.array([np.count_nonzero(times > now - w) for w in WINDOWS_S], dtype=float)
        seen_h = (now - s.first) / 3600.0
        exposure = np.minimum(np.array(WINDOWS_S) / 3600.0, seen_h + self.episode_gap_s / 3600.0)
        # the part's own record before each window narrows the fleet's spread to it
        k_before = s.k_hist + len(s.episodes) - k
        t_before = np.maximum(s.t_hist + min(seen_h, WINDOWS_S[-1] / 3600.0) - exposure, 0.0)
        frozen = self._baseline.get(key) if key in self._alarm else None
        if frozen is not None:
            # in alarm: judged against the part's rate before the alarm, not a baseline its own fault has raised
            log_w = np.broadcast_to(frozen, (len(WINDOWS_S), len(GRID_PER_H)))
            own = np.zeros(len(WINDOWS_S), dtype=bool)
        else:
            fleet = self._fleet_log_prior(s.group)
            # A record the fleet could hardly have given (its chance at most conflict_alpha) is a part beyond the
            # fleet's fitted spread (which leaves out its top parts): judged against its own record alone (Jeffreys'
            # prior, mass r^(1/2) on the log grid), not pulled to the fleet.
            own = (k_before > 0) & (t_before > 0) & \
                (episodes_tail(k_before, t_before, np.broadcast_to(fleet, (len(WINDOWS_S), len(fleet))))
                 <= self.conflict_alpha)
            log_w = record_log_weights(np.where(own[:, None], 0.5 * LOG_GRID[None, :], fleet[None, :]),
                                       k_before, t_before)
        p = episodes_tail(k, exposure, log_w) * len(WINDOWS_S)
        # the first window is judged against the fleet from the start (a watch until the part has a record of its
        # own before it, below); a longer one (a slow rise) only against a record of the part's own at least as
        # long (or the rate frozen at the alarm): without one, a part that was always this noisy looks risen
        judged = (k >= self.min_episodes) & ((np.arange(len(WINDOWS_S)) == 0) | (t_before >= exposure)
                                             | (frozen is not None))
        p = np.where(judged, np.minimum(p, 1.0), 1.0)
        return _Windows(p, int(np.argmin(p)), k, exposure, k_before, t_before, log_w, own)

    def _watched_only(self, entity: str, w: _Windows) -> bool:
        """No quiet record of the part's own before the window (raswarden has just started watching it): the part
        may always be like this, so an alarm is a watch until its record says it rose."""
        return w.t_before[w.best] < w.exposure[w.best] and entity not in self._flagged_before

    def _judge(self, key: tuple[str, str], now: float) -> None:
        w = self._windows(key, now)
        if w.p[w.best] > self.alpha:
            self._judge_sizes(key, self._series[key], now)
            if self.together and key not in self._alarm and w.p[w.best] < 1.0:
                self._judge_together(key, w, now)
            return
        _, category, words = COUNTERS[key[1]]
        span = f"{WINDOWS_S[w.best] / 3600:.0f} h"
        errors = sum(e[1] for e in self._series[key].episodes if e[0] > now - WINDOWS_S[w.best])
        whose = "this part itself showed" if w.own[w.best] else "a healthy part of this fleet shows"
        reason = (f"{words} in {int(w.k[w.best])} separate episodes over the last {span} ({errors:.0f} errors); "
                  f"{whose} {w.expected():.2g} episodes an hour (chance {w.p[w.best]:.1g})")
        level = State.SUBHEALTHY
        if self._watched_only(key[0], w):
            level = State.SUSPECT
            reason += "; no record of this part before it yet: watched, not flagged"
        # The rate to judge the alarm against while it lasts, frozen when the part rose over a record of its own,
        # however short, without errors. A part erring from its first minutes has none: freezing the fleet's rate
        # then would hold every later window of a part that always counts more against the fleet (a healthy port at
        # 7 receive errors an hour, watched from the start, was flagged a day later when its 12-hour window came).
        quiet_record = w.t_before[0] * 3600.0 >= 2 * self.episode_gap_s and w.k_before[0] < 1.0
        if (level == State.SUBHEALTHY or quiet_record) and (key not in self._alarm or key not in self._baseline):
            self._baseline[key] = np.array(w.log_w[0], dtype=float)
        self._alarm[key] = (now + self.hold_s, reason, _score(w.p[w.best]), level, category)

    def _judge_together(self, key: tuple[str, str], judged_alone: _Windows, now: float) -> None:
        """A part's counters of one kind of trouble judged together (a GPU's PCIe replays with the corrected AER
        lines of its kernel log; a port's symbol errors with its link error recoveries): two signals each a little
        above the part's record rise together when its link goes bad, and independently on a healthy part. The
        chances of the part's counters of ``category`` (the best window of each, as judged alone) are combined by
        Fisher's method over every counter of that kind the part has counted, and an alarm is raised when the
        combined chance is at most ``alpha`` with at least two counters judged (each with ``min_episodes``).

        Made when a new episode of series ``key`` was judged alone (``judged_alone``) and its window counted: the
        others' chances have not moved since their own last episodes but for their records' slow growth."""
        entity, category = key[0], COUNTERS[key[1]][1]
        if (entity, category) in self._alarm:
            return
        judged: list[tuple[str, _Windows]] = []
        n = 0
        for metric in _CATEGORY_COUNTERS[category]:
            sibling = (entity, metric)
            if sibling not in self._series:
                continue
            if sibling in self._alarm:
                return  # the part is in alarm on one of them already
            n += 1
            w = judged_alone if sibling == key else self._windows(sibling, now)
            if w.p[w.best] < 1.0:
                judged.append((metric, w))
        if len(judged) < 2:
            return
        p = _fisher([w.p[w.best] for _, w in judged], n)
        if p > self.alpha:
            return
        parts = "; ".join(f"{COUNTERS[m][2]} in {int(w.k[w.best])} separate episodes over the last "
                          f"{WINDOWS_S[w.best] / 3600:.0f} h (chance {w.p[w.best]:.1g})" for m, w in judged)
        reason = f"together on one part: {parts}; all of them on a healthy part: chance {p:.1g}"
        level = State.SUBHEALTHY
        if any(self._watched_only(entity, w) for _, w in judged):
            level = State.SUSPECT
            reason += "; no record of this part before it yet: watched, not flagged"
        self._alarm[(entity, category)] = (now + self.hold_s, reason, _score(p), level, category)

    def _judge_sizes(self, key: tuple[str, str], s: _Series, now: float) -> None:
        """A part with a record of ``min_size_record`` episodes: its windows' episodes against the record's sizes (or
        those frozen at its alarm). An alarm when a window has at least ``min_episodes`` episodes larger than
        :data:`SIZE_QUANTILE` of the record's, a chance of at most ``alpha`` for that many at the record's own share
        (the binomial tail, over the three windows), and a mean size ``size_ratio`` times the record's."""
        frozen = self._size_baseline.get(key) if key in self._alarm else None
        if frozen is None and len(s.past_sizes) + len(s.episodes) < self.min_size_record + self.min_episodes:
            return  # most parts: too few episodes for a record of sizes (this runs for every new episode)
        times = np.array([e[0] for e in s.episodes])
        sizes = np.array([e[1] for e in s.episodes])
        past = np.fromiter(s.past_sizes, dtype=float, count=len(s.past_sizes))
        best: tuple | None = None
        for i, w in enumerate(WINDOWS_S):
            inside = times > now - w
            window = sizes[inside]
            if len(window) < self.min_episodes:
                continue
            if frozen is not None:
                threshold, share, mean = frozen
            else:
                record = np.concatenate((past, sizes[~inside]))
                if len(record) < self.min_size_record:
                    continue
                threshold = float(np.quantile(record, SIZE_QUANTILE, method="higher"))
                share = (np.count_nonzero(record > threshold) + 1.0) / (len(record) + 1.0)
                mean = float(record.mean())
            large = int(np.count_nonzero(window > threshold))
            if large < self.min_episodes or window.mean() < self.size_ratio * max(mean, 1.0):
                continue
            p = float(binom.sf(large - 1, len(window), share)) * len(WINDOWS_S)
            if p <= self.alpha and (best is None or p < best[0]):
                best = (p, i, large, len(window), float(window.mean()), threshold, share, mean)
        if best is None:
            return
        p, i, large, n, size, threshold, share, mean = best
        _, _, words = COUNTERS[key[1]]
        reason = (f"{words} larger in each episode: {large} of the last {n} episodes over {WINDOWS_S[i] / 3600:.0f} h "
                  f"had more than {threshold:.0f} errors, which 9 in 10 of this part's own before did not; "
                  f"{size:.1f} errors an episode against its {mean:.1f} (chance {p:.1g})")
        if key not in self._size_baseline:
            self._size_baseline[key] = (threshold, share, mean)
        self._alarm[key] = (now + self.hold_s, reason, _score(p), State.SUBHEALTHY, COUNTERS[key[1]][1])
