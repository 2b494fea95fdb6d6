"""The rule detector's levels: counters judged per increase or as rates against published limits (with the
exposure a limit asks for), and gauges (temperatures, port state, throttling, a vendor's health bit) (docs/rules.md).
A part of :class:`detectors.rules.RuleDetector`, whose streaming state it shares."""

from __future__ import annotations

from collections import deque

import numpy as np
import pandas as pd

from detectors.contract import Evidence, TickInput
from detectors.schema import State, name_code, name_codes, names_in, names_mask, node_of
from detectors.xid_catalog import repair_reason

PORT_ACTIVE = 4.0
_PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
# InfiniBand PortCounters that count a link breaking its lossless contract (IBA 16.1.3.5): LocalLinkIntegrityErrors
# count the times the port's physical errors went over its LocalPhyErrors threshold, ExcessiveBufferOverrunErrors the
# times its receive buffer overran (packets dropped). A healthy port shows none (every real sample here:
# fixtures/README.md); NVSentinel's NIC health monitor drains at any increase. One is a watch here, since a cable
# touched or reseated makes one as a burst of symbol errors does; a rate no healthy port shows is the trend
# detector's flag (docs/rules.md, "Where raswarden departs from its peers").
LINK_INTEGRITY_COUNTERS = {
    "local_link_integrity_errors_total": "local link integrity errors (the port's physical errors over its "
                                         "LocalPhyErrors threshold)",
    "excessive_buffer_overrun_total": "excessive buffer overrun errors (the port's receive buffer overran: packets "
                                      "dropped on a lossless link)"}
# NVML's GPU recovery action (nvmlDeviceGpuRecoveryAction_t; DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION, nvidia-smi's
# gpu_recovery_action, drivers from R570): what the driver says the GPU needs after a fault, held until it is done
# (its change is Xid 154's line). Judged as Xid 154's line is (rules_events): a reboot fails the GPU, a reset or a
# drain is sub-healthy; the value stays until the action is taken, so the flag does too. (value: name, state, repair,
# NVML's meaning)
RECOVERY_ACTIONS = {
    1: ("GPU_RESET", State.SUBHEALTHY, "reset", "the GPU needs a reset before it runs work again"),
    2: ("NODE_REBOOT", State.FAILED, "reboot", "the fault left the node in a state only a reboot clears"),
    3: ("DRAIN_P2P", State.SUBHEALTHY, "none", "peer-to-peer traffic must be stopped before the driver can say more"),
    4: ("DRAIN_AND_RESET", State.SUBHEALTHY, "reset", "the GPU runs at reduced capacity: drain its work, then reset"),
    5: ("GPU_RESET_BUS", State.SUBHEALTHY, "reset", "the GPU needs a reset through its bus (a secondary bus reset)"),
}


def recovery_action_evidence(entity: str, value: float) -> Evidence:
    """What a GPU's recovery action (:data:`RECOVERY_ACTIONS`) says of it; a value NVML does not document is
    sub-healthy (the driver asks for something: its GPU is not to take new work until someone looks)."""
    known = RECOVERY_ACTIONS.get(int(value))
    if known is None:
        return Evidence(entity, State.SUBHEALTHY, "gpu_compute", [
            f"GPU recovery action {value:.0f}, a value NVML does not document: the driver asks for an action"])
    name, level, repair, meaning = known
    reason = repair_reason(f"GPU recovery action {name} ({value:.0f}): {meaning}",
                           "NVIDIA: the driver's recovery action", repair)
    return Evidence(entity, level, "gpu_compute", [reason], hard=level == State.FAILED)


# NVML's GPU fabric health summary (nvmlGpuFabricInfo_v3's healthSummary, DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY, 175):
# 0 not supported, 1 healthy, 2 unhealthy, 3 limited capacity, the GPU's own word on its NVLink fabric (an NVL72's
# routes and bandwidth; DCGM's NVLink health watch raises an incident on its health mask, a route unhealthy among
# them). Unhealthy is sub-healthy on the scale-up link; limited capacity (the fabric runs, with less) a watch.
FABRIC_UNHEALTHY = 2
FABRIC_LIMITED = 3


