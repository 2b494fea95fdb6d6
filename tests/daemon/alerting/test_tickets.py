"""Ticket trackers through the outbox, against a real local HTTP server answering as Jira (REST API v2) and
ServiceNow (Table API) document: a repair order's ticket is made once, its key kept from the answer, every later
change of the order updates that ticket (a comment, a PATCH of work notes, the close), a failed create is retried
and makes one ticket; the generic receiver upserts by the order's own id."""

from __future__ import annotations

import json

import pytest

from daemon.alerting.alert_pipeline import AlertingConfig, AlertPipeline
from daemon.alerting.outbox import Outbox
from daemon.alerting.receivers import build
from daemon.alerting.receivers.receiver import ReceiverConfig
from daemon.alerting.render import Renderer
from daemon.alerting.routing import Route
from daemon.operations.repairs import RepairBook
from detectors.schema import State
from tests.daemon.alerting.conftest import make_incident
from tests.daemon.alerting.receiver_server import ChatServer

T0 = 1_000.0


@pytest.fixture
def tracker():
    server = ChatServer()
    yield server
    server.close()


def loop(store, tracker, kind: str, **options):
    cfg = AlertingConfig(group_wait_s=0, group_interval_s=0, repeat_interval_s=86400, status_url="http://rw:9470",
                         default_receivers=[], routes=[Route(receivers=["tracker"], categories=["repair"])])
    pipeline = AlertPipeline(store, cfg)
    receiver = build(ReceiverConfig(name="tracker", type=kind, url=tracker.url(""), secret="pat-1",
                                    options=options), Renderer(status_url="http://rw:9470"))
    outbox = Outbox(store, {"tracker": receiver})
    return pipeline, outbox


def order_for(store, at=T0):
    inc = make_incident("sn01-b07/gpu3", category="gpu_memory", state=State.FAILED, at=at)
    store.record_tick([], [inc], now=at)
    book = RepairBook(store, clock=lambda: at + 1)
    (order,) = book.open_for(inc.id)
    return book, order


def tell(pipeline, outbox, now):
    pipeline.step(now)
    return outbox.deliver(now)


def test_jira_makes_one_issue_per_order_and_comments_every_change(store, tracker):
    pipeline, outbox = loop(store, tracker, "jira", project="OPS", labels=["dc-a"])
    book, order = order_for(store)
    tracker.answers = [(503, {}, b"busy"), (201, {"Content-Type": "application/json"},
                                            json.dumps({"id": "10007", "key": "OPS-7", "self": "x"}).encode())]
    assert tell(pipeline, outbox, T0 + 10)["retry"] == 1  # Jira busy: the create is retried
    assert outbox.deliver(T0 + 1000)["delivered"] == 1
    made = [r for r in tracker.received if r.path == "/rest/api/2/issue"]
    assert len(made) == 2 and made[-1].headers["authorization"] == "Bearer pat-1"
    fields = made[-1].json()["fields"]
    assert fields["project"] == {"key": "OPS"} and fields["issuetype"] == {"name": "Task"}
    assert fields["summary"] == f"repair order {order.id}: rma sn01-b07/gpu3 (to do)"
    assert fields["labels"] == ["raswarden", f"raswarden-repair-{order.id}", "dc-a"]
    assert "HBM errors do not heal" in fields["description"] and f"/repairs/{order.id}" in fields["description"]
    book.clock = lambda: T0 + 2000
    book.start(order.id, "dana")
    tell(pipeline, outbox, T0 + 2000)
    book.clock = lambda: T0 + 3000
    book.done(order.id, "dana", new_serial="1799")
    book.move(order.id, "validating", "raswarden")
    book.move(order.id, "closed", "raswarden", "validation passed")
    tell(pipeline, outbox, T0 + 3000)
    comments = [r for r in tracker.received if r.path == "/rest/api/2/issue/OPS-7/comment"]
    assert len(comments) == 2 and "in_progress by dana" in comments[0].json()["body"]
    assert "done, back in service" in comments[1].json()["body"]
    assert len([r for r in tracker.received if r.path == "/rest/api/2/issue"]) == 2  # one issue made


def test_servicenow_makes_a_record_and_patches_its_work_notes(store, tracker):
    pipeline, outbox = loop(store, tracker, "servicenow", assignment_group="dc-hardware")
    book, order = order_for(store)
    tracker.answers = [(201, {"Content-Type": "application/json"},
                        json.dumps({"result": {"sys_id": "9d385017c611228701d22104cc95c371", "number": "INC0010042"}})
                        .encode())]
    tell(pipeline, outbox, T0 + 10)
    (made,) = tracker.received
    assert (made.method, made.path) == ("POST", "/api/now/table/incident")
    body = made.json()
    assert body["urgency"] == "1" and body["correlation_id"] == f"raswarden-repair-{order.id}"
    assert body["assignment_group"] == "dc-hardware" and body["short_description"].startswith("repair order")
    book.clock = lambda: T0 + 3000
    book.done(order.id, "dana")
    book.move(order.id, "validating", "raswarden")
    book.move(order.id, "closed", "raswarden", "validation passed")
    tell(pipeline, outbox, T0 + 3000)
    update = tracker.received[-1]
    assert (update.method, update.path) == ("PATCH", "/api/now/table/incident/9d385017c611228701d22104cc95c371")
    assert update.json()["state"] == "6" and "work_notes" in update.json()


def test_the_generic_ticket_receiver_upserts_by_the_orders_id(store, tracker):
    pipeline, outbox = loop(store, tracker, "ticket")
    book, order = order_for(store)
    tell(pipeline, outbox, T0 + 10)
    book.clock = lambda: T0 + 2000
    book.start(order.id, "dana")
    tell(pipeline, outbox, T0 + 2000)
    events = [(r.json()["event"], r.json()["external_id"]) for r in tracker.received]
    assert events == [("open", f"raswarden-repair-{order.id}"), ("update", f"raswarden-repair-{order.id}")]
    assert tracker.received[0].json()["rack"] == "r01" and "rma" in tracker.received[0].json()["title"]


def test_a_jira_receiver_without_its_project_is_refused_when_built():
    with pytest.raises(ValueError, match="'project' is required"):
        build(ReceiverConfig(name="tracker", type="jira", url="https://jira.example", secret="pat-1"))
