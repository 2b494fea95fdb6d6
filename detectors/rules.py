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
  limit is a watch (:meth:`RuleDetector._rates`).
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
increase, a port not ACTIVE or an mlx5 "Link down", symbol errors above 120/h. It is the yardstick the evaluation
reports beside raswarden's own detectors.

Discrete events hold their evidence for a while (``event_hold_s``; ``failed_hold_s`` for hard
faults) so that the health hysteresis sees them; level rules hold only while the level lasts.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict, deque

import numpy as np
import pandas as pd

from detectors.contract import Evidence, TickInput
from detectors.counters import DecayingCount
from detectors.shared_heat import SharedHeat
from detectors.schema import State, entity_kind, name_codes, names_in, node_of, within
from detectors.vendor_events import Verdict, amdgpu_verdict, ascend_verdict, load_ascend_catalog
from detectors.xid_catalog import (
    XidRule,
    decode_nvlink5,
    load_decode_sheet,
    load_sxid_catalog,
    load_xid_catalog,
    repair_reason,
    state_of,
)

_PID = re.compile(r"pid=('?[^,]*'?)")
PORT_ACTIVE = 4.0
_PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
# Counters whose every increase is judged on its own (the rate rules below read the others).
_HARD_COUNTERS = frozenset({"ecc_dbe_total", "ecc_dbe_agg_total", "row_remap_uncorrectable_total",
                            "retired_pages_dbe_total", "link_downed_total", "link_down_events_total",
                            "edac_ue_total"})
# An Ethernet (RoCE) port's link counters, mlx5's ethtool ``*_phy`` counters as node_exporter's ethtool collector
# serves them (Linux, Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst): named apart from
# the InfiniBand PortCounters, which the same port's RDMA device may show too (zeros on Ethernet), so the two never
# mix in one counter; judged as them. 32 and 64 bits: they wrap, never saturate.
LINK_DOWN_COUNTERS = {"link_downed_total": "link_downed", "link_down_events_total": "link_down_events_phy"}
#: inputs that read the same signal on the other fabric: a trace with one is not blind for want of the other
SAME_SIGNAL = {"link_downed_total": "link_down_events_total", "link_down_events_total": "link_downed_total",
               "symbol_error_total": "pcs_symbol_error_total", "pcs_symbol_error_total": "symbol_error_total"}
# InfiniBand PortCounters that stop at their maximum instead of wrapping (IBA 16.1.3.5: LinkDownedCounter and
# LinkErrorRecoveryCounter are 8 bits, SymbolErrorCounter and PortRcvErrors 16), as sysfs and node_exporter show
# them: a counter at its maximum counts nothing more.
SATURATES = {"link_downed_total": 255.0, "link_error_recovery_total": 255.0, "symbol_error_total": 65535.0,
             "rcv_errors_total": 65535.0}


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


