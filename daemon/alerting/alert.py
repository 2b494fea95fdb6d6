"""Alerts and notifications: what the pipeline moves, independent of any chat platform."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

# Incident severity (health state) -> alert severity, as Alertmanager routes usually expect it.
SEVERITY = {"failed": "critical", "subhealthy": "warning", "suspect": "info", "unknown": "warning"}
SEVERITY_ORDER = {"info": 0, "warning": 1, "critical": 2}

CATEGORY_WORDS = {
    "gpu_memory": "GPU memory", "gpu_bus": "GPU bus (PCIe)", "gpu_thermal": "GPU temperature",
    "gpu_compute": "GPU compute", "scaleup_link": "scale-up link (NVLink)", "fabric_link": "fabric link",
    "host": "host", "cooling": "cooling", "telemetry": "telemetry", "application": "application",
    "repair": "repair order",
}
REPAIR_PREFIX = "repair-"
"""A repair order's alert is keyed ``repair-<order id>`` (its incident's alert is the incident id)."""


@dataclass
class Alert:
    """One incident as a chat message describes it (docs/architecture.md §7)."""

    incident_id: str
    status: str  # firing | resolved
    severity: str  # critical | warning | info
    state: str  # the incident's health state: failed, subhealthy, ...
    entity: str
    kind: str
    category: str
    rack: str | None
    summary: str  # what is wrong, in a sentence
    evidence: list[str]
    started_at: float
    ended_at: float | None = None
    action: str = ""  # what raswarden did or will do
    parent: str | None = None  # the rack/cooling incident this one is grouped under
    close_reason: str = ""
    where: list = field(default_factory=list)  # [what, value] pairs: rack, node, slot, serial, UUID, PCI, far end
    runbook: str = ""  # what to do next (daemon/alerting/runbooks.py)
    awaiting_approval: bool = False  # a playbook waits for an operator's approval
    drained: str | None = None  # the node raswarden drained for it (to resume once repaired)

    @property
    def labels(self) -> dict[str, str]:
        """Alertmanager-style labels: what silences and routes match on."""
        out = {"alertname": f"raswarden_{self.category}", "severity": self.severity, "state": self.state,
               "entity": self.entity, "kind": self.kind, "category": self.category,
               "node": self.entity.split("/", 1)[0], "incident": self.incident_id}
        if self.rack:
            out["rack"] = self.rack
        return out

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.incident_id.encode()).hexdigest()[:16]

    @property
    def path(self) -> str:
        """Its page on the status server: the incident's, or the repair order's."""
        if self.incident_id.startswith(REPAIR_PREFIX):
            return f"/repairs/{self.incident_id[len(REPAIR_PREFIX):]}"
        return f"/incidents/{self.incident_id}"

    def digest(self) -> str:
        """What a notification shows of this alert; a change makes its group notify again."""
        return f"{self.incident_id}|{self.status}|{self.state}|{self.action}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Alert:
        return cls(**d)


def group_key(rack: str | None, category: str) -> str:
    """Alerts are grouped by rack and category (one message for one rack's cooling trouble)."""
    return f"rack={rack or '-'},category={category}"


def alert_from_incident(row: Any, action: Any = "", where: list | None = None, runbook: str = "") -> Alert:
    """The alert of an incident row (``daemon.store.IncidentRow`` or ``daemon.judgement.incidents.Incident``), with what
    was
    done (``action``: text, or an ``alert_pipeline.ActionState``), where its part is (``where``: [what, value] pairs,
    e.g. from ``Topology.place``) and what to do next (``runbook``)."""
    text = action if isinstance(action, str) else action.text
    state = row.severity if isinstance(row.severity, str) else row.severity.label
    closed = row.closed_at is not None
    words = CATEGORY_WORDS.get(row.category, row.category)
    if row.kind in ("rack", "cooling"):
        summary = f"{row.entity}: {words} trouble across the {row.kind}"
    elif state == "failed":
        summary = f"{row.entity} has failed ({words})"
    elif state == "unknown" or row.category == "telemetry":
        summary = f"{row.entity} stopped reporting telemetry"
    else:
        summary = f"{row.entity} is {state}: {words} degrading"
    if closed:
        summary = f"{row.entity} recovered ({words})" + (f": {row.close_reason}" if row.close_reason else "")
    return Alert(
        incident_id=row.id, status="resolved" if closed else "firing", severity=SEVERITY.get(state, "warning"),
        state=state, entity=row.entity, kind=row.kind, category=row.category, rack=row.rack, summary=summary,
        evidence=list(row.evidence or []), started_at=row.opened_at, ended_at=row.closed_at, action=text,
        parent=getattr(row, "parent", None), close_reason=row.close_reason or "",
        where=[list(p) for p in where or []], runbook=runbook,
        awaiting_approval=getattr(action, "awaiting_approval", False), drained=getattr(action, "drained", None),
    )


def alert_from_repair(row: Any) -> Alert:
    """The alert of a repair order (``daemon.store.RepairOrderRow``): firing while it is under way, resolved once
    closed; its last change of state is what was done, what is expected of the technician is what to do."""
    last = row.history[-1] if row.history else {}
    closed = row.state == "closed"
    verb = {"open": "to do", "in_progress": "being worked on", "repaired": "repaired, to be validated",
            "validating": "validating", "closed": "done, back in service"}.get(row.state, row.state)
    failed_validation = last.get("from") == "validating" and last.get("to") == "open"
    return Alert(
        incident_id=f"{REPAIR_PREFIX}{row.id}", status="resolved" if closed else "firing",
        severity="critical" if failed_validation or row.severity == "failed" else "warning", state=row.state,
        entity=row.part, kind=row.kind, category="repair", rack=row.rack,
        summary=f"repair order {row.id}: {row.expected} {row.part} ({verb})", evidence=list(row.evidence[-4:]),
        started_at=row.opened_at, ended_at=row.closed_at,
        action=f"{last.get('from') or 'new'} -> {last.get('to')} by {last.get('by')}"
        + (f": {last['note']}" if last.get("note") else ""),
        close_reason="validation passed" if closed else "", where=[list(p) for p in row.where],
        runbook=row.expected_why,
    )


@dataclass
class Notification:
    """One message for one group: its alerts (firing first), sequence number and idempotency key."""

    group_key: str
    seq: int
    created_at: float
    alerts: list[Alert] = field(default_factory=list)
    status_url: str = ""

    @property
    def key(self) -> str:
        """Idempotency key: the same group and sequence number is the same message."""
        return f"{self.group_key}#{self.seq}"

    @property
    def status(self) -> str:
        return "firing" if any(a.status == "firing" for a in self.alerts) else "resolved"

    @property
    def firing(self) -> list[Alert]:
        return [a for a in self.alerts if a.status == "firing"]

    @property
    def resolved(self) -> list[Alert]:
        return [a for a in self.alerts if a.status == "resolved"]

    @property
    def severity(self) -> str:
        live = self.firing or self.alerts
        return max((a.severity for a in live), key=lambda s: SEVERITY_ORDER.get(s, 0), default="info")

    @property
    def group_labels(self) -> dict[str, str]:
        parts = dict(p.split("=", 1) for p in self.group_key.split(",") if "=" in p)
        return {k: v for k, v in parts.items() if v != "-"}

    def as_dict(self) -> dict[str, Any]:
        return {"group_key": self.group_key, "seq": self.seq, "created_at": self.created_at,
                "status_url": self.status_url, "alerts": [a.as_dict() for a in self.alerts]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Notification:
        return cls(d["group_key"], d["seq"], d["created_at"], [Alert.from_dict(a) for a in d["alerts"]],
                   d.get("status_url", ""))

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(sorted(a.digest() for a in self.alerts)).encode()).hexdigest()[:16]