def fabric_health_evidence(entity: str, value: float) -> Evidence:
    """What a GPU's fabric health summary (:data:`FABRIC_UNHEALTHY` or more) says of it; a value NVML does not
    document is a watch."""
    if int(value) == FABRIC_UNHEALTHY:
        return Evidence(entity, State.SUBHEALTHY, "scaleup_link", [
            "NVLink fabric health UNHEALTHY (the GPU's own summary, NVML/DCGM field 175)"])
    what = "LIMITED_CAPACITY: the fabric runs with less than its full capacity" if int(value) == FABRIC_LIMITED \
        else f"{value:.0f}, a value NVML does not document"
    return Evidence(entity, State.SUSPECT, "scaleup_link", [f"NVLink fabric health {what} (NVML/DCGM field 175)"])


# NVLink 5's effective bit error rate (the errors FEC left, per bit: NVML's packed BER, DCGM_FI_DEV_NVLINK_COUNT_
# EFFECTIVE_BER 1217, or decoded, _FLOAT 1218): DCGM's NVLink health watch fails the GPU above 1e-12 (its health
# module's tests and DcgmNs::Utils::IsEffectiveBerThresholdExceeded, NVIDIA/DCGM, Apache-2.0: 1e-12 passes, 1.1e-12
# fails), the IBTA's bit error budget that the symbol-error limit rests on too. NVML's floor, 1.5e-254, is none.
NVLINK_EFFECTIVE_BER_LIMIT = 1e-12


def effective_ber_evidence(entity: str, value: float) -> Evidence:
    """A GPU whose NVLink 5 effective BER is over :data:`NVLINK_EFFECTIVE_BER_LIMIT`: sub-healthy on its scale-up
    link, the link's cables and signal to be looked at (NVIDIA's decode of the driver's own BER event: investigate
    the link's signal integrity and cables)."""
    text = f"NVLink effective BER {value:.2g} (limit {NVLINK_EFFECTIVE_BER_LIMIT:.0e})"
    return Evidence(entity, State.SUBHEALTHY, "scaleup_link", [repair_reason(
        text, "DCGM: NVLink health watch fails the GPU (NVLINK_EFFECTIVE_BER_THRESHOLD)", "inspect")])


# A node's BMC (ipmi_exporter: FreeIPMI's reading of each sensor against the platform vendor's thresholds in the BMC's
# SDR; docs/rules.md, "A node's BMC"): per state metric, what the sensor is, the category, and the level of its
# critical (2, or 3 non-recoverable with the exporter's native IPMI) and of its warning (1) states, with the repair a
# critical one calls for. A fan or power supply the BMC calls critical is a part to replace (Meta's GCM check_sensors
# fails such a node); the cooling category is never a drain by itself (its GPUs' own temperatures are), and the
# generic discrete sensors (slots, drives, event logs, security) only watched: their states vary by BMC, and
# ipmi_exporter's issue 108 shows one the BMC's own tool read as normal.
BMC_STATES = {
    "bmc_temperature_state": ("temperature", "cooling", State.SUBHEALTHY, State.SUSPECT, "inspect"),
    "bmc_fan_state": ("fan", "cooling", State.SUBHEALTHY, State.SUSPECT, "replace"),
    "bmc_voltage_state": ("voltage", "host", State.SUBHEALTHY, State.SUSPECT, "inspect"),
    "bmc_current_state": ("current", "host", State.SUBHEALTHY, State.SUSPECT, "inspect"),
    "bmc_power_supply_state": ("power supply", "host", State.SUBHEALTHY, State.SUSPECT, "replace"),
    "bmc_power_state": ("power", "host", State.SUSPECT, None, "none"),
    "bmc_sensor_state": ("sensor", "host", State.SUSPECT, None, "none"),
}
# The chassis' own fault bits (IPMI Get Chassis Status), 1 for a fault here, and a BMC its exporter could not read
# (ipmi_up 0: its sensors' states are unknown, not nominal): (what, category, level, repair, whose word it is)
BMC_FAULTS = {
    "bmc_cooling_fault": ("the chassis reports a cooling or fan fault", "cooling", State.SUBHEALTHY, "inspect",
                          "IPMI chassis status"),
    "bmc_drive_fault": ("the chassis reports a drive fault", "host", State.SUSPECT, "none", "IPMI chassis status"),
    "bmc_unreachable": ("it does not answer its exporter (ipmi_up 0): its sensors are not read", "telemetry",
                        State.SUSPECT, "none", ""),
}


