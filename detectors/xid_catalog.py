"""NVIDIA's Xid catalog as data, and what each code means to raswarden.

Three packaged files (``detectors/catalogs/``), each naming its source in its header:

* ``nvidia_xid.csv``: the vendor's facts per code, as NVIDIA's Xid Catalog workbook has them (mnemonic, description,
  which of A100/H100/B100/GB200 it applies to, the immediate and investigatory resolution buckets, the driver from
  which the code is linked to Xid 154). ``scripts/catalogs.py xid Xid-Catalog.xlsx`` writes it anew from the workbook.
* ``nvidia_xid_decode.csv``: the workbook's "XID 144-150 Decode" sheet: the NVLink 5 Xids' resolution by the
  IntrInfo bit pattern (V1 before driver R575, V2 from it) and error status their line prints.
* ``xid.csv``: raswarden's judgement of every code: state, category, repair and, where it departs from what
  :data:`VENDOR_ACTIONS` makes of the vendor's bucket, why (docs/rules.md lists every departure).

The vendor's bucket drives the judgement: RESET_GPU, RESTART_BM and WORKFLOW_XID_48 are ``failed`` (the GPU is
unusable until reset or reboot: drain now), CONTACT_SUPPORT, CHECK_MECHANICALS and UPDATE_SWFW ``subhealthy``
(hands-on work: checkpoint, then drain), RESTART_APP and the Xid 13/31/45 workflows the job's fault, IGNORE a watch
(``suspect``; ``ignore`` when the investigatory bucket says ignore too), 154 the action its line names, 144-150 the
decode sheet's row for the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from detectors.catalog_files import catalog_rows
from detectors.schema import CATEGORIES, State

#: architectures the workbook has an "Applies to" column for, in its order
ARCHITECTURES = ("a100", "h100", "b100", "gb200")
#: what raswarden makes of a code (``decode``: the 144-150 sheet decides per line)
STATES = ("failed", "subhealthy", "suspect", "ignore", "application", "recovery_action", "decode")
#: the repair a code calls for: what a technician or the playbook does to the part
REPAIRS = ("reset", "reboot", "reseat", "replace", "inspect", "none")

#: the vendor's immediate resolution bucket -> (state, repair), where the bucket alone decides
VENDOR_ACTIONS: dict[str, tuple[str, str]] = {
    "RESET_GPU": ("failed", "reset"),
    "RESTART_BM": ("failed", "reboot"),
    "RESTART_VM": ("failed", "reboot"),
    "WORKFLOW_XID_48": ("failed", "reset"),  # solo: RESET_GPU; with 63/64: drain and reset
    "WORKFLOW_NVLINK_ERR": ("failed", "reset"),  # "a GPU reset or node reboot is needed to clear this error"
    "CONTACT_SUPPORT": ("subhealthy", "inspect"),
    "CHECK_MECHANICALS": ("subhealthy", "reseat"),
    "UPDATE_SWFW": ("subhealthy", "inspect"),
    "RESTART_APP": ("application", "none"),
    "WORKFLOW_XID_13": ("application", "none"),  # repeats on one GPU's TPC/GPC: diagnostics; else the app
    "WORKFLOW_XID_31": ("application", "none"),  # repeat MMU faults on one GPU: diagnostics; else the app
    # with other Xids: follow them; solo: restart the Fabric Manager (its GPUs reset with it); xid.csv departs
    "WORKFLOW_XID_45": ("subhealthy", "reset"),
    "CHECK_UVM": ("suspect", "none"),  # reset only where UVM/vGPU is used
    "XID_154": ("recovery_action", "none"),
    "WORKFLOW_NVLINK5_ERR": ("decode", "reset"),
}


@dataclass(frozen=True)
class VendorXid:
    """One row of NVIDIA's Xid catalog, as the vendor gives it."""

    code: int
    mnemonic: str
    description: str
    applies_to: tuple[str, ...]
    immediate: str
    investigatory: str
    xid154_linkage: str

    @property
    def used(self) -> bool:
        """Documented on at least one of the data-centre architectures (the rest say "Unused")."""
        return bool(self.applies_to)


def vendor_judgement(v: VendorXid) -> tuple[str, str] | None:
    """What the vendor's buckets make of a code here, or None when the catalog gives no action."""
    if v.immediate == "IGNORE":
        return ("ignore", "none") if v.investigatory.startswith("IGNORE") else ("suspect", "none")
    return VENDOR_ACTIONS.get(v.immediate)


