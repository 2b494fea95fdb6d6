"""Peer deviation: a GPU hotter (or slower) than its neighbours at comparable load is sub-healthy.

Each tick, for every accelerator with fresh temperature and power, the power-corrected temperature ``temp - b * power``
(``b`` fitted across the fleet that tick, so busy and idle GPUs compare) is set against the median of the accelerators
of its node at comparable load (busy with busy, idle with idle; the whole node where fewer than four share its load, as
a node of four GPUs running a half-node job does): a rack-wide coolant swing moves all of them and cancels out; a
half-used node does not look like a fault. The residual is smoothed (EWMA; each sample folded in once, when it
comes, weighted by the time since the one before: a reading held between two 5-minute samples is judged as it stands,
not counted again) and scored as a robust z-score against the fleet's residual spread (MAD). ``subhealthy`` needs the
z-score, an absolute residual of ``min_excess_c`` (8 °C) *and* a rise of ``min_rise_c`` over the GPU's own baseline (its
residual smoothed over ``baseline_halflife_s``, 24 h, per load state, busy or idle, frozen while it is flagged; none for
ten minutes after a load change; the residual here against the median of its peers each less its own baseline, which
does not move with which peers share its load): a GPU in a warmer slot runs several degrees above its peers for ever and
is not a fault, while a degrading one moves away from where it was. Above ``absolute_excess_c`` (15 °C; the HBM's
``hbm_absolute_excess_c``, 17 °C) the rise is not needed (a GPU that was already degrading when raswarden started). A
GPU whose own temperature moved away from its baseline much further than the fleet's GPUs move from theirs is
``subhealthy`` earlier: a rise of ``min_rise_c`` with a z-score of ``z_threshold`` against the fleet's spread of rises
(MAD, learned each tick, so a fleet whose temperatures wander more asks for more), now warmer than its peers' median
(``moved_excess_c``, 0 °C: a GPU in a cool slot that jumped 6 °C may still be only a little above them); a step in the
thermal interface shows so within minutes, long before the GPU is ``min_excess_c`` above its peers. Not the HBM's: its
temperature follows the memory traffic of the job, which the power correction does not see (a job that works the memory
harder warms it by degrees: in the matrix' quiet fleets that path flagged two healthy GPUs). Once flagged, it clears
only ``clear_margin_c`` below the entry levels. HBM temperature is judged the same way otherwise, and SM clocks of busy
GPUs against busy peers (fail-slow: a GPU that stays up but runs slower).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from detectors.grouping import RowIndex, group_median, nanmedian, peer_group
from detectors.contract import Evidence, TickInput
from detectors.schema import State, entity_kind, name_codes, names_mask
from detectors.table import TableLayout
from detectors.smoothing import LOAD_STATES, RowEwma, load_state

_MAD_TO_SIGMA = 1.4826


_METRICS = ("gpu_temp_c", "hbm_temp_c", "power_w", "sm_clock_mhz", "gpu_util_pct")
# Read as the mean of the tick's samples (its last where the gauges carry no mean): a tick longer than the scrape
# interval otherwise sees one sample in several, and the smoothing behind the rise judges that sample's noise. The
# load state and the busy clock are read as they stand at the tick's end.
_TICK_MEAN = np.array([m in ("gpu_temp_c", "hbm_temp_c", "power_w") for m in _METRICS])


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    """The least-squares slope of ``y`` on ``x`` (``x`` not constant), in closed form about the means: what
    ``np.polyfit(x, y, 1)[0]`` gives to 1e-15 of it, at an eighth of the cost (its SVD was 5 % of a 640-GPU fleet's
    closed loop)."""
    dx = x - x.mean()
    return float(dx @ (y - y.mean()) / (dx @ dx))


_THERMAL = ("gpu_temp_c", "hbm_temp_c")
"""The temperatures judged against peers, in the order of their state rows (:meth:`PeerDeviation.fit`)."""


def _thermal_rows(rows: np.ndarray) -> np.ndarray:
    """The thermal state's rows of accelerator rows ``rows`` (both metrics)."""
    return np.concatenate((2 * rows, 2 * rows + 1))


