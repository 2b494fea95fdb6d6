"""The rule detector: hard facts and shipped thresholds, each finding with its reasons.

Rules (docs/architecture.md §5):

* Xid events by NVIDIA's own catalog (:mod:`detectors.xid_catalog`: all 172 codes, the vendor's resolution
  bucket deciding, raswarden's departures said per row): RESET_GPU and RESTART_BM ``failed`` (46, 48, 79, 95, 119,
  ...), CONTACT_SUPPORT and CHECK_MECHANICALS ``subhealthy``, IGNORE a ``suspect`` watch, RESTART_APP and the Xid
  13/31/45 workflows the job's (``suspect`` only when they repeat on one GPU across processes while its peers see
  none), 144-150 by the catalog's decode sheet for the line, 154 by the recovery action the driver names. NVSwitch
  SXids by the Fabric Manager guide's class. A code no catalog knows is ``suspect`` and counted (:meth:`take_unjudged`).
* ECC: any double-bit increase is ``failed``; correctable errors above ``sbe_per_hour``; a row-remap
  failure flag is ``failed``; an uncorrectable row remap or DBE page retirement is ``subhealthy``.
* PCIe: AER fatal ``failed``, uncorrected ``subhealthy``, corrected in ``aer_corrected_per_hour`` separate minutes
  of an hour; replays above the DCGM budget.
* Fabric: ``link_downed`` increase (an Ethernet port's ``link_down_events_phy``), a port not ACTIVE, or an mlx5
  "Link down" is ``failed`` (not during a node's reboot grace); symbol errors above 120/h (the IBTA 1e-12 BER limit
  NVSentinel uses; an Ethernet port's left by FEC, ``rx_pcs_symbol_err_phy``) and link error recoveries above
  ``link_recovery_per_hour`` are ``subhealthy`` when the hour's errors came in several samples; one burst over a
  limit is a watch (:meth:`RuleDetector._rates`). NVLink recoveries (an H100's DL recovery errors, NVLink 5's
  successful link recoveries) at ``nvlink_recovery_per_hour`` the same way: DCGM's NVLink health watch fails a GPU at
  one, here a link that keeps recovering is flagged whether or not raswarden has a record of it, one recovery watched.
* Thermal: GPU temperature at the slowdown limit or thermal throttling ``subhealthy`` (a ``suspect`` watch when
  the GPU's rack warmed with it: :mod:`detectors.shared_heat`), at the shutdown limit ``failed``; HBM at its limit
  (95 °C) ``suspect`` (a watch: a warm slot gets there in a rack-wide coolant swing; a degrading GPU is flagged by
  the peer detector). The host: its CPUs throttling for heat a ``suspect`` cooling watch, the kernel shutting the
  node down at a thermal zone's critical trip ``failed`` (cooling).
* Host: EDAC uncorrected, fatal MCE ``failed``; corrected MCE ``suspect``.
* Other vendors' RAS events (amdgpu kernel lines, Ascend fault codes) by ``vendor_events``; the vendor's own
  health bit (npu-exporter's health status, npu-smi's Health) at 0 is ``subhealthy``.

``baseline=True`` keeps only what shipped static-threshold tools (DCGM health checks, NVSentinel) act on:
any DBE increase, any Xid of the hardware set (as fatal), a row-remap failure, AER fatal, EDAC
uncorrected and fatal MCE, GPU temperature at the slowdown/shutdown limits, a thermal shutdown, ``link_downed``
increase, a port not ACTIVE or an mlx5 "Link down", symbol errors above 120/h, an NVLink recovery. It is the yardstick
the evaluation reports beside raswarden's own detectors.

Discrete events hold their evidence for a while (``event_hold_s``; ``failed_hold_s`` for hard
faults) so that the health hysteresis sees them; level rules hold only while the level lasts.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque

from detectors.contract import Evidence, TickInput
from detectors.counters import DecayingCount
from detectors.pcie_width import LinkWidths
from detectors.rules_events import EventRules
from detectors.rules_levels import LevelRules
from detectors.schema import State, within
from detectors.shared_heat import SharedHeat
from detectors.vendor_events import load_afid_catalog, load_ascend_catalog, load_sel_catalog
from detectors.xid_catalog import load_decode_sheet, load_sxid_catalog, load_xid_catalog

#: inputs that read the same signal another way (the other fabric's counter; the time throttled for temperature for
#: the throttle reasons): a trace with one is not blind for want of the other
SAME_SIGNAL = {"link_downed_total": "link_down_events_total", "link_down_events_total": "link_downed_total",
               "symbol_error_total": "pcs_symbol_error_total", "pcs_symbol_error_total": "symbol_error_total",
               "throttle_thermal": "thermal_violation_us_total"}


# What each rule reads, so a replay or the service can say which rules a source set leaves blind
# (stock dcgm-exporter, for one, exports no ECC counters).
RULE_INPUTS: dict[str, str] = {
    "ecc_dbe_total": "double-bit ECC errors (failed)",
    "ecc_sbe_total": "correctable ECC error rate",
    "row_remap_failure": "row-remap failure flag",
    "row_remap_uncorrectable_total": "uncorrectable row remaps",
    "pcie_replay_total": "PCIe replay rate",
    "xid_last": "Xid from dcgm-exporter (kernel logs also carry Xids)",
    "gpu_temp_c": "GPU slowdown/shutdown temperature",
    "throttle_thermal": "thermal clock throttling",
    "symbol_error_total": "fabric symbol error rate",
    "link_error_recovery_total": "fabric link error recovery rate",
    "link_downed_total": "fabric link_downed increase",
    "link_down_events_total": "Ethernet fabric link down events (ethtool link_down_events_phy)",
    "pcs_symbol_error_total": "Ethernet fabric symbol errors after FEC (ethtool rx_pcs_symbol_err_phy)",
    "port_state": "fabric port state",
}
# (Readings judged where a fleet exports them and never called blind when it does not: a link's integrity counters,
# DCGM's page retirement, pending row remaps and banks out of spare rows, an NPU's network health, a BMC's sensor
# states; the thermal violation time stands for the throttle reasons.)


class RuleDetector(EventRules, LevelRules):
    """Streaming rule evaluation with latched evidence; parameters are the thresholds (see module doc). Its rules
    live in two parts that share its state: events (:mod:`detectors.rules_events`) and levels
    (:mod:`detectors.rules_levels`)."""

    name = "rules"
    needs_features = False
    inputs = RULE_INPUTS

    def __init__(
        self,
        event_hold_s: float = 3600.0,
        failed_hold_s: float = 6 * 3600.0,
        sbe_per_hour: float = 50.0,
        pcie_replay_per_hour: float = 921.6,
        aer_corrected_per_hour: float = 20.0,
        symbol_errors_per_hour: float = 120.0,
        link_recovery_per_hour: float = 300.0,
        nvlink_recovery_per_hour: float = 1.0,
        edac_ce_per_day: float = 50.0,
        gpu_temp_slowdown_c: float = 87.0,
        gpu_temp_shutdown_c: float = 92.0,
        hbm_temp_limit_c: float = 95.0,
        limit_min_increases: int = 3,
        limit_burst_share: float = 0.5,
        app_xid_repeats: int = 3,
        app_xid_window_s: float = 86400.0,
        retired_pages_limit: float = 63.0,
        thermal_violation_share: float = 0.5,
        baseline: bool = False,
    ):
        self.event_hold_s = event_hold_s
        self.failed_hold_s = failed_hold_s
        self.sbe_per_hour = sbe_per_hour
        self.pcie_replay_per_hour = pcie_replay_per_hour
        self.aer_corrected_per_hour = aer_corrected_per_hour
        self.symbol_errors_per_hour = symbol_errors_per_hour
        self.link_recovery_per_hour = link_recovery_per_hour
        self.nvlink_recovery_per_hour = nvlink_recovery_per_hour
        self.edac_ce_per_day = edac_ce_per_day
        self.gpu_temp_slowdown_c = gpu_temp_slowdown_c
        self.gpu_temp_shutdown_c = gpu_temp_shutdown_c
        self.hbm_temp_limit_c = hbm_temp_limit_c
        self.limit_min_increases = limit_min_increases
        self.limit_burst_share = limit_burst_share
        self.app_xid_repeats = app_xid_repeats
        self.app_xid_window_s = app_xid_window_s
        self.retired_pages_limit = retired_pages_limit
        self.thermal_violation_share = thermal_violation_share
        self.baseline = baseline

    # -- scikit-learn style -------------------------------------------------------------------
    def fit(self, X=None, y=None) -> RuleDetector:
        """Rules learn nothing: load the catalog and reset the streaming state."""
        self.catalog_ = load_xid_catalog()
        self.decode_sheet_ = load_decode_sheet()
        self.sxid_catalog_ = load_sxid_catalog()
        self.unknown_sxids_: dict[int, int] = defaultdict(int)
        self.undecoded_xids_: dict[int, int] = defaultdict(int)  # NVLink 5 lines no row of the decode sheet matched
        self.threshold_ = float(State.SUBHEALTHY)
        self.unknown_xids_: dict[int, int] = defaultdict(int)
        self._unjudged: dict[tuple[str, int], int] = defaultdict(int)  # since take_unjudged: (catalog, code) -> count
        self.ascend_catalog_ = load_ascend_catalog()
        self.afid_catalog_ = load_afid_catalog()
        self.sel_catalog_ = load_sel_catalog()
        self.unknown_codes_: dict[int, int] = defaultdict(int)  # vendor fault codes not in their catalogs
        self._latches: dict[str, list[tuple[float, Evidence, str]]] = defaultdict(list)
        self._hourly = DecayingCount(3600.0)
        self._daily = DecayingCount(86400.0)
        self._hot: dict[str, tuple[str, str]] = {}  # counter rate keys at or over their limit: key -> (metric, entity)
        self._exposure: dict[str, deque] = {}  # rate keys near a limit: the (time, increase) of their last hour
        self.rate_limits_ = self._rate_limits()  # read every tick: built once
        self._app_xids: dict[str, deque] = defaultdict(deque)
        self._decode_seen: dict[str, deque] = defaultdict(deque)  # "xid|unit|entity" -> its lines' times, 24 h
        self._aer_minute: dict[str, float] = {}  # entity -> stamp of its last corrected AER line counted
        self._pruned_at = -math.inf
        self._heat_asked = False  # the last update judged a GPU at its limit against its rack's heat
        self._heat = None if self.baseline else SharedHeat(limit_c=self.gpu_temp_slowdown_c)
        self._widths = None if self.baseline else LinkWidths()
        self._width_watched: set[str] = set()
        return self

    def _latch(self, ev: Evidence, until: float, tag: str = "") -> None:
        ev.latched = True
        self._latches[ev.entity].append((until, ev, tag))

    def forget(self, scope: str) -> None:
        """Drop the latched evidence and event counts of the entities in ``scope`` (a node's or one part's)."""
        if not hasattr(self, "catalog_"):
            return
        for entity in [e for e in (*self._latches, *self._app_xids, *self._aer_minute) if within(e, scope)]:
            self._latches.pop(entity, None)
            self._app_xids.pop(entity, None)
            self._aer_minute.pop(entity, None)
        for key in [k for k in self._decode_seen if within(k.rsplit("|", 1)[-1], scope)]:
            del self._decode_seen[key]
        for key in [k for k, (_, e) in self._hot.items() if within(e, scope)]:
            del self._hot[key]
        for key in [k for k in self._exposure if within(k.rsplit("|", 1)[-1], scope)]:
            del self._exposure[key]
        for counts in (self._hourly, self._daily):  # keys are "what|entity"
            counts.drop(lambda key: within(key.rsplit("|", 1)[-1], scope))
        if self._heat is not None:
            self._heat.forget(scope)
        if self._widths is not None:
            self._widths.forget(scope)

    def restore(self, flagged: set[str]) -> None:
        """Nothing to restore: hard facts come again with the next events and levels, and health keeps a restarted
        daemon's states until they are clean for as long as they must be."""

    def steady_until(self, now: float) -> float:
        """Until the first latch ends or the hourly pruning is due; ``now`` while a rate is over its limit (the
        hour's count decays tick by tick) or a GPU at its limit was judged against its rack's heat (whose baselines
        settle with time)."""
        if not hasattr(self, "catalog_") or self._hot or self._heat_asked:
            return now
        until = self._pruned_at + 3600.0 - 1e-3  # (a millisecond to spare for rounding: then a tick runs)
        for latches in self._latches.values():
            until = min(until, min(x[0] for x in latches))
        return until

    def _width_watches(self, now: float, tick: TickInput) -> None:
        """The PCIe width watches (:mod:`detectors.pcie_width`), latched until the judgement after the next."""
        judged = self._widths.update(now, tick.gauges)
        if judged is None:
            return
        for entity in self._width_watched:
            self.clear_latch(entity, "pcie-width")
        self._width_watched = {ev.entity for ev in judged}
        for ev in judged:
            self._latch(ev, now + 2 * self._widths.every_s, "pcie-width")

    def clear_latch(self, entity: str, tag: str) -> None:
        """Drop an entity's latched evidence carrying ``tag`` (e.g. a link that came back up)."""
        if entity in self._latches:
            self._latches[entity] = [x for x in self._latches[entity] if x[2] != tag]

    # -- per tick -----------------------------------------------------------------------------
    def update(self, tick: TickInput) -> list[Evidence]:
        """Evaluate one tick; returns the evidence of every entity that has any."""
        if not hasattr(self, "catalog_"):
            self.fit()
        now = tick.now
        level_evidence: list[Evidence] = []
        self._heat_asked = False
        self._events(tick)
        self._counters(tick, level_evidence)
        if self._heat is not None:
            self._heat.observe(now, tick.gauges, tick.racks)
        self._gauges(tick, level_evidence)
        if self._widths is not None:
            self._width_watches(now, tick)
        if not self.baseline:
            self._thermal_violations(tick)
        out = level_evidence
        for entity in list(self._latches):
            alive = [x for x in self._latches[entity] if x[0] >= now]
            if alive:
                self._latches[entity] = alive
                out.extend(x[1] for x in alive)
            else:
                del self._latches[entity]
        if now - self._pruned_at >= 3600.0:  # keep the decaying counts' memory bounded
            self._hourly.prune(now)
            self._daily.prune(now)
            self._aer_minute = {e: t for e, t in self._aer_minute.items() if t >= now - 3600.0}
            self._exposure = {k: q for k, q in self._exposure.items() if q and q[-1][0] > now - 3600.0}
            for key in [k for k, q in self._decode_seen.items() if not q or q[-1] <= now - 86400.0]:
                del self._decode_seen[key]
            self._pruned_at = now
        return out