def bmc_evidence(entity: str, metric: str, value: float) -> Evidence | None:
    """What a BMC's sensor state (:data:`BMC_STATES`) or chassis fault (:data:`BMC_FAULTS`) says of its node's part,
    or None (nominal, a warning no rule watches)."""
    if metric in BMC_FAULTS:
        what, category, level, repair, source = BMC_FAULTS[metric]
        text = f"BMC: {what}"
        return Evidence(entity, level, category, [repair_reason(text, source, repair) if source else text])
    what, category, critical, warning, repair = BMC_STATES[metric]
    record, _, name = entity.rsplit("/bmc-", 1)[-1].partition("-")  # ({node}/bmc-{id}-{name}: names repeat)
    sensor = (name or record).replace("_", " ")
    if value >= 2:
        state = "non-recoverable" if value >= 3 else "critical"
        text = f"BMC: {what} sensor '{sensor}' {state} (past the BMC's own threshold)"
        return Evidence(entity, critical, category, [repair_reason(text, "the platform's SDR thresholds",
                                                                   repair if critical == State.SUBHEALTHY else "none")])
    if value >= 1 and warning is not None:
        return Evidence(entity, warning, category, [f"BMC: {what} sensor '{sensor}' warning"])
    return None


_BMC_METRICS = frozenset(BMC_STATES) | frozenset(BMC_FAULTS)
# The rate rules the static-threshold baseline keeps (NVSentinel's symbol-error limit, DCGM's NVLink recovery)
_BASELINE_RATES = frozenset({"symbol_error_total", "pcs_symbol_error_total", "nvlink_recovery_total"})
_RETIRED_PAGES = ("retired_pages_sbe_total", "retired_pages_dbe_total")
_THERMAL_VIOLATION = ("thermal_violation_us_total",)
# Counters whose every increase is judged on its own (the rate rules below read the others).
_HARD_COUNTERS = frozenset({"ecc_dbe_total", "ecc_dbe_agg_total", "row_remap_uncorrectable_total",
                            "retired_pages_dbe_total", "link_downed_total", "link_down_events_total",
                            "edac_ue_total", "bmc_sel_critical_total", "nvlink_recovery_failed_total",
                            *LINK_INTEGRITY_COUNTERS})
# An Ethernet (RoCE) port's link counters, mlx5's ethtool ``*_phy`` counters as node_exporter's ethtool collector
# serves them (Linux, Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst): named apart from
# the InfiniBand PortCounters, which the same port's RDMA device may show too (zeros on Ethernet), so the two never
# mix in one counter; judged as them. 32 and 64 bits: they wrap, never saturate.
LINK_DOWN_COUNTERS = {"link_downed_total": "link_downed", "link_down_events_total": "link_down_events_phy"}
# InfiniBand PortCounters that stop at their maximum instead of wrapping (IBA 16.1.3.5: LinkDownedCounter and
# LinkErrorRecoveryCounter are 8 bits, SymbolErrorCounter and PortRcvErrors 16, LocalLinkIntegrityErrors and
# ExcessiveBufferOverrunErrors 4), as sysfs and node_exporter show them: a counter at its maximum counts nothing more.
SATURATES = {"link_downed_total": 255.0, "link_error_recovery_total": 255.0, "symbol_error_total": 65535.0,
             "rcv_errors_total": 65535.0, "local_link_integrity_errors_total": 15.0,
             "excessive_buffer_overrun_total": 15.0}


