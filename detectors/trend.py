"""Trend: error counters that count more often than a healthy part of this fleet would, judged as counts.

Sparse error counters (symbol errors, link error recoveries, correctable ECC, PCIe replays, AER corrected,
scale-up link CRC) count rare events: a healthy part shows a handful a day, some parts more than others, often
in bursts. Reading one error after a 5-minute sample as "120 per hour" flags healthy ports; so does any test
whose baseline for a quiet counter is near zero. Here a counter is judged by how many **episodes** it had: spans
of at most ``episode_gap_s`` (5 minutes) with errors. A sample with errors starts one unless the current one
began less than that before (a burst over several samples is one episode; errors that go on for an hour are
twelve), so the count means the same at any sampling interval up to 5 minutes.

The number of episodes ``k`` in a window of ``T`` hours (1 h, 3 h and 12 h) is set against what a healthy part
of this fleet shows over that exposure. A part's healthy rate is unknown: it is taken as Gamma-distributed
around the fleet's pooled rate for that counter and part model (learned as the fleet runs, from a prior per
counter), with the spread the fleet shows between its parts (the Gamma's shape by the method of moments,
``prior_shape`` until there is enough), worth at most ``prior_weight_h`` hours of observation, and narrowed by
the part's own record before the window (an exponentially forgotten count and exposure, half-life
``history_halflife_s``): in a fleet whose parts differ a lot, a part's own record soon outweighs the fleet's.
A record the fleet's prior could hardly have given (chance at most ``conflict_alpha``: healthy parts' rates
spread like a log-normal, with a longer upper tail than any Gamma fitted to the fleet) is a part unlike the
fleet, judged against its own record alone.
The chance of ``k`` or more episodes is then the negative binomial's tail. A window whose chance is at most
``alpha`` (over the three windows), with at least ``min_episodes``, is an alarm held for ``hold_s``. So a part
with a few errors a day against a fleet that shows them too is quiet, a part that always shows more learns its
own rate, and a rate that rises an order of magnitude is seen within an hour or two.

While a part is in alarm its windows are judged against its rate before the alarm (frozen then), not against a
record its own fault keeps raising. The 1-hour window is judged against the fleet from the start, a longer one
(a slow rise) only against a record of the part's own at least as long; and until a part has a record of its
own as long as the window before it (just after raswarden starts watching), an alarm is a watch (``suspect``):
the part may always have been so.

Magnitude is the rules' to judge (symbol errors at 120/h, the PCIe replay budget, 50 correctable ECC errors an
hour); a single burst of any size is one episode here.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pandas as pd
from scipy.special import betainc

from detectors.rules import Evidence, TickInput
from detectors.schema import State, entity_kind, name_codes, names_in, node_of

LOGGED_AER = "aer_corrected_logged"

# counter -> (prior healthy episodes per hour, category, words)
#
# Where the priors come from: no public source gives a healthy part's rate per counter, so they are bounds, not
# measurements. The ceilings are the limits shipped tools call a fault (FLEET-STATS.md: IBTA's bit error rate of
# 1e-12, i.e. 120 symbol errors an hour; DCGM's PCIe replay budget; rasdaemon offlining a page after 50 corrected
# errors in 24 h); the floors are what real healthy parts showed (leptonai/gpud's H100 node, fixtures/real: no
# symbol errors and 14 receive errors per port since boot; treydock/infiniband_exporter's perfquery fixtures:
# SymbolErrorCounter 0 on every port). Each prior sits orders of magnitude under its ceiling and near one
# episode a day or two. It only matters while the fleet's own rate is unknown: the fleet's pooled rate per counter
# and part model starts from it as one episode's worth (``1 / prior`` hours of exposure), so a fleet of a thousand
# parts outweighs it within hours; and until a part has a record as long as the window an alarm is only a watch.
COUNTERS = {
    "ecc_sbe_total": (1 / 500, "gpu_memory", "correctable ECC errors"),
    "pcie_replay_total": (1 / 50, "gpu_bus", "PCIe replays"),
    "symbol_error_total": (1 / 50, "fabric_link", "symbol errors"),
    "link_error_recovery_total": (1 / 500, "fabric_link", "link error recoveries"),
    "rcv_errors_total": (1 / 100, "fabric_link", "receive errors"),
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


def episodes_tail(k: np.ndarray, exposure_h: np.ndarray, shape: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """P(K >= k) for K ~ NegBin: Poisson counts over ``exposure_h`` hours at a rate that is Gamma(``shape``,
    ``rate``) (mean shape/rate per hour). ``k`` <= 0 gives 1."""
    k = np.asarray(k, dtype=float)
    p_fail = np.asarray(exposure_h, dtype=float) / (np.asarray(rate, dtype=float) + np.asarray(exposure_h, float))
    out = np.ones(np.broadcast(k, p_fail).shape)
    pos = np.broadcast_to(k > 0, out.shape)
    out[pos] = betainc(np.broadcast_to(k, out.shape)[pos], np.broadcast_to(shape, out.shape)[pos],
                       np.broadcast_to(p_fail, out.shape)[pos])
    return out


class _Series:
    """One counter of one entity: its episodes of the last 12 h and its forgotten long-run history."""

    __slots__ = ("first", "last_active", "episodes", "k_hist", "t_hist", "hist_at", "group")

    def __init__(self, first: float, group: tuple[str, str]):
        self.first = first  # the detector's first tick: a part without errors since has that much exposure
        self.last_active = -math.inf
        self.episodes: deque = deque()  # [ts, errors]
        self.k_hist = 0.0  # decayed episodes older than the longest window
        self.t_hist = 0.0  # decayed hours of exposure older than the longest window
        self.hist_at = first  # time up to which history has been folded in (now - longest window)
        self.group = group


class TrendDetector:
    """Episode counts of error counters against the fleet's healthy rate; parameters in ``__init__``."""

    name = "trend"

    def __init__(self, alpha: float = 1e-7, min_episodes: int = 3, episode_gap_s: float = 300.0,
                 prior_shape: float = 0.2, prior_weight_h: float = 6.0, history_halflife_s: float = 7 * 86400.0,
                 hold_s: float = 3600.0, min_fleet_rate_per_h: float = 1e-4, trim: float = 0.01,
                 learn_every_s: float = 600.0, conflict_alpha: float = 1e-4):
        self.alpha = alpha
        self.min_episodes = min_episodes
        self.episode_gap_s = episode_gap_s
        self.prior_shape = prior_shape
        self.prior_weight_h = prior_weight_h
        self.history_halflife_s = history_halflife_s
        self.hold_s = hold_s
        self.min_fleet_rate_per_h = min_fleet_rate_per_h
        self.trim = trim
        self.learn_every_s = learn_every_s
        self.conflict_alpha = conflict_alpha

    def fit(self, X=None, y=None) -> TrendDetector:
        self.threshold_ = -math.log10(self.alpha)
        self._series: dict[tuple[str, str], _Series] = {}
        self._alarm: dict[tuple[str, str], tuple[float, str, float, State]] = {}  # until, reason, score, level
        # (counter, part model) -> [decayed hours of exposure of all its parts, time of the last update]
        self._exposure: dict[tuple[str, str], list[float]] = {}
        self._fleet: dict[tuple[str, str], float] = {}  # healthy episodes per hour of a part
        self._shape: dict[tuple[str, str], float] = {}  # how much healthy parts differ (the Gamma's shape)
        self._learned_at = -math.inf
        self._start: float | None = None
        self._last_now: float | None = None
        self._flagged_before: set[str] = set()  # see restore
        self._baseline: dict[tuple[str, str], tuple[float, float]] = {}  # a part's rate when it went into alarm
        self._model_cache: tuple | None = None
        self._accelerator_cache: tuple | None = None
        return self

    def restore(self, entities) -> None:
        """Entities a restarted raswarden had already flagged (from its store): their alarms are flags at once,
        not watches for want of a record (the record before the restart is what flagged them)."""
        if not hasattr(self, "_series"):
            self.fit()
        self._flagged_before.update(entities)

    def forget(self, node: str) -> None:
        """Drop the node's episodes, history and alarms (its parts were replaced)."""
        if not hasattr(self, "_series"):
            return
        for d in (self._series, self._alarm, self._baseline):
            for key in [k for k in d if node_of(k[0]) == node]:
                del d[key]
        self._flagged_before = {e for e in self._flagged_before if node_of(e) != node}

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
        if not inc.empty:
            part = inc[names_in(inc["metric"], COUNTERS)]
            if len(part):
                self._count(part, now, tick_s, tick.models or {})
        logged = self._logged_aer(tick.events, inc)
        if logged is not None:
            self._count(logged[0], now, tick_s, tick.models or {}, entity_codes=logged[1:])
        out = []
        for key, (until, reason, score, level) in list(self._alarm.items()):
            if until < now:
                del self._alarm[key]
                self._baseline.pop(key, None)
                continue
            _, category, _ = COUNTERS[key[1]]
            out.append(Evidence(key[0], level, category, [reason], detector=self.name, score=score))
        return out

    def _logged_aer(self, events: pd.DataFrame, inc: pd.DataFrame) -> tuple | None:
        """The tick's corrected AER lines per accelerator as increases of :data:`LOGGED_AER`, with one exposure row
        per accelerator sampled this tick (the time since its counters' previous sample): ``(frame, entity codes,
        entity names)``, the names those of the counters' rows unless a line names an accelerator they lack."""
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
        frame = pd.DataFrame({"metric": pd.Categorical.from_codes(np.zeros(len(rows), dtype=np.int8), [LOGGED_AER]),
                              "increase": increase[rows], "dt": np.nan_to_num(longest[rows], nan=0.0)})
        return frame, rows, names

    def _count(self, part, now: float, tick_s: float, models, entity_codes=None) -> None:
        """Fold a tick's counter increases into episodes, the fleet's exposure, and judge new episodes
        (``entity_codes``: the rows' entities as codes into a names array, when the caller has them)."""
        ecodes, enames = entity_codes if entity_codes is not None else name_codes(part["entity"])
        mcodes, mnames = name_codes(part["metric"])
        x = part["increase"].to_numpy(dtype=float)
        dt = part["dt"].to_numpy(dtype=float) if "dt" in part else np.full(len(part), tick_s)
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
        """The fleet's healthy rate and spread per counter and part model (every ``learn_every_s``).

        From every part's record without the top ``trim`` share of parts (at least one: a failing part must not
        teach the fleet that its errors are normal). The rate is the parts' episodes over their exposure, from the
        counter's prior (one episode's worth: ``1 / prior`` hours); the spread is the Gamma's shape by the method
        of moments (Var k = lambda T + (lambda T)^2 / shape), once the fleet has had 10 episodes (``prior_shape``
        until then), clipped to [0.02, 5]: where some healthy parts always count a hundred times more than most,
        the shape is small and a part's own record soon outweighs the fleet's; where parts are alike it is large
        and a few episodes stand out."""
        horizon_h = min((now - self._start) / 3600.0, self.history_halflife_s / 3600.0)
        counts: dict[tuple[str, str], list[float]] = {}
        for s in self._series.values():
            self._fold(s, now)
            counts.setdefault(s.group, []).append(s.k_hist + len(s.episodes))
        self._fleet, self._shape = {}, {}
        for group, (hours, _) in self._exposure.items():
            prior = COUNTERS[group[0]][0]
            parts = max(hours / horizon_h, 1.0) if horizon_h > 0 else 1.0  # exposure over time: how many parts
            k = np.sort(np.asarray(counts.get(group, []), dtype=float))
            drop = min(len(k), max(1, int(math.ceil(self.trim * parts))))
            k = k[: len(k) - drop]
            kept_parts = max(parts - drop, 1.0)
            total = float(k.sum())
            self._fleet[group] = (total + 1.0) / (hours * kept_parts / parts + 1.0 / prior)
            if total >= 10:
                mean = total / kept_parts  # episodes per part: lambda T
                excess = float((k * k).sum()) - total * (mean + 1.0)
                self._shape[group] = 5.0 if excess <= 0 else float(np.clip(total * mean / excess, 0.02, 5.0))
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
            ts = s.episodes.popleft()[0]
            s.k_hist += 0.5 ** ((horizon - ts) / self.history_halflife_s)
        s.hist_at = horizon

    def fleet_rate(self, metric: str, model: str = "") -> float:
        """Healthy episodes per hour of a part of this fleet (the counter's prior until the fleet says)."""
        return max(self._fleet.get((metric, model), COUNTERS[metric][0]), self.min_fleet_rate_per_h)

    def _judge(self, key: tuple[str, str], now: float) -> None:
        s = self._series[key]
        self._fold(s, now)
        lam = self.fleet_rate(*s.group)
        times = np.array([e[0] for e in s.episodes])
        k = np.array([np.count_nonzero(times > now - w) for w in WINDOWS_S], dtype=float)
        seen_h = (now - s.first) / 3600.0
        exposure = np.minimum(np.array(WINDOWS_S) / 3600.0, seen_h + self.episode_gap_s / 3600.0)
        # the part's own record before each window narrows the fleet's prior for it
        k_before = s.k_hist + len(s.episodes) - k
        t_before = np.maximum(s.t_hist + min(seen_h, WINDOWS_S[-1] / 3600.0) - exposure, 0.0)
        record = t_before  # the part's own record before each window, now
        frozen = self._baseline.get(key) if key in self._alarm else None
        if frozen is not None:
            # in alarm: judged against the part's rate before the alarm, not a baseline its own fault has raised
            shape, rate = np.full(len(WINDOWS_S), frozen[0]), np.full(len(WINDOWS_S), frozen[1])
            own = np.zeros(len(WINDOWS_S), dtype=bool)
        else:
            a = self._shape.get(s.group, self.prior_shape)
            weight = min(a / lam, self.prior_weight_h)  # hours of the fleet's rate the prior is worth
            # A record the fleet's prior could hardly have given (its chance at most conflict_alpha) is a part
            # that always counts more, from a tail the Gamma does not have (healthy parts' rates spread more like
            # a log-normal): it is judged against its own record alone (Jeffreys' prior), not pulled to the fleet.
            own = (k_before > 0) & (t_before > 0) & \
                (episodes_tail(k_before, t_before, lam * weight, weight) <= self.conflict_alpha)
            shape = np.where(own, 0.5 + k_before, lam * weight + k_before)
            rate = np.where(own, t_before, weight + t_before)
        p = episodes_tail(k, exposure, shape, rate) * len(WINDOWS_S)
        # the first window is judged against the fleet from the start (a watch until the part has a record of its
        # own before it, below); a longer one (a slow rise) only against a record of the part's own at least as
        # long (or the rate frozen at the alarm): without one, a part that was always this noisy looks risen
        judged = (k >= self.min_episodes) & ((np.arange(len(WINDOWS_S)) == 0) | (t_before >= exposure)
                                             | (frozen is not None))
        p = np.where(judged, p, 1.0)
        best = int(np.argmin(p))
        if p[best] > self.alpha:
            return
        errors = sum(e[1] for e in s.episodes if e[0] > now - WINDOWS_S[best])
        _, _, words = COUNTERS[key[1]]
        span = f"{WINDOWS_S[best] / 3600:.0f} h"
        whose = "this part itself showed" if own[best] else "a healthy part of this fleet shows"
        reason = (f"{words} in {int(k[best])} separate episodes over the last {span} ({errors:.0f} errors); "
                  f"{whose} {shape[best] / rate[best]:.2g} episodes an hour (chance {p[best]:.1g})")
        score = min(1.0, 0.6 + 0.02 * -math.log10(max(p[best], 1e-300)))
        level = State.SUBHEALTHY
        if record[best] < exposure[best] and key[0] not in self._flagged_before:
            # no quiet record of the part's own before the window (raswarden has just started watching it): the
            # part may always be like this, so a watch until its record says it rose
            level = State.SUSPECT
            reason += "; no record of this part before it yet: watched, not flagged"
        # The rate to judge the alarm against while it lasts, frozen when the part rose over a record of its own,
        # however short, without errors. A part erring from its first minutes has none: freezing the fleet's rate
        # then would hold every later window of a part that always counts more against the fleet (a healthy port at
        # 7 receive errors an hour, watched from the start, was flagged a day later when its 12-hour window came).
        quiet_record = t_before[0] * 3600.0 >= 2 * self.episode_gap_s and k_before[0] < 1.0
        if (level == State.SUBHEALTHY or quiet_record) and (key not in self._alarm or key not in self._baseline):
            self._baseline[key] = (float(shape[0]), float(rate[0]))
        self._alarm[key] = (now + self.hold_s, reason, score, level)