def _metric_groups(codes: np.ndarray) -> np.ndarray:
    """Peer group codes of the metric-major thermal rows: each metric's groups apart."""
    return np.concatenate([codes + m * (int(codes.max()) + 1) for m in range(len(_THERMAL))])


def _peer_median(groups: np.ndarray, nodes: np.ndarray, values: np.ndarray, enough: int) -> np.ndarray:
    """Each row's reference: the median of its peer group's finite ``values`` (the node's accelerators at its load)
    where the group has ``enough`` of them, else of its whole node's (all loads, the power correction the comparison)
    where that has enough, else NaN. A node of four runs a half-node job as two busy and two idle: judged by load
    alone, none of its GPUs would ever be compared."""
    median, count = group_median(groups, values)
    out = np.where(count[groups] >= enough, median[groups], np.nan)
    short = np.isnan(out) & (count[groups] > 0)
    if short.any():
        node_median, node_count = group_median(nodes, values)
        out = np.where(short & (node_count[nodes] >= enough), node_median[nodes], out)
    return out


def _spreads(values) -> np.ndarray:
    """Each metric's robust spread (MAD as a standard deviation, at least 0.5) of its rows of ``values``."""
    return np.array([max(nanmedian(np.abs(v)) * _MAD_TO_SIGMA if np.isfinite(v).any() else 0.5, 0.5)
                     for v in values])


def chip_word(entity: str, models=None) -> str:
    """What the vendor calls the accelerator: NPU (Ascend), DCU (Hygon), GPU."""
    local = entity.split("/", 1)[-1]
    return "NPU" if local.startswith("npu") else "DCU" if local.startswith("dcu") else "GPU"


def clock_word(entity: str, models=None) -> str:
    """The vendor's name of the compute clock: AI core clock (Ascend), GFX clock (AMD), SM clock (NVIDIA)."""
    local = entity.split("/", 1)[-1]
    model = (models or {}).get(entity, "")
    if local.startswith("npu"):
        return "AI core clock"
    if model.startswith("AMD") or "Instinct" in model or local.startswith("dcu"):
        return "GFX clock"
    return "SM clock"