@dataclass(frozen=True)
class XidRule:
    """What raswarden does with one Xid code (a row of ``xid.csv`` with its vendor facts)."""

    code: int
    mnemonic: str
    state: str
    category: str
    repair: str
    ends: tuple[int, ...]
    departure: str
    vendor: VendorXid

    @property
    def meaning(self) -> str:
        return self.vendor.description


@dataclass(frozen=True)
class DecodeRow:
    """One row of the workbook's XID 144-150 decode sheet."""

    xid: int
    unit: str
    intrinfo_v1: str
    intrinfo_v2: str
    error_status: tuple[int, ...]  # empty: the sheet gives none (any status)
    action: str
    action2_v1: str
    action2_v2: str
    action2: str
    investigatory: str
    severity: str
    hw_sw: str

    @property
    def units(self) -> tuple[str, ...]:
        """The unit's names as the line prints them (V1 and V2 names are split by "/" where they differ)."""
        return tuple(u.strip() for u in self.unit.split("/"))

    @property
    def repeats_per_day(self) -> int | None:
        """How many a day NVIDIA lets a row's line repeat before its investigatory action applies ("REPORT_ISSUE (if
        seen >1 per day)"), or None where the row says nothing of repeats."""
        m = _PER_DAY.search(self.investigatory)
        return int(m.group(1)) if m else None


_PER_DAY = re.compile(r"if seen\s*>\s*(\d+)\s*per day", re.IGNORECASE)


def _judgement(name: str, r: dict[str, str]) -> tuple[str, str, str, tuple[int, ...], str]:
    """A judgement row's state, category, repair, the codes it ends and its departure, checked."""
    if r["state"] not in STATES or r["repair"] not in REPAIRS or r["category"] not in CATEGORIES:
        raise ValueError(f"{name}: code {r['code']}: state, repair or category not one of the known ones: {r}")
    return r["state"], r["category"], r["repair"], tuple(int(c) for c in r["ends"].split()), r["departure"]


@cache
def load_vendor_xids() -> dict[int, VendorXid]:
    """``nvidia_xid.csv`` keyed by code (read once; never change what it returns)."""
    return {int(r["code"]): VendorXid(int(r["code"]), r["mnemonic"], r["description"],
                                      tuple(a for a in ARCHITECTURES if r[a] == "yes"), r["immediate"],
                                      r["investigatory"], r["xid154_linkage"])
            for r in catalog_rows("nvidia_xid.csv")}


@cache
def load_xid_catalog() -> dict[int, XidRule]:
    """raswarden's judgement of every code (``xid.csv``) with the vendor's facts, keyed by code."""
    vendor = load_vendor_xids()
    rules = {}
    for r in catalog_rows("xid.csv"):
        code = int(r["code"])
        rules[code] = XidRule(code, vendor[code].mnemonic, *_judgement("xid.csv", r), vendor[code])
    return rules


@cache
def load_decode_sheet() -> dict[int, list[DecodeRow]]:
    """``nvidia_xid_decode.csv``, the rows of each Xid in the sheet's order."""
    out: dict[int, list[DecodeRow]] = {}
    for r in catalog_rows("nvidia_xid_decode.csv"):
        row = DecodeRow(int(r["xid"]), r["unit"], r["intrinfo_v1"], r["intrinfo_v2"],
                        tuple(int(s, 16) for s in r["error_status"].split()), r["action"], r["action2_v1"],
                        r["action2_v2"], r["action2"], r["investigatory"], r["severity"], r["hw_sw"])
        out.setdefault(row.xid, []).append(row)
    return out


def pattern_matches(pattern: str, value: int) -> bool:
    """A 32-character bit pattern of the decode sheet (most significant bit first, ``-`` any) against a register."""
    if len(pattern) != 32:
        return False
    for i, ch in enumerate(pattern):
        bit = (value >> (31 - i)) & 1
        if (ch == "0" and bit) or (ch == "1" and not bit):
            return False
    return True


# "SAW_MVB Nonfatal XC0 i0 Link 00 (0x00000001 0x00000002 0x00000000 0x00000000)": the unit, the driver's own
# severity, then IntrInfo and the error status first in the parentheses (NVIDIA: WORKFLOW_NVLINK5_ERR's format).
_NVLINK5 = re.compile(r"^(?P<unit>.+?)\s+(?P<severity>Fatal|Non-?[Ff]atal)\b.*?\(\s*(?P<intrinfo>0x[0-9A-Fa-f]+)"
                      r"[\s,]+(?P<status>0x[0-9A-Fa-f]+)")


