"""The rule detector's discrete events: Xids by NVIDIA's catalog and its decode sheet, SXids, other vendors' RAS
events, application faults, PCIe AER and the host's RAS lines (docs/rules.md). A part of
:class:`detectors.rules.RuleDetector`, whose streaming state (latches, decaying counts) it shares."""

from __future__ import annotations

import re
from collections import defaultdict

import pandas as pd

from detectors.contract import Evidence, TickInput
from detectors.schema import State, entity_kind, event_records, node_of
from detectors.vendor_events import Verdict, afid_verdict, amdgpu_verdict, ascend_verdict, sel_verdict
from detectors.xid_catalog import XidRule, decode_nvlink5, repair_reason, state_of

_PID = re.compile(r"pid=('?[^,]*'?)")
# the host's own errors, by event kind: memory (EDAC), an x86 machine check, an Arm processor error, a firmware's
# vendor-specific error section (rasdaemon's non_standard_event: HiSilicon's, Ampere's)
_HOST_ERROR_LABELS = {"edac": "EDAC", "mce": "MCE", "arm": "Arm processor", "cper": "firmware-reported"}


class EventRules:
    """Events judged one by one, held for a while (``event_hold_s``; ``failed_hold_s`` for hard faults)."""

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

    def _events(self, tick: TickInput) -> None:
        if tick.events.empty:
            return
        now = tick.now
        for row in event_records(tick.events):
            kind = row.kind
            entity = row.entity
            code = None if pd.isna(row.code) else int(row.code)
            if kind == "xid":
                self._xid(entity, code, row.message or "", row.ts, now, row.source, row.severity)
            elif kind == "sxid":
                self._sxid(entity, code, row.severity, row.message or "", now)
            elif kind == "aer":
                self._aer(entity, row.severity, row.message, row.ts, now)
            elif kind in _HOST_ERROR_LABELS:
                self._host(entity, kind, row.severity, row.message, code, now)
            elif kind == "disk" and row.severity == "error" and not self.baseline:
                # a local disk failing requests (checkpoint staging, the OS): the host's, never an accelerator's;
                # a watch, refreshed by every failed request, one per host
                self.clear_latch(entity, "disk")
                self._latch(Evidence(entity, State.SUSPECT, "host", [f"block layer: {row.message}"]),
                            now + self.event_hold_s, "disk")
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
            elif kind == "gpu_state":
                self._gpu_state(entity, row.severity, row.message or "", now)
            elif kind == "ascend":
                self._vendor(entity, ascend_verdict(code, self.ascend_catalog_, self.baseline), row.ts, now, code)
            elif kind == "afid":
                self._vendor(entity, afid_verdict(code, self.afid_catalog_, self.baseline), row.ts, now, code)
            elif kind == "sel":
                self._vendor(entity, sel_verdict(code, row.message or "", self.sel_catalog_, self.baseline), row.ts,
                             now, code)
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
        state, advice, repair = rule.state, rule.vendor.immediate or "no action in the catalog", rule.repair
        if state == "decode":
            state, advice, repair = self._nvlink5(rule, entity, message, source, severity, now)
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
        reason = repair_reason(text, f"NVIDIA: {advice}", repair)
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

    def _nvlink5(self, rule: XidRule, entity: str, message: str, source: str, severity: str,
                 now: float) -> tuple[str, str, str]:
        """An NVLink 5 Xid (144-150) by the decode sheet's row for its line, as (state, advice, repair); where no row
        matches, by the line's own Fatal/Nonfatal word (and counted); the gauge's code alone says nothing of the row:
        sub-healthy. A row that allows its line a number of repeats a day (149's link down: "REPORT_ISSUE (if seen
        >1 per day)") seen more often on one GPU within 24 hours is a part to inspect, not one to reset again."""
        decoded = decode_nvlink5(rule.code, message, self.decode_sheet_) if source == "kernel" else None
        if decoded is not None:
            limit = decoded.row.repeats_per_day
            if limit is not None:
                seen = self._decode_seen[f"{rule.code}|{decoded.row.unit}|{entity}"]
                seen.append(now)
                while seen and seen[0] <= now - 86400.0:
                    seen.popleft()
                if len(seen) > limit:
                    return decoded.state, (f"{decoded.reason()}; seen {len(seen)} times in 24 h, more than the {limit} "
                                           f"a day NVIDIA allows before reporting it"), "inspect"
            return decoded.state, decoded.reason(), rule.repair
        if source == "kernel":
            self._count_unjudged(self.undecoded_xids_, "xid_decode", rule.code)
        if severity == "fatal":
            return "failed", "the line says Fatal; no row of the decode sheet matched", rule.repair
        if severity == "nonfatal":
            return "suspect", "the line says Nonfatal; no row of the decode sheet matched", rule.repair
        return "subhealthy", "WORKFLOW_NVLINK5_ERR, not decoded", rule.repair

    def _vendor(self, entity: str, verdict: Verdict | None, ts: float, now: float, code: int | None) -> None:
        """Latch, rate or count one amdgpu, Ascend or AFID event's verdict (``vendor_events``)."""
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

    def _gpu_state(self, entity: str, severity: str, message: str, now: float) -> None:
        """The NVIDIA driver's status in its assertion lines (a GPU that needs a reset, or lost), which name no GPU:
        the node's, with the repair NVIDIA's catalog gives the Xid of that state (119/154's reset, 79's reboot). One
        watch per node, refreshed by every line (the driver repeats them for every call that fails)."""
        lost = severity == "lost"
        if self.baseline and not lost:
            return
        repair = "reboot" if lost else "reset"
        reason = repair_reason(f"kernel: {message}", "NVIDIA: the driver's status; nvidia-smi's gpu_recovery_action "
                               "names the GPU", repair)
        self.clear_latch(entity, "gpu-state")
        if lost:
            self._latch(Evidence(entity, State.FAILED, "gpu_bus", [reason], hard=True), now + self.failed_hold_s,
                        "gpu-state")
        else:
            self._latch(Evidence(entity, State.SUBHEALTHY, "gpu_compute", [reason]), now + self.event_hold_s,
                        "gpu-state")

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
        label = _HOST_ERROR_LABELS[kind]
        if severity in ("fatal", "uncorrected"):
            self._latch(Evidence(entity, State.FAILED, "host", [f"{label} {severity}: {message}"], hard=True),
                        now + self.failed_hold_s)
        elif self.baseline:
            return
        elif severity == "deferred":  # an uncorrectable error the hardware contained (a poisoned page): the memory
            # is failing, the host still works
            self._latch(Evidence(entity, State.SUBHEALTHY, "host", [f"{label} deferred: {message}"]),
                        now + self.event_hold_s)
        elif kind != "edac" and severity == "corrected":
            self._latch(Evidence(entity, State.SUSPECT, "host", [f"{label} corrected: {message}"]),
                        now + self.event_hold_s)
        elif kind == "edac" and severity == "corrected":
            count = self._daily.add(f"edac|{entity}", now, float(code or 1))
            if count >= self.edac_ce_per_day:
                ev = Evidence(entity, State.SUSPECT, "host",
                              [f"EDAC corrected errors {count:.0f}/24h (limit {self.edac_ce_per_day:.0f})"])
                self._latch(ev, now + self.event_hold_s, "edac-rate")

