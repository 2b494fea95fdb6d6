"""What the pages and the API read of a running service: entities with their states, incidents, actions, silences,
repair orders, idle checks and checkpoint advice, as JSON-ready lists and objects."""

from __future__ import annotations

import time

from daemon.alerting.silences import SilenceBook
from daemon.store.journal import StoreJournal


def _states(service) -> dict[str, str]:
    """Current visible state per entity: the pipeline's, else the store's last record."""
    out = {h.entity: h.state for h in service.store.health()}
    pipeline = service.pipeline
    for entity, h in pipeline.health.entities.items():
        out[entity] = h.state.label
    for entity, state in pipeline.reported.items():
        if "/" not in entity:
            out[entity] = state.label
    return out


def entities_json(service) -> list[dict]:
    states = _states(service)
    rows = service.store.entities()
    return [{"id": r.id, "kind": r.kind, "node": r.node, "rack": r.rack,
             "state": states.get(r.id, "healthy")} for r in rows]


def incidents_json(service, status: str | None) -> list[dict]:
    return [{"id": r.id, "entity": r.entity, "kind": r.kind, "category": r.category, "severity": r.severity,
             "status": r.status, "opened_at": r.opened_at, "updated_at": r.updated_at, "closed_at": r.closed_at,
             "rack": r.rack, "parent": r.parent, "evidence": r.evidence}
            for r in service.store.incidents(status)]


def actions_json(service, limit: int = 200) -> list[dict]:
    rows = StoreJournal(service.store).recent_rows(limit)
    return [{"key": r.idempotency_key, "incident": r.incident_id, "playbook": r.playbook, "step": r.step,
             "status": r.status, "ts": r.ts, "detail": r.detail} for r in rows]


def silences_json(service) -> list[dict]:
    now = time.time()
    return [{"id": s.id, "matchers": [str(m) for m in s.matchers], "starts_at": s.starts_at, "ends_at": s.ends_at,
             "by": s.created_by, "comment": s.comment} for s in SilenceBook(service.store).active(now)]


def repairs_json(service, everything: bool = False) -> list[dict]:
    """Repair orders, the queue's order (daemon/operations/repairs.py): open to validating, or all."""
    from daemon.operations.repairs import ACTIVE

    return [r.model_dump() for r in service.remediation.repairs.orders(None if everything else ACTIVE)]


def advice_json(service, job: str | None = None) -> dict | None:
    """The checkpoint advice as last made (daemon/operations/advice.py): the foresight it stands on and every job's, or
    one
    job's (None: no advice for it)."""
    advice = service.advisor.last
    if job is not None:
        return advice[job].as_dict() if job in advice else None
    fs = service.advisor.foresight
    return {"foresight": fs.summary(service.cfg.advice.quantile) if fs is not None else None,
            "jobs": {j: a.as_dict() for j, a in sorted(advice.items())}}


def idle_checks_json(service) -> list[dict]:
    """The active checks of idle nodes (daemon/operations/validation.py): each node's running or last one."""
    return [r.model_dump() for r in service.remediation.validator.checks()]
