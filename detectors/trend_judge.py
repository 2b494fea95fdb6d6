"""Judging one part's counter for the trend detector: its episodes in each window against the rates it could have
(the fleet's, narrowed by its own record), alone, together with the part's other counters of its kind, and by the
sizes of its episodes (detectors/trend.py says how and why).

A part of :class:`detectors.trend.TrendDetector`.
"""

from __future__ import annotations

import math
from itertools import islice
from typing import NamedTuple

import numpy as np
from scipy.special import gammaincc

from detectors.rate_spread import (
    GRID_PER_H,
    LOG_GRID,
    episodes_tail,
    episodes_tail_at_most,
    record_log_weights,
)
from detectors.schema import State
from detectors.trend_counters import (
    CATEGORY_COUNTERS,
    COUNTERS,
    EPISODE_SIZE,
    SIZE_QUANTILE,
    WINDOWS_S,
    CounterRecord,
)


class _Windows(NamedTuple):
    """One series judged now: per window (:data:`WINDOWS_S`, then the half-record window of a part with a young
    record, :meth:`TrendJudgement._windows_block`) the chance of its episodes (times the number of windows judged, 1
    where not judged), the count, exposure and record before it (hours), and the log mass over rates it was judged
    against."""

    p: np.ndarray
    best: int
    k: np.ndarray
    exposure: np.ndarray
    k_before: np.ndarray
    t_before: np.ndarray
    log_w: np.ndarray
    own: np.ndarray
    span_h: np.ndarray  # each window's length (:data:`WINDOWS_S`, then the half-record window's, 0 when none)

    def span(self) -> str:
        """The best window's length, as a reason says it."""
        return f"{self.span_h[self.best]:.2g} h"

    def record_to_freeze(self) -> np.ndarray:
        """The log mass over rates to judge an alarm on this series against while it lasts: the record before the
        first window, or before the half-record window when that one raised it (the first window's record then
        holds the rise's own first hour)."""
        return np.array(self.log_w[self.best if self.best == len(WINDOWS_S) else 0], dtype=float)

    def expected(self) -> float:
        """The episodes an hour expected of the part, judged as in the best window."""
        w = np.exp(self.log_w[self.best] - self.log_w[self.best].max())
        return float((w * GRID_PER_H).sum() / w.sum())


_BLOCK = 256
"""Series judged in one array pass (their grids: 256 x 3 windows x 129 rates, under a megabyte an array)."""


def _score(p: float) -> float:
    """An alarm's score from its chance: 0.6 at 1, 1.0 at 1e-20 and below."""
    return min(1.0, 0.6 + 0.02 * -math.log10(max(p, 1e-300)))


def _higher_quantile(x: np.ndarray, q: float) -> float:
    """``np.quantile(x, q, method="higher")`` (the same value), by selection instead of its general machinery."""
    if np.isnan(x).any():
        return float(np.quantile(x, q, method="higher"))
    i = int(math.ceil((len(x) - 1) * q))
    return float(np.partition(x, i)[i])


def _above_all(k: int, n: int, record: int) -> float:
    """The chance that at least ``k`` of a window's ``n`` episodes are larger than every one of a record's
    ``record`` before it, all alike (exchangeable: any order of the ``record + n`` sizes as likely): the top ``k``
    of them all in the window, C(n, k) / C(record + n, k). Ties count as not larger, so it bounds a record of whole
    counts too."""
    return math.prod((n - j) / (record + n - j) for j in range(k))


def _fisher(p: list[float], n: int) -> float:
    """Fisher's combination of ``n`` independent chances of which ``p`` are those under 1 (the rest are 1): the
    chance of a product at most theirs, the chi-square tail at 2n degrees of freedom."""
    x = -sum(math.log(max(q, 1e-300)) for q in p)
    return float(gammaincc(n, x))


