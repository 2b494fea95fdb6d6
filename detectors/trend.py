"""Trend: error counters that count more often than a healthy part of this fleet would, judged as counts.

Sparse error counters (symbol errors, link error recoveries, correctable ECC, PCIe replays, AER corrected,
scale-up link CRC) count rare events: a healthy part shows a handful a day, some parts more than others, often
in bursts. Reading one error after a 5-minute sample as "120 per hour" flags healthy ports; so does any test
whose baseline for a quiet counter is near zero. Here a counter is judged by how many **episodes** it had: spans
of at most ``episode_gap_s`` (5 minutes) with errors. A sample with errors starts one unless its interval began
less than that after the current one's (a burst over several samples is one episode; errors that go on for an hour
are twelve), so the count means the same at any sampling interval up to 5 minutes, jittered scrapes included.

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
The chance of ``k`` or more episodes is then the Poisson tail averaged over that rate, or, where smaller, the binomial
tail of ``k`` of the window's spans of ``episode_span_s`` (225 s: at most one episode a span, as the episodes' rule
allows no two closer at any sampling up to 5 minutes) each with errors at that rate: near one episode a span the
Poisson tail of the errors overstates a healthy part's chance of such a run by orders of magnitude (a part quiet for
an hour that then errs in every sample was judged as if it might have done so by chance). The record before a window is
read the same way (its spans with errors and without), so a part that errs in nearly every span is taken as at least
that noisy. A window whose chance is at most ``alpha`` (over the windows judged), with at least ``min_episodes``, is
an alarm held for ``hold_s``. So a part
with a few errors a day against a fleet that shows them too is quiet, a part that always shows more learns its
own rate, and a rate that rises an order of magnitude is seen within an hour or two.

While a part is in alarm its windows are judged against its rate before the alarm (frozen then), not against a record
its own fault keeps raising: each of its counters judged, for an alarm on several together, and the record before the
half-record window (below) for an alarm that window raised; a flag judged so stays a flag. The 1-hour window is
judged against the fleet from the start, a longer one (a slow rise) only against a record of the part's own at least
as long; and until a part has a record of its own as long as the window before it (just after raswarden starts
watching), an alarm is a watch (``suspect``): the part may always have been so. While the record is young (2 to 6
hours: the 3-hour window cannot be judged yet, and the 1-hour window's record soon holds a rise's own first hour, so
a part that began to err an hour or two in looks as if it always did), the **record's second half** is judged against
its first too, a fourth window (chances then times four; bench/records/detectors-history.md, "Run 14").

A part that has errors in nearly every sample (a noisy healthy GPU's PCIe replays at 5-minute sampling) can show no
more episodes when it starts to fail: its count is saturated. Its episodes' **sizes** still rise. Once a part has a
record of at least ``min_size_record`` episodes of its own (24: two hours of a counter in every sample; Run 15), a
window is also judged by how many of its episodes are larger than nine in ten of the record's (the binomial tail of
that many at the record's own share, a test that bursts and heavy tails do not fool: a burst is one episode), and by
how many are larger than every one of the record's (for sizes alike, k of a window's n over a record of N has the
chance C(n, k) / C(N + n, k) whatever their distribution: a long record whose sizes jump is told in fewer episodes;
each test's chance times two), when the window's episodes are also ``size_ratio`` times the record's mean size (a
part whose traffic doubles has larger episodes too; a failing one's grow by more; Run 19).

A part's counters of one kind of trouble (``category``: a GPU's PCIe replays, AER counters and the kernel log's
corrected AER lines; a port's symbol errors, link error recoveries, receive errors and link integrity counters) are
also judged **together**: a link going bad raises each a little, in a noisy fleet each too little to be told from a
noisy healthy part for hours, while on a healthy part they move independently. When no counter alone raises an
alarm, the chances of the part's counters of that kind (each its best window, as judged alone) are combined by
Fisher's method over every counter of the kind the part has counted, and a combined chance of at most ``alpha`` with
at least two counters judged is an alarm (``together``; bench/records/detectors-history.md, "Run 11").

Counters whose healthy errors may come with use (a GPU's replays, corrected ECC, NVLink CRC and AER errors, a port's
receive errors) run on the part's **clock in use** until the fleet shows that they do not follow use: a part idle
for hours and then given a job is not a rise (detectors/trend_use.py; bench/records/detectors-history.md, "Run 16").

Magnitude is otherwise the rules' to judge (symbol errors at 120/h, the PCIe replay budget, 50 correctable ECC errors
an hour); a single burst of any size is one episode here.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from detectors.contract import Evidence, TickInput
from detectors.schema import State, entity_kind, name_codes, names_mask, within
from detectors.table import keeps_layout
from detectors.trend_counters import CATEGORY_COUNTERS, COUNTERS, LOGGED_AER_NAMES, CounterRecord
from detectors.trend_fleet import FleetRates
from detectors.trend_judge import TrendJudgement
from detectors.trend_use import USE_FOLLOWING, InUseClock, InUseRecords


class TrendDetector(FleetRates, TrendJudgement, InUseRecords):
    """Episode counts of error counters against the fleet's healthy rate; parameters in ``__init__``."""

    name = "trend"
    needs_features = False
    inputs = {**{metric: f"{words} (a rate rising against the fleet's)" for metric, (_, _, words) in COUNTERS.items()},
              "gpu_util_pct": "each part's time in use (counters whose errors come with use)"}

    def __init__(self, alpha: float = 1e-7, min_episodes: int = 3, episode_gap_s: float = 300.0,
                 prior_spread: float = 1.5, history_halflife_s: float = 7 * 86400.0,
                 hold_s: float = 3600.0, min_fleet_rate_per_h: float = 1e-4, trim: float = 0.001,
                 learn_every_s: float = 600.0, conflict_alpha: float = 1e-4, min_size_record: int = 24,
                 size_ratio: float = 3.0, together: bool = True, episode_span_s: float = 225.0):
        self.alpha = alpha
        self.episode_span_s = episode_span_s
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
        self._series: dict[tuple[str, str], CounterRecord] = {}
        # (entity, counter) or, for counters judged together, (entity, category) -> until, reason, score, level,
        # category
        self._alarm: dict[tuple[str, str], tuple[float, str, float, State, str]] = {}
        # (counter, part model) -> [decayed hours of exposure of all its parts, time of the last update, and for a
        # counter on the clock in use the decayed hours its parts were sampled, in use or not (how many parts)]
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
        self._group_memo: dict[int, tuple] = {}  # (see _exposure_groups)
        self._use = InUseClock()  # each part's clock in use (detectors/trend_use.py)
        self._wall: dict[tuple[str, str], CounterRecord] = {}  # (see _on_wall)
        self._group_kind: dict[tuple[str, str], str] = {}  # (see _group_kinds)
        return self

    def __getstate__(self) -> dict:
        """Without the exposure groups kept for the last ticks' rows (a cache: a warm state need not carry it)."""
        return dict(self.__dict__, _group_memo={})

    def restore(self, flagged: set[str]) -> None:
        """Entities a restarted raswarden had already flagged (from its store): their alarms are flags at once,
        not watches for want of a record (the record before the restart is what flagged them)."""
        if not hasattr(self, "_series"):
            self.fit()
        self._flagged_before.update(flagged)

    def steady_until(self, now: float) -> float:
        """Until the first alarm's hold ends: without a counter increase no episode is counted, judged or learned
        from."""
        return min((until for until, *_ in self._alarm.values()), default=math.inf) if hasattr(self, "_alarm") \
            else now

    def forget(self, scope: str) -> None:
        """Drop the episodes, history and alarms of the entities in ``scope`` (a node's or one part's: replaced)."""
        if not hasattr(self, "_series"):
            return
        for d in (self._series, self._alarm, self._baseline, self._size_baseline, self._on_wall()):
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
        use = self._in_use()
        if not use.settled():
            use.observe(tick.gauges, tick_s)
        if not inc.empty:
            mcodes, mnames = name_codes(inc["metric"])
            pick = names_mask(mnames, COUNTERS)[mcodes]
            if pick.any():
                ecodes, enames = name_codes(inc["entity"])
                dt = np.asarray(inc["dt"], dtype=float)[pick] if "dt" in inc else np.full(int(pick.sum()), tick_s)
                self._count(ecodes[pick], enames, mcodes[pick], mnames, np.asarray(inc["increase"], dtype=float)[pick],
                            dt, now, models)
        logged = self._logged_aer(tick.events, inc)
        if logged is not None:
            rows, names, increase, dt = logged
            self._count(rows, names, np.zeros(len(rows), dtype=np.int64), LOGGED_AER_NAMES, increase, dt, now,
                        models)
        out = []
        for key, (until, reason, score, level, category) in list(self._alarm.items()):
            if until < now:
                del self._alarm[key]
                self._size_baseline.pop(key, None)
                # a frozen rate lasts while its series is in alarm, alone or together with its kind (key: a series,
                # or a part's counters of one kind)
                for series in (key, *((key[0], m) for m in CATEGORY_COUNTERS.get(key[1], ()))):
                    if series in self._baseline and not self._in_alarm(series):
                        del self._baseline[series]
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
            np.fmax.at(longest, codes[ok], np.asarray(inc["dt"], dtype=float)[ok])
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
        clock = None  # each row's series time: its part's clock in use for a counter that follows use, else now
        sampled, every = hours, x
        on_wall = None  # rows kept on the wall clock too while the fleet has not said (see _settle)
        model_of, model_names = self._models_of(enames, models)
        follows = names_mask(mnames, USE_FOLLOWING)[mcodes]
        use = self._in_use()
        if follows.any() and not use.settled():  # (settled: every clock is the wall clock, every sample counts)
            kind, idle, lag = use.rows(ecodes, enames)
            if use.deciding():
                said = use.learn(kind[follows], idle[follows], x[follows] > 0, hours[follows])
                for which, answer in said:
                    self._settle(which, answer)
                if said:
                    kind, idle, lag = use.rows(ecodes, enames)
                on_wall = follows & use.undecided(kind) & (x > 0)
            left_out = idle & follows & ~use.idle_counts(kind)
            if left_out.any():  # (a part idle now, of a kind whose errors may follow use: no exposure, no episode)
                hours, x = np.where(left_out, 0.0, hours), np.where(left_out, 0.0, x)
            clock = np.where(follows, now - lag, now)
        for name, rows in self._exposure_groups(ecodes, enames, mcodes, mnames, model_of, model_names):
            acc = self._exposure.setdefault(name, [0.0, now])
            decay = 0.5 ** ((now - acc[1]) / self.history_halflife_s)
            acc[0] = acc[0] * decay + float(hours[rows].sum())
            if name[0] in USE_FOLLOWING:
                if len(acc) < 3:  # (a warm state's from before the clock in use: every hour was one in use)
                    acc.append(acc[0])
                acc[2] = acc[2] * decay + float(sampled[rows].sum())
                kinds = self._group_kinds()
                if name not in kinds:
                    kinds[name] = entity_kind(enames[ecodes[rows[0]]])
            acc[1] = now
        if on_wall is not None and on_wall.any():
            wall = self._on_wall()
            for i in np.flatnonzero(on_wall):
                key = (enames[ecodes[i]], mnames[mcodes[i]])
                self._fold_in(wall, key, now, float(every[i]), float(dt[i]), model_names[model_of[ecodes[i]]])
        fresh: list[tuple[str, str]] = []
        for i in np.flatnonzero(x > 0):  # the few series with errors this tick
            key = (enames[ecodes[i]], mnames[mcodes[i]])
            at = now if clock is None else float(clock[i])
            if self._fold_in(self._series, key, at, float(x[i]), float(dt[i]), model_names[model_of[ecodes[i]]]):
                fresh.append(key)
        if now - self._learned_at >= self.learn_every_s:
            self._learn_fleet(now)
        if fresh:  # (one series' windows do not move with another's judgement: made together)
            judged = self._windows_many(fresh, now)
            known = self._sibling_windows(fresh, judged, now) if self.together else None
            for key, windows in zip(fresh, judged):
                self._judge(key, now, windows, known)

    def _fold_in(self, records: dict, key: tuple[str, str], at: float, x: float, dt: float, model: str) -> bool:
        """Fold ``x`` errors over ``dt`` seconds at series time ``at`` into series ``key`` of ``records`` (made with
        the part's ``model`` when new); True when they begin a new episode."""
        s = records.get(key)
        if s is None:
            s = records[key] = CounterRecord(self._start, (key[1], model))
        # an episode is at most episode_gap_s long: a burst is one, a rate that goes on is one per span. The span
        # begins where its first sample's interval does (at most half a gap back: after a lost stretch, not where the
        # stretch began); a sample whose interval would carry it past the gap (with a quarter of its own interval to
        # spare for jitter) starts the next: errors that go on count twelve an hour at 10 s to 5 minutes, a jittered
        # 5-minute scrape 299 s after the last included, which a span taken from tick to tick merged with every other
        span = min(dt, self.episode_gap_s / 2) if dt > 0 else 0.0
        last = s.episodes[-1] if s.episodes else None
        new = last is None or at - s.last_active > self.episode_gap_s or (
            at - last[2] >= self.episode_gap_s + span / 4 if len(last) > 2
            else at - last[0] >= self.episode_gap_s)  # (an older warm state's: from tick to tick)
        if new:
            s.open_episode([at, x, at - span])
        elif s.episodes:
            s.grow_last(x)
        s.last_active = at
        return new

    def _exposure_groups(self, ecodes: np.ndarray, enames: np.ndarray, mcodes: np.ndarray, mnames: np.ndarray,
                         model_of: np.ndarray, model_names: list[str]) -> list[tuple[tuple[str, str], np.ndarray]]:
        """The rows of each (counter, part model) the fleet's exposure is kept for (a few groups), in order; kept
        while a tick's rows name the same series as the last one's."""
        memos = self._group_memo  # one a set of counter names (a tick's counters, its logged AER lines)
        memo = memos.get(id(mnames))
        if memo is not None and memo[0] is enames and memo[1] is mnames and memo[2] is model_of \
                and np.array_equal(memo[3], ecodes) and np.array_equal(memo[4], mcodes):
            return memo[5]
        group = mcodes.astype(np.int64) * len(model_names) + model_of[ecodes]
        groups = [((mnames[g // len(model_names)], model_names[g % len(model_names)]), np.flatnonzero(group == g))
                  for g in np.unique(group)]
        if len(memos) > 8:
            memos.clear()
        if keeps_layout(len(ecodes)):
            memos[id(mnames)] = (enames, mnames, model_of, ecodes.copy(), mcodes.copy(), groups)  # (holds mnames)
        else:
            memos.pop(id(mnames), None)
        return groups

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