def _columns(n: int, local: np.ndarray, slot: np.ndarray, reading: np.ndarray, is_fresh: np.ndarray | None
             ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Each metric of :data:`_METRICS` as a column over ``n`` accelerators (``local``: each reading's, ``slot``: its
    metric's place), NaN where not read, and where it was sampled this tick (``is_fresh`` None: all)."""
    columns, fresh = {}, {}
    for j, m in enumerate(_METRICS):
        col = np.full(n, np.nan)
        sel = slot == j
        col[local[sel]] = reading[sel]
        columns[m] = col
        if is_fresh is None:
            fresh[m] = np.ones(n, dtype=bool)
        else:
            fresh[m] = np.zeros(n, dtype=bool)
            fresh[m][local[sel]] = is_fresh[sel]
    return columns, fresh


class _Rows:
    """Persistent row numbers for entity ids (state arrays are indexed by them) and each row's peer group code
    (node, accelerator kind and model: see ``grouping.peer_group``)."""

    def __init__(self) -> None:
        self.index = RowIndex()
        self.node_code = np.empty(0, dtype=np.int64)
        self._nodes: dict[str, int] = {}

    def lookup(self, ids: np.ndarray, models: Mapping[str, str] | None = None) -> tuple[np.ndarray, int]:
        """Rows of ``ids`` (adding unseen ones at the end, with their peer group) and the number of rows."""
        rows, fresh = self.index.lookup(ids)
        if len(fresh):
            codes = [self._nodes.setdefault(peer_group(e, models), len(self._nodes)) for e in fresh]
            self.node_code = np.concatenate([self.node_code, np.asarray(codes, dtype=np.int64)])
        return rows, len(self.index)


class _GaugeLayout:
    """Which rows of a tick's gauges table the peer detector reads: each one's metric slot and accelerator (0..n-1 in
    name order) and the accelerators' names, kept while the table's code arrays are the same read-only objects
    (GaugeHold hands out the same ones while its series are the same; see ``detectors.table.keeps_layout``)."""

    def __init__(self) -> None:
        self._kept = TableLayout()
        self._accel_cache: tuple | None = None
        self._slot_cache: tuple | None = None

    def __getstate__(self) -> dict:
        """Empty: a cache (a new daemon's tables are new objects)."""
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def of(self, g) -> list | None:
        """``[sel, slot, accelerator, ids]`` (the detector appends their rows and the number of rows, once), or None:
        no accelerator reading."""
        codes, ids = name_codes(g["entity"])
        met_codes, met_names = name_codes(g["metric"])
        kept = self._kept.get(codes, ids, met_codes, met_names)
        if kept is not None:
            return kept
        layout = self._work_out(codes, ids, met_codes, met_names)
        self._kept.keep(codes, ids, met_codes, met_names, layout)
        return layout

    def _work_out(self, codes, ids, met_codes, met_names) -> list | None:
        pick = names_mask(met_names, _METRICS)[met_codes] & (codes >= 0)
        if not pick.any():
            return None
        sel = np.flatnonzero(pick)
        codes, met_codes = codes[sel], met_codes[sel]
        slot = self._metric_slots(met_names)[met_codes]
        accel_id = self._accelerator_names(ids) & (np.bincount(codes, minlength=len(ids)) > 0)
        if not accel_id.any():
            return None
        keep = accel_id[codes]
        sel, codes, slot = sel[keep], codes[keep], slot[keep]
        # Renumber the accelerators 0..n-1 (ids order); the detector looks up their persistent rows.
        renum = np.cumsum(accel_id) - 1
        return [sel, slot, renum[codes], ids[accel_id]]

    def _accelerator_names(self, names: np.ndarray) -> np.ndarray:
        """Which of the names are accelerators (cached while the names are the same array, see ``name_codes``)."""
        cached = self._accel_cache
        if cached is None or cached[0] is not names:
            is_accel = np.fromiter((entity_kind(e) == "accelerator" for e in names), dtype=bool, count=len(names))
            cached = self._accel_cache = (names, is_accel)
        return cached[1]

    def _metric_slots(self, names: np.ndarray) -> np.ndarray:
        """Each metric name's place in ``_METRICS`` (-1: not read here), kept while the names are the same array."""
        cached = self._slot_cache
        if cached is None or cached[0] is not names:
            slots = np.array([_METRICS.index(n) if n in _METRICS else -1 for n in names], dtype=np.int64)
            cached = self._slot_cache = (names, slots)
        return cached[1]


class PeerDeviation:
    """Robust peer residuals of temperature, HBM temperature and clocks; parameters in ``__init__``.

    All state is per-entity arrays (vectorized over the fleet each tick); Python runs only for the few
    GPUs that produce evidence.
    """

    name = "peer"
    needs_features = False
    inputs = {"gpu_temp_c": "GPU temperature against its node's peers", "hbm_temp_c": "HBM temperature against its "
              "node's peers", "power_w": "power (temperatures are corrected for it)", "sm_clock_mhz": "SM clock "
              "against its node's busy peers (fail-slow)", "gpu_util_pct": "load state (busy or idle peers)"}

    def __init__(self, z_threshold: float = 6.0, min_excess_c: float = 8.0, suspect_excess_c: float = 6.0,
                 hbm_min_excess_c: float = 10.0, slow_ratio: float = 0.85, halflife_s: float = 300.0,
                 min_peers: int = 3, min_rise_c: float = 4.0, absolute_excess_c: float = 15.0,
                 hbm_absolute_excess_c: float = 17.0, baseline_halflife_s: float = 86400.0,
                 clear_margin_c: float = 2.0, moved_excess_c: float = 0.0):
        self.z_threshold = z_threshold
        self.min_excess_c = min_excess_c
        self.suspect_excess_c = suspect_excess_c
        self.hbm_min_excess_c = hbm_min_excess_c
        self.slow_ratio = slow_ratio
        self.halflife_s = halflife_s
        self.min_peers = min_peers
        self.min_rise_c = min_rise_c
        self.absolute_excess_c = absolute_excess_c
        self.hbm_absolute_excess_c = hbm_absolute_excess_c
        self.baseline_halflife_s = baseline_halflife_s
        self.clear_margin_c = clear_margin_c
        self.moved_excess_c = moved_excess_c

    def fit(self, X=None, y=None) -> PeerDeviation:
        """Nothing to learn up front: the state is the smoothed residual per accelerator."""
        self.threshold_ = self.z_threshold
        self._rows = _Rows()
        self._layout = _GaugeLayout()  # (its layouts' rows are this _Rows' rows)
        # The thermal state of accelerator row ``i`` is at rows ``2 i`` (GPU temperature) and ``2 i + 1`` (HBM): both
        # metrics are judged in one pass over the fleet, not one a metric (a tick's cost is its numpy calls).
        self._smooth = RowEwma(self.halflife_s)
        # Each GPU's residual against the steady reference (its peers less their own offsets), smoothed
        self._level = RowEwma(self.halflife_s)
        # The own baseline per load state (busy, idle, unknown), never restarted by a gap.
        self._own = {load: RowEwma(self.baseline_halflife_s, restart_after=None) for load in LOAD_STATES}
        self._hot = np.zeros(0, dtype=bool)
        self._clock = RowEwma(self.halflife_s)  # a busy GPU's clock over its busy peers', per accelerator row
        self._slow_now = np.zeros(0, dtype=bool)
        self._load_state = np.full(0, -1, dtype=np.int64)
        self._load_since = np.full(0, np.nan)
        self._settled = np.zeros(0, dtype=bool)
        self._models = None
        return self

    def __getstate__(self) -> dict:
        """The detector without its figures of the last tick's readings (a cache: a warm state need not carry it; nor
        its gauge layout, which pickles empty)."""
        state = dict(self.__dict__)
        state.pop("_peer_memo", None)
        return state

    def restore(self, flagged: set[str]) -> None:
        """Nothing to restore: residuals and baselines warm up again from the next samples, and health keeps a
        restarted daemon's states until they are clean for as long as they must be."""

    def steady_until(self, now: float) -> float:
        """For ever: a held reading is folded in once, when sampled, and judged as it was then (the load state's
        settling included), so a tick without a new sample says what the last one said."""
        return np.inf

    def forget(self, scope: str) -> None:
        """Drop the smoothed residuals and own baselines of the GPUs in ``scope`` (a node's or one: replaced)."""
        if not hasattr(self, "_rows"):
            return
        rows = self._rows.index.rows_within(scope)
        thermal = _thermal_rows(rows)
        for e in (self._smooth, self._level, *self._own.values()):
            e.forget(thermal)
        self._clock.forget(rows)
        self._hot[thermal] = False
        self._slow_now[rows] = False
        self._load_state[rows], self._load_since[rows], self._settled[rows] = -1, np.nan, False

    def _grow(self, n: int) -> None:
        if not hasattr(self, "_settled"):  # a warm state saved before the load state's settling was kept
            self._settled = np.zeros(len(self._load_state), dtype=bool)
        for e in (self._smooth, self._level, *self._own.values()):
            e.grow(2 * n)
        self._clock.grow(n)
        extra = n - len(self._slow_now)
        if extra > 0:
            self._hot = np.concatenate([self._hot, np.zeros(2 * extra, dtype=bool)])
            self._slow_now = np.concatenate([self._slow_now, np.zeros(extra, dtype=bool)])
            self._load_state = np.concatenate([self._load_state, np.full(extra, -1, dtype=np.int64)])
            self._load_since = np.concatenate([self._load_since, np.full(extra, np.nan)])
            self._settled = np.concatenate([self._settled, np.zeros(extra, dtype=bool)])

    def update(self, tick: TickInput) -> list[Evidence]:
        if not hasattr(self, "_rows"):
            self.fit()
        g = tick.gauges
        if g.empty:
            return []
        layout = self._layout.of(g)
        if layout is None:
            return []
        sel, slot, local, ids = layout[:4]
        reading = np.asarray(g["last"], dtype=float)[sel]
        if "mean" in g:
            reading = np.where(_TICK_MEAN[slot], np.asarray(g["mean"], dtype=float)[sel], reading)
        # sampled this tick (GaugeHold's ``fresh``), not a reading held from an earlier one; None: all of them (a
        # table without the column, a fleet scraped every tick: it pays nothing for telling them apart)
        is_fresh = np.asarray(g["fresh"], dtype=bool) if "fresh" in g else None
        is_fresh = None if is_fresh is None or is_fresh.all() else is_fresh[sel]
        columns, fresh = _columns(len(ids), local, slot, reading, is_fresh)
        if np.isnan(columns["power_w"]).all():
            return []
        if len(layout) == 4:  # the accelerators' rows, looked up once a layout (new ones added at the end)
            layout += self._rows.lookup(ids, tick.models)
        rows, n = layout[4:]
        self._models = tick.models
        self._grow(n)
        node_code = self._rows.node_code[rows]
        util = columns["gpu_util_pct"]
        load = load_state(util)
        settled = self._load_settled(rows, load, tick.now, fresh["gpu_temp_c"] | fresh["hbm_temp_c"])
        # Peers at comparable load: busy GPUs against the node's busy ones, idle against idle (a half-used
        # node's median otherwise moves with its job mix); all together where utilisation is unknown.
        peer_code = node_code * 3 + load
        out = self._temperatures(tick.now, ids, rows, peer_code, node_code, columns, load, settled, fresh)
        if not np.isnan(columns["sm_clock_mhz"]).all():
            out += self._slow(tick.now, ids, rows, node_code, columns["sm_clock_mhz"], util, fresh["sm_clock_mhz"])
        return out

    def _load_settled(self, rows: np.ndarray, load: np.ndarray, now: float, fresh: np.ndarray) -> np.ndarray:
        """Whether each GPU has held its load state (busy/idle/unknown) for two smoothing half-lives, as of its last
        fresh temperature (``fresh``): a GPU's held readings are judged as they were when sampled."""
        changed = self._load_state[rows] != load
        self._load_state[rows] = load
        self._load_since[rows] = np.where(changed, now, self._load_since[rows])
        settled = ~changed & (now - self._load_since[rows] >= 2 * self.halflife_s)
        if not fresh.all():
            settled = np.where(fresh, settled, self._settled[rows])
        self._settled[rows] = settled
        return settled

    def _against_peers(self, codes: np.ndarray, nodes: np.ndarray, t: np.ndarray, p: np.ndarray) -> tuple | None:
        """Each GPU's power-corrected temperatures (``t``: the rows of :data:`_THERMAL`), their residuals against
        the peer group's median (the whole node's where the group has fewer than four readings: :func:`_peer_median`),
        both metrics in one array (metric-major, NaN where not judged: fewer than four readings in the node), each
        metric's spread of residuals and the rows' peer groups and nodes; None where neither is judged. A
        function of the readings alone: a tick whose readings are the last tick's (a tick between two 5-minute
        samples, the held readings judged again) is given the same figures without working them out again."""
        memo = getattr(self, "_peer_memo", None)
        if memo is None:
            memo = self._peer_memo = {}
        last = memo.get("thermal")
        if last is not None and all(a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
                                    for a, b in zip(last[0], (codes, nodes, t, p))):
            return last[1]
        level = np.full(t.shape, np.nan)
        judged = np.zeros(len(_THERMAL), dtype=bool)
        for m in range(len(_THERMAL)):
            ok = np.isfinite(t[m]) & np.isfinite(p)
            if ok.sum() < 4:
                continue
            slope = _slope(p[ok], t[m][ok]) if np.ptp(p[ok]) > 50 else 0.0
            # The node's median includes the GPU itself: with eight peers one hot GPU cannot move it.
            level[m] = np.where(ok, t[m] - slope * p, np.nan)
            judged[m] = True
        found = None
        if judged.any():
            level = level.ravel()
            group, node = _metric_groups(codes), _metric_groups(nodes)
            residual = level - _peer_median(group, node, level, self.min_peers + 1)
            found = (level, residual, _spreads(residual.reshape(t.shape)), group, node)
        memo["thermal"] = ((codes.copy(), nodes.copy(), t.copy(), p.copy()), found)
        return found

    def _temperatures(self, now, ids, rows, codes, nodes, columns, load, settled, fresh) -> list[Evidence]:
        """The GPU and HBM temperatures of the fleet judged in one pass (rows metric-major: the GPUs' evidence
        first, as one pass a metric gave it)."""
        n = len(ids)
        found = self._against_peers(codes, nodes, np.vstack([columns[m] for m in _THERMAL]), columns["power_w"])
        if found is None:
            return []
        level, residual, spread, group, node = found
        sel = np.flatnonzero(np.isfinite(residual))
        metric, i = np.divmod(sel, n)
        gpu = metric == 0
        r = 2 * rows[i] + metric  # the thermal state's rows
        # Each reading is folded into the smoothing once, when it is sampled (its weight the time since the one
        # before): a 5-minute sample held over ten ticks is one reading, not ten, and a tick between two samples
        # judges what the last one said.
        held = ~np.concatenate([fresh[m] for m in _THERMAL])[sel]
        smooth = self._smooth.update(r, residual[sel], now, frozen=held)
        was_hot = self._hot[r]
        margin = np.where(was_hot, self.clear_margin_c, 0.0)
        # The rise: the GPU's residual over its own baseline of it (per load state: a GPU's own thermal resistance
        # puts it further from its peers busy than idle, which is no rise), the residual taken against a reference
        # that does not move with which peers share its load: the median of its peers' power-corrected temperatures
        # each less its own baseline offset (a half-used node's busy four and a full node's eight give the same
        # level; against their plain median a GPU with the highest resistance of the busy four stood degrees
        # further out in a half-used node). Peers without a baseline yet stand out of the reference, and until
        # enough have one it is the plain median. Right after a load change there is no comparison (and a flagged
        # GPU stays flagged).
        ld, st = load[i], settled[i]
        offset = np.full(len(sel), np.nan)
        for state in LOAD_STATES:
            k = np.flatnonzero(ld == state)
            offset[k] = self._own[state].value[r[k]]
        reference = _peer_median(group[sel], node[sel], level[sel] - offset, self.min_peers + 1)
        steady = np.where(np.isfinite(reference), level[sel] - reference, residual[sel])
        own = self._level.update(r, steady, now, frozen=held)
        rise = np.full(len(sel), np.nan)
        for state in LOAD_STATES:
            k = np.flatnonzero(st & (ld == state))
            if len(k):
                base = self._own[state].update(r[k], own[k], now, frozen=was_hot[k] | held[k])
                rise[k] = own[k] - base
        # How far the fleet's GPUs move from their own baselines (noise, workload): a rise is judged against it.
        rise_spread = _spreads([rise[metric == m] for m in range(len(_THERMAL))])[metric]
        spread = spread[metric]
        # The HBM's bars stand 2 °C above the die's: its temperature follows the job's memory traffic, which the
        # power correction does not see (a GB200 tray's warm slot, its HBM 15.0 °C over its three peers for a day
        # without a rise, was flagged at the die's 15 °C: detectors-history.md, Run 18). Once flagged, either is
        # held down to the die's level less the margin (a degrading GPU's HBM between load changes stays flagged).
        min_excess = np.where(gpu, self.min_excess_c, self.hbm_min_excess_c)
        absolute = np.where(was_hot, self.absolute_excess_c - self.clear_margin_c,
                            np.where(gpu, self.absolute_excess_c, self.hbm_absolute_excess_c))
        with np.errstate(invalid="ignore"):
            rising = np.where(st, rise >= self.min_rise_c - margin, was_hot)
            z = smooth / spread
            rise_z = rise / rise_spread
            hot = (smooth >= min_excess - margin) & (z >= self.z_threshold - margin / spread) & (
                rising | (smooth >= absolute))
            # Not the HBM's: its temperature follows the memory traffic, which power does not show
            risen = gpu & st & (rise >= self.min_rise_c - margin) & (
                rise_z >= self.z_threshold - margin / rise_spread) & (smooth >= self.moved_excess_c - margin)
            hot |= risen | (gpu & was_hot & ~st & (smooth >= self.moved_excess_c - margin))
            suspect = ~hot & gpu & (smooth >= self.suspect_excess_c) & (
                z >= self.z_threshold / 2) & (rise >= self.min_rise_c / 2)  # NaN (no comparison yet) is never above
        self._hot[r] = hot
        out = []
        for j in np.flatnonzero(hot | suspect):
            entity = ids[i[j]]
            chip = chip_word(entity, self._models) if gpu[j] else "HBM"
            reason = (f"{entity.split('/', 1)[1]} {chip} {smooth[j]:+.1f} °C against its node's peers at equal "
                      f"power (z {z[j]:.1f}, fleet spread {spread[j]:.1f} °C), {rise[j]:+.1f} °C over its own "
                      f"baseline (z {rise_z[j]:.1f}, fleet spread {rise_spread[j]:.1f} °C)")
            # hot is left only clear_margin_c under where it was entered: a state of its own, not a level that flickers
            out.append(Evidence(entity, State.SUBHEALTHY if hot[j] else State.SUSPECT, "gpu_thermal", [reason],
                                detector=self.name, score=min(1.0, 0.5 + z[j] / 40), latched=bool(hot[j])))
        return out

    def _slow(self, now, ids, rows, codes, clock, util, fresh) -> list[Evidence]:
        busy_clock = np.where(util >= 50, clock, np.nan)
        median, count = group_median(codes, busy_clock)
        ratio = busy_clock / median[codes]
        ratio[count[codes] < self.min_peers + 1] = np.nan
        sel = np.flatnonzero(np.isfinite(ratio))
        r = rows[sel]
        smooth = self._clock.update(r, ratio[sel], now, frozen=~fresh[sel])
        # Hysteresis: enter at slow_ratio, leave only above slow_ratio + 0.05.
        limit = self.slow_ratio + np.where(self._slow_now[r], 0.05, 0.0)
        slow = smooth <= limit
        self._slow_now[r] = slow
        out = []
        for j in np.flatnonzero(slow):
            i = sel[j]
            clock = clock_word(ids[i], self._models)
            reason = (f"{ids[i].split('/', 1)[1]} {clock} at {smooth[j]:.0%} of its busy peers' "
                      f"({median[codes[i]]:.0f} MHz)")
            out.append(Evidence(ids[i], State.SUBHEALTHY, "gpu_compute", [reason], detector=self.name,
                                score=min(1.0, 0.5 + (1 - smooth[j])), latched=True))
        return out