@dataclass(frozen=True)
class Decoded:
    """An NVLink 5 Xid line decoded by the sheet: the row it matched and what that makes of it here."""

    row: DecodeRow
    action: str  # the resolution bucket that applies (the row's action, or its action 2 where that pattern matched)
    state: str  # failed, subhealthy, suspect, ignore or application

    def reason(self) -> str:
        return (f"NVLink 5 decode {self.row.unit} {self.row.severity.rstrip('*?')}: {self.action}"
                f" (investigate: {self.row.investigatory})")


def decode_state(action: str, severity: str, investigatory: str) -> str:
    """A decode row's bucket as a state: a GPU-fatal reset is ``failed``; a link-fatal one ``subhealthy`` (NVIDIA: the
    GPU is put in a "drain and reset recommended" state until its jobs are drained); XID_154_EVAL follows the Xid 154
    that comes with it, else the job's (RESTART_APP); IGNORE a watch, or nothing when the investigation is IGNORE
    too."""
    if action == "RESET_GPU":
        if severity.lower().startswith("link fatal") or severity.lower().startswith("non-fatal"):
            return "subhealthy"
        return "failed"
    if action == "XID_154_EVAL":
        return "application"
    if action == "IGNORE":
        return "ignore" if investigatory.startswith("IGNORE") else "suspect"
    return "suspect"


def decode_nvlink5(code: int, message: str, sheet: dict[int, list[DecodeRow]]) -> Decoded | None:
    """The decode sheet's verdict on an Xid 144-150 line, or None when the line or the sheet cannot say."""
    m = _NVLINK5.match(message.strip())
    if not m or code not in sheet:
        return None
    unit, intrinfo, status = m.group("unit"), int(m.group("intrinfo"), 16), int(m.group("status"), 16)
    candidates = [r for r in sheet[code] if not r.error_status or status in r.error_status]
    matched = [r for r in candidates
               if pattern_matches(r.intrinfo_v2, intrinfo) or pattern_matches(r.intrinfo_v1, intrinfo)]
    named = [r for r in matched if unit in r.units or unit == r.unit]
    if not (named or matched):
        # a V1 line whose IntrInfo holds other bits: the unit the driver printed and the status still name the row
        named = [r for r in candidates if unit in r.units or unit == r.unit]
    rows = named or matched
    if not rows:
        return None
    row = rows[0]
    if row.action2 and (pattern_matches(row.action2_v2, intrinfo) or pattern_matches(row.action2_v1, intrinfo)):
        return Decoded(row, row.action2, decode_state(row.action2, row.severity, row.investigatory))
    return Decoded(row, row.action, decode_state(row.action, row.severity, row.investigatory))


#: the Fabric Manager guide's SXid classes -> (state, repair): a fatal SXid takes down the GPUs whose traffic crossed
#: the port (reset them), an always-fatal one the whole fabric (restart the host)
SXID_CLASSES: dict[str, tuple[str, str]] = {
    "non-fatal": ("suspect", "none"),
    "fatal": ("failed", "reset"),
    "always-fatal": ("failed", "reboot"),
}


@dataclass(frozen=True)
class SxidRule:
    """One NVSwitch SXid code: the guide's name, class and recovery, and what raswarden does with it."""

    code: int
    name: str
    klass: str
    recovery: str
    state: str
    category: str
    repair: str
    ends: tuple[int, ...]
    departure: str


@cache
def load_sxid_catalog() -> dict[int, SxidRule]:
    """``sxid.csv`` keyed by code."""
    out = {}
    for r in catalog_rows("sxid.csv"):
        code = int(r["code"])
        out[code] = SxidRule(code, r["name"], r["class"], r["recovery"], *_judgement("sxid.csv", r))
    return out


def repair_reason(text: str, vendor: str, repair: str) -> str:
    """An Xid's or SXid's reason with the vendor's advice and the repair it calls for, as :func:`vendor_repair`
    reads it back (the repair order's first action, daemon/operations/repairs.py)."""
    return f"{text} ({vendor}" + (f"; repair: {repair}" if repair != "none" else "") + ")"


_REPAIR = re.compile(r"; repair: (reset|reboot|reseat|replace|inspect)\)$")


def vendor_repair(reasons: list[str]) -> str | None:
    """The repair the first reason that names one calls for (:func:`repair_reason`), or None."""
    for reason in reasons:
        m = _REPAIR.search(reason)
        if m:
            return m.group(1)
    return None


def state_of(name: str) -> State | None:
    """A catalog state as a health state (None for the ones that are not a level: ignore, application, ...)."""
    return State.parse(name) if name in ("failed", "subhealthy", "suspect") else None
