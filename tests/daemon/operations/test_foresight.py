"""Foresight measured from hand-made journals: which hard failures raswarden acted on ahead, the rates and their
uncertainty (daemon/operations/foresight.py)."""

from __future__ import annotations

import pytest
from scipy import stats

from daemon.operations.foresight import YEAR_H, Prior, measure
from daemon.judgement.incidents import Incident
from daemon.store import ActionRow, Store
from detectors.schema import State

T0 = 1_780_000_000.0
DAY = 86400.0


def journal(tmp_path, nodes: int = 10, days: float = 30.0):
    """A store whose ``nodes`` nodes were first seen ``days`` before ``now``; returns (store, now, helpers)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    store.upsert_entities([{"id": f"n{i:02d}", "kind": "node", "node": f"n{i:02d}", "rack": f"r{i % 2}",
                            "first_seen": T0, "attrs": {}} for i in range(nodes)])
    return store, T0 + days * DAY


def incident(store, entity: str, category: str, opened: float, failed: float | None = None,
             closed: float | None = None, rack: str = "r0") -> str:
    state = State.FAILED if failed is not None else State.SUBHEALTHY
    kind = "port" if ":" in entity else "accelerator" if "/" in entity else "node"
    inc = Incident(f"inc-{entity}-{opened:.0f}", f"{entity}|{category}", entity, kind, category, state, opened,
                   failed or opened, rack, ["test"], closed, "", None, failed)
    store.record_tick([], [inc], now=opened)
    return inc.id


def step(store, incident_id: str, step_name: str, at: float, **detail) -> None:
    with store.session() as s:
        s.add(ActionRow(idempotency_key=f"{incident_id}:pb#{step_name}", incident_id=incident_id, playbook="pb",
                        step=step_name, status="done", ts=at, detail={"mode": "act", "finished_at": at, **detail}))
        s.commit()


def test_failures_acted_on_ahead_and_not_are_counted_per_class_and_rack(tmp_path):
    store, now = journal(tmp_path)
    # a GPU drained ahead (sub-healthy, then failed while out), one failed without warning, a port not acted on
    a = incident(store, "n01/gpu3", "gpu_memory", T0 + 2 * DAY, failed=T0 + 2 * DAY + 7200, rack="r1")
    step(store, a, "drain", T0 + 2 * DAY + 600)
    incident(store, "n02/gpu0", "gpu_bus", T0 + 5 * DAY, failed=T0 + 5 * DAY)
    incident(store, "n03/mlx5_1:1", "fabric_link", T0 + 6 * DAY, failed=T0 + 6 * DAY + 3 * 3600)
    # averted: drained while sub-healthy, never failed; and a sub-healthy one nobody drained (not a failure)
    b = incident(store, "n04/gpu1", "gpu_memory", T0 + 9 * DAY, closed=T0 + 10 * DAY)
    step(store, b, "drain", T0 + 9 * DAY + 300)
    incident(store, "n05/gpu2", "gpu_thermal", T0 + 11 * DAY, closed=T0 + 11 * DAY + 3600)
    # a checkpoint confirmed 5 minutes before a failure: acted on ahead
    c = incident(store, "n06/gpu4", "gpu_bus", T0 + 12 * DAY, failed=T0 + 12 * DAY + 3600)
    step(store, c, "wait_checkpoint", T0 + 12 * DAY + 3000, confirmed_at={"77": T0 + 12 * DAY + 3300})

    fs = measure(store, now)
    how = {f.entity: (f.foreseen, f.how) for f in fs.failures}
    assert how == {"n01/gpu3": (True, "drained ahead"), "n02/gpu0": (False, "unwarned"),
                   "n03/mlx5_1:1": (False, "warned, not acted on"), "n04/gpu1": (True, "averted"),
                   "n06/gpu4": (True, "checkpoint confirmed")}
    assert (fs.foreseen, fs.unforeseen, fs.unwarned) == (3, 2, 1)
    by_class = {k: (v.foreseen, v.warned, v.unwarned) for k, v in fs.by("category").items()}
    assert by_class == {"fabric_link": (0, 1, 0), "gpu_bus": (1, 0, 1), "gpu_memory": (2, 0, 0)}
    assert fs.by("rack")["r1"].foreseen == 1
    assert fs.node_hours == pytest.approx(10 * 30 * 24)
    # open and not acted on: the port's 3 h (its warned failure), the thermal GPU's hour, the GPUs open before they
    # were drained or failed (the drained and averted ones until their drains, the one with a checkpoint until it
    # failed); the hazard of an open port incident is its failure over those hours, from the prior's one in 24 h
    assert fs.open_hours["fabric_link"] == pytest.approx(3.0)
    assert fs.open_hours["gpu_thermal"] == pytest.approx(1.0)
    assert fs.hazard("fabric_link") == pytest.approx((1 + 1) / (24 + 3.0))
    assert fs.hazard("gpu_thermal") == pytest.approx(1 / (24 + 1.0))


def test_rates_are_the_gamma_posterior_from_the_prior(tmp_path):
    store, now = journal(tmp_path, nodes=10, days=365.25)  # ten node-years
    for i in range(4):
        incident(store, f"n0{i}/gpu0", "gpu_bus", T0 + (10 + i) * DAY, failed=T0 + (10 + i) * DAY)
    prior = Prior(per_node_year=2.0, failures=1.0)
    fs = measure(store, now, window_s=400 * DAY, prior=prior)
    exposure = prior.node_hours + 10 * YEAR_H
    assert fs.rate("unforeseen") == pytest.approx(5 / exposure)
    assert fs.rate("unforeseen", 0.9) == pytest.approx(stats.gamma.ppf(0.9, 5) / exposure)
    assert fs.rate("all") == fs.rate("unforeseen")  # nothing was foreseen
    share, lo, hi = fs.coverage()
    assert share == 0.0 and lo == 0.0 and 0 < hi < 0.5
    # the summary lists the latest failures, newest first, not the window's thousands
    summary = fs.summary(latest=2)
    assert summary["hard_failures"] == 4 and summary["unwarned"] == 4
    assert [f["entity"] for f in summary["latest_failures"]] == ["n03/gpu0", "n02/gpu0"]
    assert len(fs.summary()["latest_failures"]) == 4


def test_few_failures_give_a_wide_interval(tmp_path):
    """A failure-free month of ten nodes against a failure-free year of a hundred: the short record's upper bound
    stays above the fleet's published rate, the long record's comes down by more than ten times."""
    store, now = journal(tmp_path / "small", nodes=10, days=30)
    small = measure(store, now, prior=Prior(1.4, 1.0))
    store, now = journal(tmp_path / "big", nodes=100, days=365)
    big = measure(store, now, window_s=400 * DAY, prior=Prior(1.4, 1.0))
    assert big.rate("unforeseen", 0.9) < small.rate("unforeseen", 0.9) / 10
    assert small.rate("unforeseen", 0.9) > 1.4 / YEAR_H  # a quiet month of ten nodes: still above the prior's mean


def test_a_drain_for_an_incident_already_closed_does_not_make_a_later_failure_foreseen(tmp_path):
    store, now = journal(tmp_path)
    old = incident(store, "n01/gpu1", "gpu_memory", T0 + DAY, closed=T0 + DAY + 7200)
    step(store, old, "drain", T0 + DAY + 600)  # repaired and back in service two hours later
    incident(store, "n01/gpu5", "gpu_bus", T0 + DAY + 6 * 3600, failed=T0 + DAY + 6 * 3600)
    fs = measure(store, now)
    failed = [f for f in fs.failures if f.entity == "n01/gpu5"]
    assert failed and not failed[0].foreseen


def test_one_failure_seen_as_a_gpus_and_its_nodes_incident_counts_once(tmp_path):
    store, now = journal(tmp_path)
    incident(store, "n02/gpu0", "gpu_bus", T0 + DAY, failed=T0 + DAY)
    incident(store, "n02", "gpu_bus", T0 + DAY + 60, failed=T0 + DAY + 60)
    incident(store, "n02/gpu1", "gpu_bus", T0 + 3 * DAY, failed=T0 + 3 * DAY)  # another, later
    assert len(measure(store, now).failures) == 2


def test_telemetry_and_rack_incidents_are_no_hard_failures(tmp_path):
    store, now = journal(tmp_path)
    incident(store, "n02", "telemetry", T0 + DAY, failed=T0 + DAY)
    inc = Incident("inc-rack", "r0|gpu_thermal", "r0", "rack", "gpu_thermal", State.FAILED, T0 + DAY, T0 + DAY, "r0",
                   [], None, "", None, T0 + DAY)
    store.record_tick([], [inc], now=T0 + DAY)
    assert measure(store, now).failures == []
