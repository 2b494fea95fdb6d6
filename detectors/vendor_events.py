"""RAS events of the other accelerator vendors, judged beside NVIDIA's Xids (see ``rules.py``).

* **amdgpu** kernel lines (``daemon/ingest/formats/kernel_events.py``) by ``catalogs/amdgpu.csv``: uncorrectable
  errors in any block, the fatal-error interrupt and a failed GPU reset are ``failed`` (the driver resets the
  GPU; the job on it is gone); deferred (poisoned, contained) errors are ``subhealthy``; correctable errors
  count towards an hourly rate by block (the UMC, the HBM's memory controller, against the rule detector's
  correctable-ECC limit); a GPU reset is ``suspect``; page faults and ring timeouts are the job's
  (``application``).
* **Ascend** fault codes (npu-exporter's ``npu_chip_info_error_code``) by the handling level Ascend
  MindCluster gives them (``catalogs/ascend_fault_codes.csv``): SeparateNPU and RestartNPU ``failed`` (the
  NPU must be isolated or reset now: MindCluster stops the job); PreSeparateNPU, FreeRestartNPU (reset
  when idle) and SubHealthFault ``subhealthy``; RestartRequest and RestartBusiness are the job's to
  restart (``application``: suspect only when one NPU repeats them); NotHandleFault is nothing. A code not
  in the catalog is ``suspect`` and counted.

* **AMD Field IDs** (AFIDs: AMD device-metrics-exporter's ``gpu_afid_errors``, the AFIDs of a GPU's last RAS event)
  by the severity AMD's list gives them (``catalogs/amd_afid.csv``): ``Fail-to-init`` (the GPU did not come up)
  and ``Fatal`` are ``failed``; ``Uncorrected, Non-fatal`` (contained) is ``subhealthy``; ``Corrected`` is a watch
  (its rate is the counters'); a record amd-smi could not decode (``ALL``) is a ``telemetry`` watch. An AFID not
  in the list is ``suspect`` and counted.

The static-threshold baseline keeps what the vendors' own tools act on: amdgpu uncorrectable errors,
fatal interrupts and failed resets; MindCluster's SeparateNPU and RestartNPU; AMD's fatal and fail-to-init AFIDs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from detectors.catalog_files import catalog_rows
from detectors.schema import State
from detectors.xid_catalog import repair_reason

# What MindCluster's levels mean here: (state or None, hard, application).
ASCEND_LEVELS: dict[str, tuple[State | None, bool, bool]] = {
    "NotHandleFault": (None, False, False),
    "SubHealthFault": (State.SUBHEALTHY, False, False),
    "RestartRequest": (None, False, True),
    "RestartBusiness": (None, False, True),
    "FreeRestartNPU": (State.SUBHEALTHY, False, False),
    "PreSeparateNPU": (State.SUBHEALTHY, False, False),
    "RestartNPU": (State.FAILED, True, False),
    "SeparateNPU": (State.FAILED, True, False),
}
_ASCEND_WORDS = {
    "NotHandleFault": "no action", "SubHealthFault": "sub-healthy", "RestartRequest": "re-run the request",
    "RestartBusiness": "restart the job", "FreeRestartNPU": "reset the NPU when idle",
    "PreSeparateNPU": "isolate the NPU soon", "RestartNPU": "reset the NPU", "SeparateNPU": "isolate the NPU",
}


@dataclass(frozen=True)
class Verdict:
    """What one vendor event says: a level to latch, a correctable count to rate, or the job's fault."""

    level: State | None
    category: str
    reason: str
    hard: bool = False
    application: bool = False
    rate_key: str = ""  # correctable errors: counted per hour under this key instead of latched
    count: float = 0.0
    unknown: bool = False


def load_ascend_catalog() -> dict[int, str]:
    """The packaged Ascend fault-code catalog: code -> MindCluster handling level."""
    rows = catalog_rows("ascend_fault_codes.csv")
    return {int(r["code"], 16): r["level"] for r in rows}


def ascend_verdict(code: int | None, catalog: dict[int, str], baseline: bool = False) -> Verdict | None:
    """The verdict on an Ascend fault code (None: nothing to say)."""
    if code is None:
        return None
    level_name = catalog.get(code)
    text = f"Ascend fault code 0x{code:08X}"
    if level_name is None:
        if baseline:
            return None
        return Verdict(State.SUSPECT, "gpu_compute", f"{text} (not in the MindCluster catalog)", unknown=True)
    state, hard, application = ASCEND_LEVELS[level_name]
    reason = f"{text} (MindCluster {level_name}: {_ASCEND_WORDS[level_name]})"
    if baseline and not hard:
        return None
    if application:
        return Verdict(None, "application", reason, application=True)
    if state is None:
        return None
    return Verdict(state, "gpu_compute", reason, hard=hard)


@dataclass(frozen=True)
class Afid:
    """One AMD Field ID of AMD's list."""

    afid: int
    category: str
    type: str
    severity: str


def load_afid_catalog() -> dict[int, Afid]:
    """The packaged AFID list: AFID -> its row."""
    rows = catalog_rows("amd_afid.csv")
    return {int(r["afid"]): Afid(int(r["afid"]), r["category"], r["type"], r["severity"]) for r in rows}