class TrendJudgement:
    """A part's windows judged, and the alarms they raise."""

    def _windows(self, key: tuple[str, str], now: float) -> _Windows:
        """The chance of each window's episodes of series ``key`` on a healthy part (times the number of windows;
        1 where the window is not judged), and what it was judged against."""
        return self._windows_many([key], now)[0]

    def _windows_many(self, keys: list[tuple[str, str]], now: float) -> list[_Windows]:
        """:meth:`_windows` of several series at once (a tick's new episodes: an array pass a block of series, not a
        pass a series; blocks keep the grids of a tick with thousands of new episodes small); each series' figures
        are those of its own pass."""
        out: list[_Windows] = []
        for start in range(0, len(keys), _BLOCK):
            out += self._windows_block(keys[start:start + _BLOCK], now)
        return out

    def _windows_block(self, keys: list[tuple[str, str]], now: float) -> list[_Windows]:
        n_fixed = len(WINDOWS_S)
        n, n_w = len(keys), n_fixed + 1
        windows_h = np.array(WINDOWS_S) / 3600.0
        counts, seen, half, kept, hist, priors = [], [], [], [], [], []
        young = np.zeros(n, dtype=bool)
        frozen = np.zeros(n, dtype=bool)
        for i, key in enumerate(keys):  # (what each series' record says; the windows' figures below, as arrays)
            s = self._series[key]
            at = self._series_time(key, now)
            self._fold(s, at)
            row = s.window_counts(at)
            seen_h = (at - s.first) / 3600.0
            # A young record (raswarden started watching hours ago): the second window cannot be judged until the
            # record before it is as long, so a rise an hour or two in would be judged by the first window alone,
            # whose record soon holds the rise's own first hour. The half-record window fills that gap: the
            # record's second half against its first.
            if 2 * windows_h[0] < seen_h < 2 * windows_h[1]:
                young[i] = True
                half.append(seen_h / 2.0)
                row.append(s.count_since(at - half[-1] * 3600.0))
            else:
                half.append(0.0)
                row.append(0)
            counts.append(row)
            seen.append(seen_h)
            kept.append(s.k_hist + len(s.episodes))
            hist.append(s.t_hist + min(seen_h, WINDOWS_S[-1] / 3600.0))
            base = self._baseline.get(key) if self._in_alarm(key) else None
            # in alarm: judged against the part's rate before the alarm, not a baseline its own fault has raised
            frozen[i] = base is not None
            priors.append(base if base is not None else self._fleet_log_prior(s.group))
        k = np.array(counts, dtype=float)
        exposure = np.empty((n, n_w))
        exposure[:, :n_fixed] = np.minimum(windows_h, np.array(seen)[:, None] + self.episode_gap_s / 3600.0)
        exposure[:, n_fixed] = half
        # the part's own record before each window narrows the fleet's spread to it
        k_before = np.array(kept)[:, None] - k
        t_before = np.maximum(np.array(hist)[:, None] - exposure, 0.0)
        prior = np.array(priors, dtype=float)  # the fleet's log mass, or the rate frozen at the part's alarm
        if young.any():  # (the half-record window of the other series: no record, never judged)
            k_before[~young, n_fixed] = t_before[~young, n_fixed] = 0.0
        else:  # (a fleet past its sixth hour: the three windows alone, no work on a fourth)
            n_w = n_fixed
            k, exposure, k_before, t_before = (a[:, :n_fixed] for a in (k, exposure, k_before, t_before))
        # A record the fleet could hardly have given (its chance at most conflict_alpha) is a part beyond the
        # fleet's fitted spread (which leaves out its top parts): judged against its own record alone (Jeffreys'
        # prior, mass r^(1/2) on the log grid), not pulled to the fleet.
        # (The chances over the grid are worked out only where they are asked: a record with episodes, a window
        # judged; most of a tick's new episodes are a quiet part's first.)
        fleet = prior[:, None, :]
        span = self.episode_span_s / 3600.0 if self.episode_span_s else None
        own = np.zeros((n, n_w), dtype=bool)
        i, j = np.nonzero(~frozen[:, None] & (k_before > 0) & (t_before > 0))
        if len(i):
            own[i, j] = episodes_tail_at_most(k_before[i, j], t_before[i, j], prior[i], self.conflict_alpha, span)
        log_w = np.where(frozen[:, None, None], np.broadcast_to(fleet, (n, n_w, len(GRID_PER_H))),
                         record_log_weights(np.where(own[:, :, None], 0.5 * LOG_GRID, fleet), k_before, t_before,
                                            span))
        # the first window is judged against the fleet from the start (a watch until the part has a record of its
        # own before it, below); a longer one (a slow rise) only against a record of the part's own at least as
        # long (or the rate frozen at the alarm): without one, a part that was always this noisy looks risen
        judged = (k >= self.min_episodes) & ((np.arange(n_w) == 0) | (t_before >= exposure) | frozen[:, None])
        if n_w > n_fixed:
            judged[:, n_fixed] &= young
        p = np.ones((n, n_w))
        i, j = np.nonzero(judged)
        if len(i):
            windows = n_fixed + young[i]  # the windows a series is judged by, each chance times their number
            p[i, j] = np.minimum(episodes_tail(k[i, j], exposure[i, j], log_w[i, j], span, reuse=True) * windows,
                                 1.0)
        span_h = np.broadcast_to(np.append(windows_h, 0.0)[:n_w], (n, n_w)).copy()
        if n_w > n_fixed:
            span_h[:, n_fixed] = exposure[:, n_fixed]
        return [_Windows(*row) for row in zip(p, np.argmin(p, axis=1).tolist(), k, exposure, k_before, t_before,
                                              log_w, own, span_h)]

    def _in_alarm(self, key: tuple[str, str], level: State | None = None) -> bool:
        """Series ``key``'s part is in alarm on it (of ``level``, when given), alone or together with its other
        counters of the kind."""
        for held in (key, (key[0], COUNTERS[key[1]][1])):
            alarm = self._alarm.get(held)
            if alarm is not None and (level is None or alarm[3] == level):
                return True
        return False

    def _watched_only(self, entity: str, w: _Windows) -> bool:
        """No quiet record of the part's own before the window (raswarden has just started watching it): the part
        may always be like this, so an alarm is a watch until its record says it rose."""
        return w.t_before[w.best] < w.exposure[w.best] and entity not in self._flagged_before

    def _sibling_windows(self, keys: list[tuple[str, str]], windows: list[_Windows], now: float
                         ) -> dict[tuple[str, str], _Windows]:
        """The windows of a tick's new episodes (``keys``, judged as ``windows``) and of the other counters of their
        kind on each part that :meth:`_judge_together` may ask for: one array pass for the tick, not one a sibling.
        Those in alarm are left out (a part in alarm on one is not judged together); each is what its own pass
        would give (a series' windows do not move with another's judgement)."""
        known = dict(zip(keys, windows))
        wanted: dict[tuple[str, str], None] = {}
        for key, w in zip(keys, windows):
            category = COUNTERS[key[1]][1]
            if not self.alpha < w.p[w.best] < 1.0 or key in self._alarm or (key[0], category) in self._alarm:
                continue
            for metric in CATEGORY_COUNTERS[category]:
                sibling = (key[0], metric)
                if sibling in self._series and sibling not in known and sibling not in self._alarm:
                    wanted[sibling] = None
        known.update(zip(wanted, self._windows_many(list(wanted), now)))
        return known

    def _judge(self, key: tuple[str, str], now: float, w: _Windows | None = None,
               known: dict[tuple[str, str], _Windows] | None = None) -> None:
        """Judge series ``key``'s windows (``w``, when already made this tick) and raise its alarms (``known``: windows
        made this tick of the part's other counters, :meth:`_sibling_windows`)."""
        w = w if w is not None else self._windows(key, now)
        if w.p[w.best] > self.alpha:
            self._judge_sizes(key, self._series[key], now, w.k[:len(WINDOWS_S)])
            if self.together and key not in self._alarm and w.p[w.best] < 1.0:
                self._judge_together(key, w, now, known)
            return
        _, category, words = COUNTERS[key[1]]
        span = w.span()
        since = self._series_time(key, now) - w.span_h[w.best] * 3600.0
        errors = sum(e[1] for e in self._series[key].episodes if e[0] > since)
        whose = "this part itself showed" if w.own[w.best] else "a healthy part of this fleet shows"
        reason = (f"{words} in {int(w.k[w.best])} separate episodes over the last {span} ({errors:.0f} errors); "
                  f"{whose} {w.expected():.2g} episodes an hour (chance {w.p[w.best]:.1g})")
        level = State.SUBHEALTHY
        # (judged against the rate frozen at a flag: still a flag, whatever the record's length)
        flagged = key in self._baseline and self._in_alarm(key, State.SUBHEALTHY)
        if not flagged and self._watched_only(key[0], w):
            level = State.SUSPECT
            reason += "; no record of this part before it yet: watched, not flagged"
        # The rate to judge the alarm against while it lasts, frozen when the part rose over a record of its own,
        # however short, without errors. A part erring from its first minutes has none: freezing the fleet's rate
        # then would hold every later window of a part that always counts more against the fleet (a healthy port at
        # 7 receive errors an hour, watched from the start, was flagged a day later when its 12-hour window came).
        quiet_record = w.t_before[0] * 3600.0 >= 2 * self.episode_gap_s and w.k_before[0] < 1.0
        if (level == State.SUBHEALTHY or quiet_record) and (key not in self._alarm or key not in self._baseline):
            self._baseline[key] = w.record_to_freeze()
        self._alarm[key] = (now + self.hold_s, reason, _score(w.p[w.best]), level, category)

    def _judge_together(self, key: tuple[str, str], judged_alone: _Windows, now: float,
                        known: dict[tuple[str, str], _Windows] | None = None) -> None:
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
        for metric in CATEGORY_COUNTERS[category]:
            sibling = (entity, metric)
            if sibling not in self._series:
                continue
            if sibling in self._alarm:
                return  # the part is in alarm on one of them already
            n += 1
            w = judged_alone if sibling == key else (known or {}).get(sibling) or self._windows(sibling, now)
            if w.p[w.best] < 1.0:
                judged.append((metric, w))
        if len(judged) < 2:
            return
        p = _fisher([w.p[w.best] for _, w in judged], n)
        if p > self.alpha:
            return
        parts = "; ".join(f"{COUNTERS[m][2]} in {int(w.k[w.best])} separate episodes over the last "
                          f"{w.span()} (chance {w.p[w.best]:.1g})" for m, w in judged)
        reason = f"together on one part: {parts}; all of them on a healthy part: chance {p:.1g}"
        level = State.SUBHEALTHY
        if any(self._watched_only(entity, w) for _, w in judged):
            level = State.SUSPECT
            reason += "; no record of this part before it yet: watched, not flagged"
        else:  # while it lasts, each counter judged is judged against its rate before it (as an alarm on one alone)
            for metric, w in judged:
                self._baseline.setdefault((entity, metric), w.record_to_freeze())
        self._alarm[(entity, category)] = (now + self.hold_s, reason, _score(p), level, category)

    def _judge_sizes(self, key: tuple[str, str], s: CounterRecord, now: float, counts: np.ndarray) -> None:
        """A part with a record of ``min_size_record`` episodes: its windows' episodes against the record's sizes (or
        those frozen at its alarm). An alarm when a window's mean size is ``size_ratio`` times the record's and
        either of two tests gives a chance of at most ``alpha`` (each chance times the two tests and the three
        windows): at least ``min_episodes`` episodes larger than :data:`SIZE_QUANTILE` of the record's (the binomial
        tail at the record's own share), or at least ``min_episodes`` larger than any of the record's, whose chance
        for episodes alike (exchangeable) is C(n, k) / C(N + n, k) for k of a window's n over a record of N whatever
        their distribution: a part with a long record whose sizes jump is flagged on fewer episodes than the first
        test needs (six against eight in tests/detectors/test_trend.py, where the mean-size gate decides).
        ``counts``: the episodes of each window, as the part's windows were just judged with."""
        frozen = self._size_baseline.get(key) if key in self._alarm else None
        n, n_past = len(s.episodes), len(s.past_sizes)
        if frozen is None and n_past + n < self.min_size_record + self.min_episodes:
            return  # most parts: too few episodes for a record of sizes (this runs for every new episode)
        # the windows with enough episodes, and a record before them long enough, told by counts alone: a window is
        # the newest episodes (they are in time order), its record the past sizes and the episodes before it
        judged = [(i, c) for i, c in enumerate(int(x) for x in counts) if c >= self.min_episodes and (
            frozen is not None or n_past + n - c >= self.min_size_record)]
        if judged:
            judged = self._size_gate_open(s, frozen, judged)
        if not judged:
            return
        sizes = np.array([e[1] for e in s.episodes])
        past = np.fromiter(s.past_sizes, dtype=float, count=n_past) if frozen is None else None
        tests = 2 * len(WINDOWS_S)
        best: tuple | None = None
        for i, c in judged:
            window = sizes[n - c:].copy()  # (a fresh array, as the mask made it: its mean summed the same way)
            if frozen is not None:
                threshold, share, mean = frozen
            else:
                record = np.concatenate((past, sizes[:n - c]))
                mean = float(record.mean())
            if window.mean() < self.size_ratio * max(mean, 1.0):
                continue  # (most windows: asked first, the record's quantile is not needed)
            if frozen is None:
                threshold = _higher_quantile(record, SIZE_QUANTILE)
                share = (np.count_nonzero(record > threshold) + 1.0) / (len(record) + 1.0)
            found = []
            large = int(np.count_nonzero(window > threshold))
            if large >= self.min_episodes:
                from scipy.stats import binom  # (here: importing scipy.stats costs every process 0.4 s at start)

                found.append((float(binom.sf(large - 1, c, share)) * tests,
                              f"{large} of the last {c} episodes over {WINDOWS_S[i] / 3600:.0f} h had more than "
                              f"{threshold:.0f} errors, which 9 in 10 of this part's own before did not"))
            if frozen is None:
                top = float(record.max())
                above = int(np.count_nonzero(window > top))
                if above >= self.min_episodes:
                    found.append((_above_all(above, c, len(record)) * tests,
                                  f"{above} of the last {c} episodes over {WINDOWS_S[i] / 3600:.0f} h had more than "
                                  f"{top:.0f} errors, more than any of this part's own {len(record)} before"))
            for p, told in found:
                if p <= self.alpha and (best is None or p < best[0]):
                    best = (p, told, float(window.mean()), threshold, share, mean)
        if best is None:
            return
        p, told, size, threshold, share, mean = best
        _, _, words = COUNTERS[key[1]]
        reason = (f"{words} larger in each episode: {told}; {size:.1f} errors an episode against its {mean:.1f} "
                  f"(chance {p:.1g})")
        if key not in self._size_baseline:
            self._size_baseline[key] = (threshold, share, mean)
        self._alarm[key] = (now + self.hold_s, reason, _score(p), State.SUBHEALTHY, COUNTERS[key[1]][1])

    def _size_gate_open(self, s: CounterRecord, frozen: tuple | None, judged: list[tuple[int, int]]
                        ) -> list[tuple[int, int]]:
        """The windows of ``judged`` (window, its episodes) whose mean size may reach ``size_ratio`` times the
        record's, told from sums in plain floats instead of an array a window (a noisy fleet's parts have a new
        episode every sample, each judged here): those :meth:`_judge_sizes` then judges with numpy's means as before,
        the others those its own gate leaves out. The record's running sums are exact for whole numbers of errors
        (:meth:`CounterRecord.size_sums`), a window's a sum of at most a few hundred positive sizes (within a relative
        1e-13 of numpy's); a window is left out only when it fails the gate with the sums moved 1e-12 of their total
        against it."""
        n, n_past = len(s.episodes), len(s.past_sizes)
        kept_sum, past_sum = s.size_sums()
        window_sum = {n: kept_sum}  # (the longest window: often every episode kept)
        for c in {c for _, c in judged if c < n}:  # (a window is the newest episodes)
            window_sum[c] = sum(islice(map(EPISODE_SIZE, reversed(s.episodes)), c))
        total = kept_sum if frozen is not None else kept_sum + past_sum  # (the longest window's, or the record's)
        slack = 1e-12 * total
        kept = []
        for i, c in judged:
            mean = frozen[2] if frozen is not None else (total - window_sum[c] - 2.0 * slack) / (n_past + n - c)
            if (window_sum[c] + slack) / c >= self.size_ratio * max(mean, 1.0):
                kept.append((i, c))
        return kept