class LevelRules:
    """Counter and gauge rules, evidence held only while the level lasts."""

    def _counters(self, tick: TickInput, out: list[Evidence]) -> None:
        inc = tick.increases
        now = tick.now
        if inc.empty:
            self._rates(now, out)  # the rate rules speak every tick while the last hour is over the limit
            return
        ecodes, enames = name_codes(inc["entity"])
        mcodes, mnames = name_codes(inc["metric"])
        increases = np.asarray(inc["increase"])
        moved = np.flatnonzero(increases > 0)
        ecodes, mcodes, increases = ecodes[moved], mcodes[moved], increases[moved]
        hard = np.flatnonzero(names_mask(mnames, _HARD_COUNTERS)[mcodes])
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
            elif metric in LINK_INTEGRITY_COUNTERS:
                if node_of(entity) in tick.grace_nodes:
                    continue
                reason = (f"{LINK_INTEGRITY_COUNTERS[metric]} +{increase:.0f}: watched; a rate no healthy port shows "
                          "is flagged (trend)")
                self.clear_latch(entity, f"integrity-{metric}")
                self._latch(Evidence(entity, State.SUSPECT, "fabric_link", [reason]), now + self.event_hold_s,
                            f"integrity-{metric}")
            elif metric == "nvlink_recovery_failed_total" and not self.baseline:
                # NVLink 5 (DCGM field 1212): the link went into recovery, failed it and was declared down; the GPU
                # runs on with its other links (an NVL72's bandwidth less one link) until its links are retrained
                reason = repair_reason(f"NVLink recovery failed +{increase:.0f}: a link of this GPU was declared "
                                       "down", "NVIDIA's Xid 149 for a link down, NETIR_LINK_DOWN: RESET_GPU", "reset")
                self._latch(Evidence(entity, State.SUBHEALTHY, "scaleup_link", [reason]), now + self.event_hold_s)
            elif metric in ("edac_ue_total",):
                ev = Evidence(entity, State.FAILED, "host", [f"EDAC uncorrectable errors +{increase:.0f}"], hard=True)
                self._latch(ev, now + self.failed_hold_s)
            elif metric == "bmc_sel_critical_total" and not self.baseline:
                # The BMC's event log gained entries FreeIPMI reads as critical (a memory error, a power supply lost,
                # a processor's IERR): the exporter counts them by state only, so a watch that says where to look
                reason = (f"the BMC logged {increase:.0f} critical event(s) in its SEL (ipmi-sel, or the BMC's web "
                          "page, names them)")
                self.clear_latch(entity, "bmc-sel")
                self._latch(Evidence(entity, State.SUSPECT, "host", [reason]), now + self.event_hold_s, "bmc-sel")
        if not self.baseline and "last" in inc:
            self._saturated(inc, now)
            self._retired_pages(inc, now)
        rates = self.rate_limits_
        for metric, (limit, _, _) in rates.items():
            if self.baseline and metric not in _BASELINE_RATES:
                continue
            code = name_code(mnames, metric)
            if code < 0:  # (not in this tick)
                continue
            part = np.flatnonzero(mcodes == code)
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
            # DCGM_LIMIT_MAX_NVLINK_ERROR: DCGM's NVLink health watch fails a GPU at one recovery (replay and
            # recovery errors before Blackwell, link recovery events on it); a rate that lasts here, as every limit
            "nvlink_recovery_total": (self.nvlink_recovery_per_hour, "scaleup_link", "NVLink recoveries"),
        }

    def _rates(self, now: float, out: list[Evidence]) -> None:
        """Rate rules, every tick while the count of the last hour is at or over the limit, sampled this tick or
        not (sampled every 5 minutes, a counter's increase comes one tick in ten). A published limit is a rate that
        lasts (the IBTA BER budget, DCGM's replay budget), so it flags a part whose hour's errors came in at least
        ``limit_min_increases`` separate samples, not one of them a burst: a sample holding ``limit_burst_share`` of
        them while the others are under the limit without it. Whether or not raswarden has a record of the part (one
        installed bad is flagged from its first hour). One burst over the limit is a watch; a few errors an hour
        over a limit of one (NVLink recoveries: 2, 1 and 1 in three samples) are the limit crossed, not a burst, as
        is a burst on a part whose other samples are over the limit by themselves. The hour's own errors must reach
        the limit too: the rate decays (about the last hour's errors), and a large burst an hour old still holds 1/e
        of itself in it (a touched cable's 342 symbol errors held a port's rate over 120 an hour on, when its hour's
        samples were three single errors: a flag of the new draw's bursty 5-minute cell, Run 22)."""
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
            burst = largest >= self.limit_burst_share * total and total - largest < limit
            if total < limit:  # (the rate decays: errors older than the hour hold it over the limit)
                out.append(Evidence(entity, State.SUSPECT, category, [
                    f"{reason}, {total:.0f} of them in the last hour's samples: the rest from before it (a burst's "
                    f"tail), watched (the limit is a rate that lasts: the hour's own errors over it)"]))
            elif len(moved) >= self.limit_min_increases and not burst:
                out.append(Evidence(entity, State.SUBHEALTHY, category,
                                    [f"{reason}, in {len(moved)} samples of the last hour"]))
            elif burst:  # (one sample holds the hour)
                out.append(Evidence(entity, State.SUSPECT, category, [
                    f"{reason}, {largest:.0f} of the hour's {total:.0f} in one sample: a burst, watched (the limit is "
                    f"a rate that lasts: {self.limit_min_increases} samples or more, none with "
                    f"{self.limit_burst_share:.0%} of the errors unless the others reach it)"]))
            else:  # no burst, too few samples yet
                out.append(Evidence(entity, State.SUSPECT, category, [
                    f"{reason}, in {len(moved)} samples of the last hour: watched (the limit is a rate that lasts: "
                    f"{self.limit_min_increases} samples or more)"]))

    def _retired_pages(self, inc: pd.DataFrame, now: float) -> None:
        """A GPU with as many retired pages as DCGM's limit (single- and double-bit together, 63: its health check's
        DCGM_FR_RETIRED_PAGES_LIMIT, whose next step is the field diagnostic) is sub-healthy, judged where a tick
        samples both counters of it; held an hour after the last such sample."""
        hit = names_in(inc["metric"], _RETIRED_PAGES)
        if not hit.any():  # (most fleets, every tick: no frame cut)
            return
        rows = inc[hit]
        by_gpu: dict[str, dict[str, float]] = {}
        for entity, metric, last in zip(rows["entity"], rows["metric"], rows["last"].tolist()):
            by_gpu.setdefault(entity, {})[metric] = last
        for entity, counts in by_gpu.items():
            if len(counts) < len(_RETIRED_PAGES) or not sum(counts.values()) >= self.retired_pages_limit:
                continue
            sbe, dbe = counts["retired_pages_sbe_total"], counts["retired_pages_dbe_total"]
            text = (f"{sbe + dbe:.0f} retired pages ({sbe:.0f} for single-bit, {dbe:.0f} for double-bit errors), at "
                    f"or over DCGM's limit of {self.retired_pages_limit:.0f}")
            reason = repair_reason(text, "DCGM: RETIRED_PAGES_LIMIT, run the field diagnostic", "inspect")
            self.clear_latch(entity, "retired-pages")
            self._latch(Evidence(entity, State.SUBHEALTHY, "gpu_memory", [reason]), now + self.event_hold_s,
                        "retired-pages")

    def _thermal_violations(self, tick: TickInput) -> None:
        """Time throttled for temperature (DCGM's thermal violation counter, microseconds): a GPU throttled for
        ``thermal_violation_share`` of the time since its last sample or more is judged as a GPU whose throttle
        reasons say so (``subhealthy``, a watch when its rack warmed with it), held until its next sample is due; a
        sample under the share ends it. For fleets that export the counter and not the reasons."""
        inc = tick.increases
        if inc.empty or "dt" not in inc:
            return
        hit = names_in(inc["metric"], _THERMAL_VIOLATION)
        if not hit.any():  # (most fleets, every tick: no frame cut)
            return
        rows = inc[hit]
        for entity, increase, dt in zip(rows["entity"], rows["increase"].tolist(), rows["dt"].tolist()):
            if not dt > 0:
                continue
            share = increase / (dt * 1e6)
            self.clear_latch(entity, "thermal-violation")
            if share >= self.thermal_violation_share:
                ev = self._thermal(entity, f"clocks throttled for temperature {min(share, 1.0):.0%} of the last "
                                           f"{dt:.0f} s (thermal violation time)")
                self._latch(ev, tick.now + 1.5 * dt, "thermal-violation")

    def _saturated(self, inc: pd.DataFrame, now: float) -> None:
        """A counter stuck at its maximum is blind: say so on the port (a watch, with the way to clear it)."""
        codes, names = name_codes(inc["metric"])
        at_max = np.array([SATURATES.get(m, np.inf) for m in names], dtype=float)[codes]  # per name, not per row
        stuck = np.flatnonzero(np.asarray(inc["last"]) >= at_max)
        ecodes, enames = name_codes(inc["entity"])
        for i in stuck:
            entity, name = str(enames[ecodes[i]]), names[codes[i]]
            reason = (f"{name.removesuffix('_total')} stuck at {at_max[i]:.0f}, the counter's maximum: it counts no "
                      "more (clear the port's counters, e.g. perfquery -R)")
            self.clear_latch(entity, f"saturated-{name}")
            self._latch(Evidence(entity, State.SUSPECT, "telemetry", [reason]), now + self.event_hold_s,
                        f"saturated-{name}")

    def _gauges(self, tick: TickInput, out: list[Evidence]) -> None:
        g = tick.gauges
        if g.empty:
            return
        codes, names = name_codes(g["metric"])
        last = np.asarray(g["last"])
        peak = np.asarray(g["max"])

        def of(metric: str) -> np.ndarray:
            return codes == name_code(names, metric)

        hit = (
            (of("gpu_temp_c") & (peak >= self.gpu_temp_slowdown_c))
            | (of("row_remap_failure") & (last >= 1))
            | (of("memory_unrepairable") & (last >= 1))
            | (of("port_state") & (last != PORT_ACTIVE) & ~np.isnan(last))
        )
        if not self.baseline:
            hit |= (of("hbm_temp_c") & (peak >= self.hbm_temp_limit_c)) | (of("throttle_thermal") & (last >= 1)) | (
                (of("accelerator_health") | of("npu_network_health")) & (last == 0)) | (
                of("retired_pages_pending") & (last >= 1)) | (of("row_remap_pending") & (last >= 1)) | (
                of("row_remap_banks_exhausted") & (last >= 1)) | (of("gpu_recovery_action") & (last >= 1)) | (
                of("fabric_health") & (last >= FABRIC_UNHEALTHY)) | (
                of("nvlink_effective_ber") & (last > NVLINK_EFFECTIVE_BER_LIMIT)) | (
                names_mask(names, _BMC_METRICS)[codes] & (last >= 1))
        if not hit.any():
            return
        g = g[hit]
        for entity, metric, last, peak in zip(g["entity"], g["metric"], g["last"].tolist(), g["max"].tolist()):
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
            elif metric == "npu_network_health" and last == 0:
                # npu-exporter's network status: 0 when the NPU's RoCE port cannot reach its detect address, which
                # an NPU without one configured also reads: a watch
                out.append(Evidence(entity, State.SUSPECT, "fabric_link",
                                    ["NPU network health unhealthy (its RoCE port cannot reach its detect address)"]))
            elif metric == "retired_pages_pending" and last >= 1:
                # DCGM_FR_PENDING_PAGE_RETIREMENTS: "Monitor - this GPU can still perform workload"
                out.append(Evidence(entity, State.SUSPECT, "gpu_memory", [
                    f"{last:.0f} page(s) pending retirement: retired at the GPU's next reset (DCGM: monitor, the GPU "
                    "can still run work)"]))
            elif metric == "row_remap_pending" and last >= 1:
                # DCGM's health watch on it raises DCGM_FR_PENDING_ROW_REMAP, of severity ISOLATE (drain the GPU):
                # the remapped row is used only after the GPU's reset, so the flag lasts until the reset clears it
                text = "row remapping pending: the remapped row is used only after the GPU's reset"
                out.append(Evidence(entity, State.SUBHEALTHY, "gpu_memory", [
                    repair_reason(text, "DCGM: PENDING_ROW_REMAP, isolate; NVIDIA: reset the GPU", "reset")]))
            elif metric == "row_remap_banks_exhausted" and last >= 1:
                # NVML's row remapper histogram, "none": banks with no reserved rows left. No vendor action names
                # it; the next uncorrectable error in such a bank cannot be remapped (a row remap failure, Xid 64)
                out.append(Evidence(entity, State.SUSPECT, "gpu_memory", [
                    f"{last:.0f} memory bank(s) with no spare rows left: an uncorrectable error there cannot be "
                    "remapped"]))
            elif metric == "gpu_recovery_action" and last >= 1:
                out.append(recovery_action_evidence(entity, last))
            elif metric == "fabric_health" and last >= FABRIC_UNHEALTHY:
                out.append(fabric_health_evidence(entity, last))
            elif metric == "nvlink_effective_ber" and last > NVLINK_EFFECTIVE_BER_LIMIT:
                out.append(effective_ber_evidence(entity, last))
            elif metric in _BMC_METRICS and last >= 1:
                evidence = bmc_evidence(entity, metric, last)
                if evidence is not None:
                    out.append(evidence)
            elif metric == "row_remap_failure" and last >= 1:
                out.append(Evidence(entity, State.FAILED, "gpu_memory", ["row remapping failed"], hard=True))
            elif metric == "memory_unrepairable" and last >= 1:
                # NVML's unrepairable memory flag (nvmlDeviceGetUnrepairableMemoryFlag_v1, DCGM field 1507): the GPU's
                # memory has an error it cannot repair; DCGM's memory health watch fails the GPU on it
                out.append(Evidence(entity, State.FAILED, "gpu_memory", [repair_reason(
                    "memory unrepairable: the GPU's memory has an error it cannot repair", "DCGM: memory health "
                    "watch fails the GPU", "replace")], hard=True))
            elif metric == "port_state" and not np.isnan(last) and last != PORT_ACTIVE:
                if node_of(entity) in tick.grace_nodes:
                    continue
                name = _PORT_STATES.get(int(last), str(int(last)))
                reason = f"port state {name} ({int(last)})"
                out.append(Evidence(entity, State.FAILED, "fabric_link", [reason], hard=True))

    def _thermal(self, entity: str, what: str) -> Evidence:
        """A GPU at its slowdown limit or throttled for heat: ``subhealthy``, or a ``suspect`` watch when its rack
        warmed with it (:mod:`detectors.shared_heat`: a warm slot in a coolant swing is the rack's cooling)."""
        self._heat_asked = self._heat is not None
        heat = self._heat.shared(entity) if self._heat is not None else None
        if heat is None:
            return Evidence(entity, State.SUBHEALTHY, "gpu_thermal", [what])
        return Evidence(entity, State.SUSPECT, "gpu_thermal", [f"{what}; {heat.reason()}"])