# AMD's severity -> (state, hard, repair): the repair is raswarden's (AMD's per-AFID service action is in a Service
# Action Guide per platform, not public); a bad-page table over its threshold is the amdgpu line's replacement
_AFID_SEVERITY: dict[str, tuple[State, bool, str]] = {
    "Fail-to-init": (State.FAILED, True, "inspect"),
    "Fatal": (State.FAILED, True, "reset"),
    "Uncorrected, Non-fatal": (State.SUBHEALTHY, False, "reset"),
    "Corrected": (State.SUSPECT, False, "none"),
    "ALL": (State.SUSPECT, False, "none"),
}


def _afid_category(row: Afid) -> str:
    """The raswarden category of an AFID, by AMD's category and type."""
    if row.category in ("CPER Format", "Unidentified Errors"):
        return "telemetry"
    if row.category == "HBM Errors" or row.type.startswith("HBM"):
        return "gpu_memory"
    if row.type == "PCIe AER":
        return "gpu_bus"
    if any(link in row.type for link in ("XGMI", "WAFL", "USR")):
        return "scaleup_link"
    return "gpu_compute"


def afid_verdict(code: int | None, catalog: dict[int, Afid], baseline: bool = False) -> Verdict | None:
    """The verdict on one AMD Field ID of a GPU's RAS event (None: nothing to say)."""
    if code is None:
        return None
    row = catalog.get(code)
    if row is None:
        if baseline:
            return None
        return Verdict(State.SUSPECT, "gpu_compute", f"AMD Field ID {code} (not in AMD's AFID list)", unknown=True)
    state, hard, repair = _AFID_SEVERITY[row.severity]
    if baseline and not hard:
        return None
    if row.type == "Bad Page Retirement Threshold":
        repair = "replace"
    text = f"AMD Field ID {code}: {row.category}, {row.type}"
    severity = "any severity" if row.severity == "ALL" else row.severity
    return Verdict(state, _afid_category(row), repair_reason(text, f"AMD: {severity}", repair), hard=hard)


@dataclass(frozen=True)
class AmdgpuRule:
    """One row of the amdgpu catalog."""

    event: str
    block: str
    state: str
    category: str
    meaning: str


def load_amdgpu_catalog() -> list[AmdgpuRule]:
    """The packaged amdgpu catalog, in file order (the first matching row wins)."""
    rows = catalog_rows("amdgpu.csv")
    return [AmdgpuRule(r["event"], r["block"], r["state"], r["category"], r["meaning"]) for r in rows]


_AMDGPU_CATALOG: list[AmdgpuRule] | None = None


def amdgpu_verdict(severity: str, message: str, count: int | None, baseline: bool = False) -> Verdict | None:
    """The verdict on an amdgpu kernel event by ``catalogs/amdgpu.csv`` (``message`` starts with the block
    for error counts)."""
    global _AMDGPU_CATALOG
    if _AMDGPU_CATALOG is None:
        _AMDGPU_CATALOG = load_amdgpu_catalog()
    block = message.split(" block:", 1)[0] if " block:" in message else ""
    rule = next((r for r in _AMDGPU_CATALOG if r.event == severity and r.block in (block, "*")), None)
    if rule is None:
        return None
    text = f"amdgpu {message}"
    if rule.state == "failed":
        return Verdict(State.FAILED, rule.category, text, hard=True)
    if baseline:
        return None
    if rule.state == "rate":
        return Verdict(None, rule.category, text, rate_key=f"amdgpu-ce-{block or 'any'}", count=float(count or 1))
    if rule.state == "application":
        return Verdict(None, "application", f"amdgpu {message}", application=True)
    return Verdict(State.parse(rule.state), rule.category, f"{text} ({rule.meaning[0].lower()}{rule.meaning[1:]})")


@dataclass(frozen=True)
class SelRule:
    """One row of the SEL catalog (``catalogs/ipmi_sel.csv``): records of a sensor type whose event words it matches."""

    event: re.Pattern
    state: State
    category: str
    repair: str
    meaning: str


def load_sel_catalog() -> dict[int, list[SelRule]]:
    """The packaged SEL catalog: IPMI sensor type -> its rules, in file order (the first that matches judges)."""
    out: dict[int, list[SelRule]] = {}
    for r in catalog_rows("ipmi_sel.csv"):
        out.setdefault(int(r["sensor_type"], 16), []).append(SelRule(
            re.compile(r["event"], re.IGNORECASE), State.parse(r["state"]), r["category"], r["repair"], r["meaning"]))
    return out


def sel_verdict(code: int | None, message: str, catalog: dict[int, list[SelRule]],
                baseline: bool = False) -> Verdict | None:
    """The verdict on one record of a BMC's event log (``sensor: event`` of IPMI sensor type ``code``); None for one
    the catalog does not judge (a presence, a boot's progress) and, for the static baseline, for all but hard ones."""
    event = message.split(": ", 1)[-1]
    rule = next((r for r in catalog.get(code, ()) if r.event.match(event)), None) if code is not None else None
    if rule is None or (baseline and rule.state != State.FAILED):
        return None
    reason = repair_reason(f"BMC event log: {message}", f"IPMI SEL: {rule.meaning}", rule.repair)
    return Verdict(rule.state, rule.category, reason, hard=rule.state == State.FAILED)