class RuleDetector:
    """Streaming rule evaluation with latched evidence; parameters are the thresholds (see module doc)."""

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
        edac_ce_per_day: float = 50.0,
        gpu_temp_slowdown_c: float = 87.0,
        gpu_temp_shutdown_c: float = 92.0,
        hbm_temp_limit_c: float = 95.0,
        limit_min_increases: int = 3,
        limit_burst_share: float = 0.5,
        app_xid_repeats: int = 3,
        app_xid_window_s: float = 86400.0,
        baseline: bool = False,
    ):
        self.event_hold_s = event_hold_s
        self.failed_hold_s = failed_hold_s
        self.sbe_per_hour = sbe_per_hour
        self.pcie_replay_per_hour = pcie_replay_per_hour
        self.aer_corrected_per_hour = aer_corrected_per_hour
        self.symbol_errors_per_hour = symbol_errors_per_hour
        self.link_recovery_per_hour = link_recovery_per_hour
        self.edac_ce_per_day = edac_ce_per_day
        self.gpu_temp_slowdown_c = gpu_temp_slowdown_c
        self.gpu_temp_shutdown_c = gpu_temp_shutdown_c
        self.hbm_temp_limit_c = hbm_temp_limit_c
        self.limit_min_increases = limit_min_increases
        self.limit_burst_share = limit_burst_share
        self.app_xid_repeats = app_xid_repeats
        self.app_xid_window_s = app_xid_window_s
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
        self.unknown_codes_: dict[int, int] = defaultdict(int)  # vendor fault codes not in their catalogs
        self._latches: dict[str, list[tuple[float, Evidence, str]]] = defaultdict(list)
        self._hourly = DecayingCount(3600.0)
        self._daily = DecayingCount(86400.0)
        self._hot: dict[str, tuple[str, str]] = {}  # counter rate keys at or over their limit: key -> (metric, entity)
        self._exposure: dict[str, deque] = {}  # rate keys near a limit: the (time, increase) of their last hour
        self.rate_limits_ = self._rate_limits()  # read every tick: built once
        self._app_xids: dict[str, deque] = defaultdict(deque)
        self._aer_minute: dict[str, float] = {}  # entity -> stamp of its last corrected AER line counted
        self._pruned_at = -math.inf
        self._heat = None if self.baseline else SharedHeat(limit_c=self.gpu_temp_slowdown_c)
        return self

    def _count_unjudged(self, counts: dict[int, int], catalog: str, code: int | None) -> None:
        key = code if code is not None else -1
        counts[key] += 1
        self._unjudged[(catalog, key)] += 1

    def take_unjudged(self) -> dict[tuple[str, int], int]:
        """Codes no catalog judged since the last call, as ``(catalog, code) -> count`` (catalog ``xid``, ``sxid``,
        ``xid_decode`` for NVLink 5 lines no decode row matched, ``vendor`` for Ascend codes): the service counts them
        on /metrics, so a fleet printing codes raswarden does not know shows it."""
        taken, self._unjudged = dict(self._unjudged), defaultdict(int)
        return taken

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
        for key in [k for k, (_, e) in self._hot.items() if within(e, scope)]:
            del self._hot[key]
        for key in [k for k in self._exposure if within(k.rsplit("|", 1)[-1], scope)]:
            del self._exposure[key]
        for counts in (self._hourly, self._daily):  # keys are "what|entity"
            counts.drop(lambda key: within(key.rsplit("|", 1)[-1], scope))
        if self._heat is not None:
            self._heat.forget(scope)

    def restore(self, flagged: set[str]) -> None:
        """Nothing to restore: hard facts come again with the next events and levels, and health keeps a restarted
        daemon's states until they are clean for as long as they must be."""

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
        self._events(tick)
        self._counters(tick, level_evidence)
        if self._heat is not None:
            self._heat.observe(now, tick.gauges, tick.racks)
        self._gauges(tick, level_evidence)
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
            self._pruned_at = now
        return out

    def _events(self, tick: TickInput) -> None:
        if tick.events.empty:
            return
        now = tick.now
        for row in tick.events.itertuples(index=False):
            kind = row.kind
            entity = row.entity
            code = None if pd.isna(row.code) else int(row.code)
            if kind == "xid":
                self._xid(entity, code, row.message or "", row.ts, now, row.source, row.severity)
            elif kind == "sxid":
                self._sxid(entity, code, row.severity, row.message or "", now)
            elif kind == "aer":
                self._aer(entity, row.severity, row.message, row.ts, now)
            elif kind in ("edac", "mce"):
                self._host(entity, kind, row.severity, row.message, code, now)
            elif kind == "thermal" and row.severity == "critical":  # the kernel powers the node off for heat
                self._latch(Evidence(entity, State.FAILED, "cooling", [f"kernel: {row.message}"], hard=True),
                            now + self.failed_hold_s, "thermal-shutdown")
            elif kind == "thermal" and not self.baseline:
                if row.severity == "warning":  # the host's CPUs throttling for heat: its cooling, on a GPU blade
                    self.clear_latch(entity, "cpu-thermal")  # a burst names every CPU: one watch, the last line's
                    self._latch(Evidence(entity, State.SUSPECT, "cooling", [f"kernel: {row.message}"]),
                                now + self.event_hold_s, "cpu-thermal")
            elif kind == "gpu_init" and not self.baseline:
                # unusable while it is so; sub-healthy, not failed: a driver or firmware mismatch fails every GPU of a
                # node alike (the roll-up makes that a node incident), a bad part only its own
                self._latch(Evidence(entity, State.SUBHEALTHY, "gpu_bus", [f"kernel: {row.message}"]),
                            now + self.event_hold_s)
            elif kind == "ascend":
                self._vendor(entity, ascend_verdict(code, self.ascend_catalog_, self.baseline), row.ts, now, code)
            elif kind == "amdgpu":
                self._vendor(entity, amdgpu_verdict(row.severity, row.message or "", code, self.baseline), row.ts,
                             now, code)
            elif kind == "link":
                if row.severity == "info":
                    self.clear_latch(entity, "link-down")
                elif row.severity == "notice":  # INIT/ARMED: a port on its way up; its state gauge says if it stays
                    continue
                elif row.severity == "warning":  # the port works but its adapter is unwell (its slot's power)
                    if not self.baseline:
                        self._latch(Evidence(entity, State.SUBHEALTHY, "fabric_link", [f"kernel: {row.message}"]),
                                    now + self.event_hold_s)
                elif "/" not in entity:
                    # a NIC the topology does not place (a management or storage NIC, or a fabric port listed without
                    # its PCI address or netdev): said, never a node's failure; its counters judge a fabric port. Not
                    # while the node boots: unused ports print "Cable unplugged" and links come up then
                    if node_of(entity) in tick.grace_nodes:
                        continue
                    ev = Evidence(entity, State.SUSPECT, "fabric_link", [
                        f"kernel: {row.message}, on a NIC the topology does not place (add its pci and netdev to "
                        "the node's ports in topology.yaml to judge it)"])
                    self._latch(ev, now + self.event_hold_s, "link-down")
                elif node_of(entity) not in tick.grace_nodes:
                    ev = Evidence(entity, State.FAILED, "fabric_link", [f"kernel: {row.message}"], hard=True)
                    self._latch(ev, now + self.event_hold_s, "link-down")

    def _xid(self, entity: str, code: int | None, message: str, ts: float, now: float,
             source: str = "kernel", severity: str = "error") -> None:
        """One Xid by the catalog (``detectors/xid_catalog.py``): the vendor's bucket, raswarden's departures from it,
        the decode sheet for 144-150, the recovery action a 154 names."""
        rule = self.catalog_.get(code) if code is not None else None
        text = f"Xid {code}" + (f" {rule.mnemonic}" if rule else "") + (f": {message}" if message else "")
        if rule is None:
            self._count_unjudged(self.unknown_xids_, "xid", code)
            if self.baseline:
                return
            ev = Evidence(entity, State.SUSPECT, "gpu_compute", [f"{text} (Xid {code} is not in the catalog)"])
            self._latch(ev, now + self.event_hold_s)
            return
        for ended in rule.ends:  # 162 (power smoothing back) ends an open 163 (power smoothing off)
            self.clear_latch(entity, f"xid-{ended}")
        state, advice = rule.state, rule.vendor.immediate or "no action in the catalog"
        if state == "decode":
            state, advice = self._nvlink5(rule, message, source, severity)
        if state == "application":
            if not self.baseline:
                self._app_xid(entity, code, message, ts, now)
            return
        if state == "ignore" or (self.baseline and state == "suspect"):
            return
        if self.baseline:  # shipped tools: any Xid the vendor acts on is fatal
            self._latch(Evidence(entity, State.FAILED, rule.category, [text], hard=True), now + self.failed_hold_s)
            return
        if state == "recovery_action":
            lowered = message.lower()
            if source != "kernel":
                # The dcgm-exporter gauge reports the code only: the action is unknown, so sub-healthy.
                level, hard = State.SUBHEALTHY, False
            elif "reboot" in lowered:
                level, hard = State.FAILED, True
            elif "reset" in lowered or "drain" in lowered:
                level, hard = State.SUBHEALTHY, False
            else:
                return
            self._latch(Evidence(entity, level, rule.category, [text], hard=hard),
                        now + (self.failed_hold_s if hard else self.event_hold_s))
            return
        level = state_of(state)
        hard = level == State.FAILED
        reason = repair_reason(text, f"NVIDIA: {advice}", rule.repair)
        self._latch(Evidence(entity, level, rule.category, [reason], hard=hard),
                    now + (self.failed_hold_s if hard else self.event_hold_s), f"xid-{rule.code}")

    def _sxid(self, entity: str, code: int | None, severity: str, message: str, now: float) -> None:
        """An NVSwitch SXid by the Fabric Manager guide's class (``catalogs/sxid.csv``); a line that says Fatal is
        failed whatever its row, and a code the guide does not list is judged by its line alone (and counted)."""
        rule = self.sxid_catalog_.get(code) if code is not None else None
        text = f"NVSwitch SXid {code}" + (f" {rule.name}" if rule else "") + f" ({severity}): {message}"
        if rule is None:
            self._count_unjudged(self.unknown_sxids_, "sxid", code)
            state, category, repair = ("failed" if severity == "fatal" else "suspect"), "scaleup_link", "none"
            text += " (not in the Fabric Manager guide's list)"
        else:
            for ended in rule.ends:
                self.clear_latch(entity, f"sxid-{ended}")
            state, category, repair = rule.state, rule.category, rule.repair
            if severity == "fatal" and state != "failed":
                state, repair = "failed", "reset"
        if state == "ignore" or (self.baseline and state != "failed"):
            return
        level = state_of(state)
        hard = level == State.FAILED
        guide = f"guide: {rule.recovery.rstrip('.')}" if rule is not None and rule.recovery else "Fabric Manager guide"
        self._latch(Evidence(entity, level, category, [repair_reason(text, guide, repair)], hard=hard),
                    now + (self.failed_hold_s if hard else self.event_hold_s), f"sxid-{code}")

    def _nvlink5(self, rule: XidRule, message: str, source: str, severity: str) -> tuple[str, str]:
        """An NVLink 5 Xid (144-150) by the decode sheet's row for its line; where no row matches, by the line's own
        Fatal/Nonfatal word (and counted); the gauge's code alone says nothing of the row: sub-healthy."""
        decoded = decode_nvlink5(rule.code, message, self.decode_sheet_) if source == "kernel" else None
        if decoded is not None:
            return decoded.state, decoded.reason()
        if source == "kernel":
            self._count_unjudged(self.undecoded_xids_, "xid_decode", rule.code)
        if severity == "fatal":
            return "failed", "the line says Fatal; no row of the decode sheet matched"
        if severity == "nonfatal":
            return "suspect", "the line says Nonfatal; no row of the decode sheet matched"
        return "subhealthy", "WORKFLOW_NVLINK5_ERR, not decoded"

    def _vendor(self, entity: str, verdict: Verdict | None, ts: float, now: float, code: int | None) -> None:
        """Latch, rate or count one amdgpu/Ascend event's verdict (``vendor_events``)."""
        if verdict is None:
            return
        if verdict.unknown:
            self._count_unjudged(self.unknown_codes_, "vendor", code)
        if verdict.application:
            self._app_fault(entity, verdict.reason, f"{ts:.0f}", ts, now)
            return
        if verdict.rate_key:
            rate = self._hourly.add(f"{verdict.rate_key}|{entity}", now, verdict.count)
            if rate >= self.sbe_per_hour:
                ev = Evidence(entity, State.SUBHEALTHY, verdict.category,
                              [f"{verdict.reason}: {rate:.0f}/h (limit {self.sbe_per_hour:.0f}/h)"])
                self._latch(ev, now + self.event_hold_s, verdict.rate_key)
            return
        hold = self.failed_hold_s if verdict.hard else self.event_hold_s
        self._latch(Evidence(entity, verdict.level, verdict.category, [verdict.reason], hard=verdict.hard), now + hold)

    def _app_xid(self, entity: str, code: int | None, message: str, ts: float, now: float) -> None:
        """Application Xids: suspect only when one GPU repeats them across processes and its peers do not."""
        m = _PID.search(message)
        self._app_fault(entity, f"application Xid {code}", m.group(1) if m else message[:40], ts, now)

    def _app_fault(self, entity: str, label: str, key: str, ts: float, now: float) -> None:
        """Faults of the job: suspect when one accelerator repeats them (``key``: the process, so one crash
        looping in one process is one) while its node's peers see none."""
        pid = key
        seen = self._app_xids[entity]
        seen.append((ts, pid))
        while seen and seen[0][0] < now - self.app_xid_window_s:
            seen.popleft()
        node = node_of(entity)
        peers = [e for e, q in self._app_xids.items() if e != entity and node_of(e) == node and q
                 and q[-1][0] >= now - self.app_xid_window_s]
        if len(seen) >= self.app_xid_repeats and len({p for _, p in seen}) >= 2 and not peers:
            ev = Evidence(entity, State.SUSPECT, "gpu_compute",
                          [f"{label} repeated {len(seen)}x on this accelerator alone within "
                           f"{self.app_xid_window_s / 3600:.0f} h"])
            self._latch(ev, now + self.event_hold_s)

    def _aer(self, entity: str, severity: str, message: str, ts: float, now: float) -> None:
        category = "gpu_bus" if entity_kind(entity) == "accelerator" else "host"
        if severity == "fatal":
            self._latch(Evidence(entity, State.FAILED, category, [f"PCIe AER {message}"], hard=True),
                        now + self.failed_hold_s)
        elif self.baseline:
            return
        elif severity == "uncorrected":
            self._latch(Evidence(entity, State.SUBHEALTHY, category, [f"PCIe AER {message}"]), now + self.event_hold_s)
        else:
            # A rate that goes on, not a burst: the lines of one minute (a link retraining logs a handful at once)
            # count once, so the limit is minutes with corrected errors in the last hour.
            last = self._aer_minute.get(entity)
            if last is not None and abs(ts - last) < 60.0:
                return
            self._aer_minute[entity] = ts
            rate = self._hourly.add(f"aer|{entity}", now, 1.0)
            if rate >= self.aer_corrected_per_hour:
                ev = Evidence(entity, State.SUBHEALTHY, category,
                              [f"PCIe AER corrected errors in {rate:.0f} separate minutes of the last hour (limit "
                               f"{self.aer_corrected_per_hour:.0f})"])
                self._latch(ev, now + self.event_hold_s, "aer-rate")

    def _host(self, entity: str, kind: str, severity: str, message: str, code, now: float) -> None:
        label = "EDAC" if kind == "edac" else "MCE"
        if severity in ("fatal", "uncorrected"):
            self._latch(Evidence(entity, State.FAILED, "host", [f"{label} {severity}: {message}"], hard=True),
                        now + self.failed_hold_s)
        elif self.baseline:
            return
        elif kind == "mce" and severity == "corrected":
            self._latch(Evidence(entity, State.SUSPECT, "host", [f"MCE corrected: {message}"]), now + self.event_hold_s)
        elif kind == "edac" and severity == "corrected":
            count = self._daily.add(f"edac|{entity}", now, float(code or 1))
            if count >= self.edac_ce_per_day:
                ev = Evidence(entity, State.SUSPECT, "host",
                              [f"EDAC corrected errors {count:.0f}/24h (limit {self.edac_ce_per_day:.0f})"])
                self._latch(ev, now + self.event_hold_s, "edac-rate")

    def _counters(self, tick: TickInput, out: list[Evidence]) -> None:
        inc = tick.increases
        now = tick.now
        if inc.empty:
            self._rates(now, out)  # the rate rules speak every tick while the last hour is over the limit
            return
        ecodes, enames = name_codes(inc["entity"])
        mcodes, mnames = name_codes(inc["metric"])
        increases = inc["increase"].to_numpy()
        moved = np.flatnonzero(increases > 0)
        ecodes, mcodes, increases = ecodes[moved], mcodes[moved], increases[moved]
        hard = np.flatnonzero(np.isin(mcodes, [i for i, m in enumerate(mnames) if m in _HARD_COUNTERS]))
        for entity, metric, increase in zip(enames[ecodes[hard]], mnames[mcodes[hard]], increases[hard]):
            if metric in ("ecc_dbe_total", "ecc_dbe_agg_total"):
                ev = Evidence(entity, State.FAILED, "gpu_memory",
                              [f"uncorrectable (double-bit) ECC errors +{increase:.0f}"], hard=True)
                self._latch(ev, now + self.failed_hold_s)
            elif metric in ("row_remap_uncorrectable_total", "retired_pages_dbe_total") and not self.baseline:
                what = "row remapped for an uncorrectable error" if metric.startswith("row") else "page retired (DBE)"
                self._latch(Evidence(entity, State.SUBHEALTHY, "gpu_memory", [f"{what} +{increase:.0f}"]),
                            now + self.event_hold_s)
            elif metric in LINK_DOWN_COUNTERS:
                if node_of(entity) in tick.grace_nodes:
                    continue
                ev = Evidence(entity, State.FAILED, "fabric_link", [f"{LINK_DOWN_COUNTERS[metric]} +{increase:.0f}"],
                              hard=True)
                self._latch(ev, now + self.event_hold_s, "link-down")
            elif metric in ("edac_ue_total",):
                ev = Evidence(entity, State.FAILED, "host", [f"EDAC uncorrectable errors +{increase:.0f}"], hard=True)
                self._latch(ev, now + self.failed_hold_s)
        if not self.baseline and "last" in inc:
            self._saturated(inc, now)
        rates = self.rate_limits_
        for metric, (limit, _, _) in rates.items():
            if self.baseline and metric not in ("symbol_error_total", "pcs_symbol_error_total"):
                continue
            part = np.flatnonzero(np.isin(mcodes, np.flatnonzero(mnames == metric)))
            for entity, increase in zip(enames[ecodes[part]], increases[part]):
                key = f"{metric}|{entity}"
                rate = self._hourly.add(key, now, float(increase))
                if rate >= limit / 4 or key in self._exposure:  # the increases of the hour, for a part near a limit
                    seen = self._exposure.setdefault(key, deque())
                    seen.append((now, float(increase)))
                if rate >= limit:
                    self._hot[key] = (metric, entity)
        self._rates(now, out)

    def _rate_limits(self) -> dict[str, tuple[float, str, str]]:
        """The rate rules' counters: limit per hour, category, words."""
        return {
            "ecc_sbe_total": (self.sbe_per_hour, "gpu_memory", "correctable ECC errors"),
            "pcie_replay_total": (self.pcie_replay_per_hour, "gpu_bus", "PCIe replays"),
            "symbol_error_total": (self.symbol_errors_per_hour, "fabric_link", "symbol errors"),
            "pcs_symbol_error_total": (self.symbol_errors_per_hour, "fabric_link", "symbol errors after FEC"),
            "link_error_recovery_total": (self.link_recovery_per_hour, "fabric_link", "link error recoveries"),
        }

    def _rates(self, now: float, out: list[Evidence]) -> None:
        """Rate rules, every tick while the count of the last hour is at or over the limit, sampled this tick or
        not (sampled every 5 minutes, a counter's increase comes one tick in ten). A published limit is a rate that
        lasts (the IBTA BER budget, DCGM's replay budget), so it flags a part whose hour's errors came in at least
        ``limit_min_increases`` separate samples with none holding ``limit_burst_share`` of them, whether or not
        raswarden has a record of the part (one installed bad is flagged from its first hour); one burst over the
        limit is a watch."""
        rates = self.rate_limits_
        for key, (metric, entity) in list(self._hot.items()):
            limit, category, words = rates[metric]
            rate = self._hourly.value(key, now)
            seen = self._exposure.get(key)
            while seen and seen[0][0] <= now - 3600.0:
                seen.popleft()
            if rate < limit:
                del self._hot[key]
                continue
            reason = f"{words} {rate:.0f}/h (limit {limit:.0f}/h)"
            if self.baseline:
                out.append(Evidence(entity, State.SUBHEALTHY, category, [reason]))
                continue
            moved = [inc for _, inc in seen or () if inc > 0]
            total = sum(moved)
            largest = max(moved, default=0.0)
            if len(moved) >= self.limit_min_increases and largest < self.limit_burst_share * total:
                out.append(Evidence(entity, State.SUBHEALTHY, category,
                                    [f"{reason}, in {len(moved)} samples of the last hour"]))
            else:
                out.append(Evidence(entity, State.SUSPECT, category, [
                    f"{reason}, {largest:.0f} of the hour's {total:.0f} in one sample: a burst, watched (the limit is "
                    f"a rate that lasts: {self.limit_min_increases} samples or more, none with "
                    f"{self.limit_burst_share:.0%} of the errors)"]))

    def _saturated(self, inc: pd.DataFrame, now: float) -> None:
        """A counter stuck at its maximum is blind: say so on the port (a watch, with the way to clear it)."""
        codes, names = name_codes(inc["metric"])
        at_max = np.array([SATURATES.get(m, np.inf) for m in names], dtype=float)[codes]  # per name, not per row
        stuck = np.flatnonzero(inc["last"].to_numpy() >= at_max)
        for i in stuck:
            entity, name = str(inc["entity"].iat[i]), names[codes[i]]
            reason = (f"{name.removesuffix('_total')} stuck at {at_max[i]:.0f}, the counter's maximum: it counts no "
                      "more (clear the port's counters, e.g. perfquery -R)")
            self.clear_latch(entity, f"saturated-{name}")
            self._latch(Evidence(entity, State.SUSPECT, "telemetry", [reason]), now + self.event_hold_s,
                        f"saturated-{name}")

    def _gauges(self, tick: TickInput, out: list[Evidence]) -> None:
        g = tick.gauges
        if g.empty:
            return
        metric = g["metric"]
        last = g["last"].to_numpy()
        peak = g["max"].to_numpy()
        hit = (
            (names_in(metric, ("gpu_temp_c",)) & (peak >= self.gpu_temp_slowdown_c))
            | (names_in(metric, ("row_remap_failure",)) & (last >= 1))
            | (names_in(metric, ("port_state",)) & (last != PORT_ACTIVE) & ~np.isnan(last))
        )
        if not self.baseline:
            hit |= (names_in(metric, ("hbm_temp_c",)) & (peak >= self.hbm_temp_limit_c)) | (
                names_in(metric, ("throttle_thermal",)) & (last >= 1)) | (
                names_in(metric, ("accelerator_health",)) & (last == 0))
        if not hit.any():
            return
        g = g[hit]
        for entity, metric, last, peak in zip(g["entity"], g["metric"], g["last"], g["max"]):
            if metric == "gpu_temp_c":
                if peak >= self.gpu_temp_shutdown_c:
                    limit = f"at the shutdown limit ({self.gpu_temp_shutdown_c:.0f} °C)"
                    out.append(Evidence(entity, State.FAILED, "gpu_thermal", [f"GPU {peak:.0f} °C {limit}"], hard=True))
                elif peak >= self.gpu_temp_slowdown_c:
                    limit = f"at the slowdown limit ({self.gpu_temp_slowdown_c:.0f} °C)"
                    out.append(self._thermal(entity, f"GPU {peak:.0f} °C {limit}"))
            elif metric == "hbm_temp_c" and peak >= self.hbm_temp_limit_c:
                # A watch, not a flag: a GPU in a warm slot reaches its memory limit during a rack-wide coolant
                # swing and is healthy; a degrading one is flagged by the peer detector (hotter than its peers).
                out.append(Evidence(entity, State.SUSPECT, "gpu_thermal",
                                    [f"HBM {peak:.0f} °C at or over its {self.hbm_temp_limit_c:.0f} °C limit"]))
            elif metric == "throttle_thermal" and last >= 1:
                out.append(self._thermal(entity, "clocks throttled for temperature"))
            elif metric == "accelerator_health" and last == 0:
                # The vendor's own health bit (npu-exporter, npu-smi): its fault codes say how bad; this alone
                # is a sub-healthy NPU, never a drain by itself.
                out.append(Evidence(entity, State.SUBHEALTHY, "gpu_compute", ["vendor health status unhealthy"]))
            elif metric == "row_remap_failure" and last >= 1:
                out.append(Evidence(entity, State.FAILED, "gpu_memory", ["row remapping failed"], hard=True))
            elif metric == "port_state" and not np.isnan(last) and last != PORT_ACTIVE:
                if node_of(entity) in tick.grace_nodes:
                    continue
                name = _PORT_STATES.get(int(last), str(int(last)))
                reason = f"port state {name} ({int(last)})"
                out.append(Evidence(entity, State.FAILED, "fabric_link", [reason], hard=True))

    def _thermal(self, entity: str, what: str) -> Evidence:
        """A GPU at its slowdown limit or throttled for heat: ``subhealthy``, or a ``suspect`` watch when its rack
        warmed with it (:mod:`detectors.shared_heat`: a warm slot in a coolant swing is the rack's cooling)."""
        heat = self._heat.shared(entity) if self._heat is not None else None
        if heat is None:
            return Evidence(entity, State.SUBHEALTHY, "gpu_thermal", [what])
        return Evidence(entity, State.SUSPECT, "gpu_thermal", [f"{what}; {heat.reason()}"])
