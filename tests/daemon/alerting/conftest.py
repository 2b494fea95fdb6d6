"""Fixtures for the alerting tests: a store with incidents, and real local chat servers."""

from __future__ import annotations

import pytest

from daemon.judgement.incidents import Incident, incident_id
from daemon.store import Store
from detectors.schema import State
from tests.daemon.alerting.receiver_server import ChatServer


def make_incident(entity: str, category: str = "gpu_memory", state: State = State.SUBHEALTHY, at: float = 1000.0,
                  rack: str | None = "r01", kind: str = "accelerator", parent: str | None = None,
                  evidence: list[str] | None = None) -> Incident:
    fp = f"{entity}|{category}"
    return Incident(id=incident_id(fp, at), fingerprint=fp, entity=entity, kind=kind, category=category,
                    severity=state, opened_at=at, updated_at=at, rack=rack, parent=parent,
                    evidence=evidence or [f"{entity.split('/')[-1]} HBM correctable ECC 41/h (peers 0.2/h)"])


def close(inc: Incident, at: float, reason: str = "healthy for 10 min") -> Incident:
    inc.closed_at, inc.updated_at, inc.close_reason = at, at, reason
    return inc


@pytest.fixture
def store(tmp_path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield s
    s.close()


@pytest.fixture
def chat():
    server = ChatServer()
    yield server
    server.close()
