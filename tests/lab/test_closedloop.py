"""The closed loop: simulated hardware, the real pipeline and playbook engine (journal in SQLite), the
simulated Slurm; GPU-hours per policy."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.closedloop import LoopOptions, LoopResult, run
from lab.closedloop.outcome import carries_fault, false_drain_details, fault_outcomes, score_actions
from lab.closedloop.report import checkpoint_table, fault_table, per_seed_table, table
from lab.sim.simulator import Simulator
from lab.sim.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "fixtures" / "faults"
SCENARIO = {
    "name": "loop", "seed": 3, "topology": {"accelerators": 128}, "duration": "8h", "resolution": "30s",
    "profile": "full", "jobs": {"nodes_per_job": [2, 4], "duration": ["3h", "6h"], "gap": ["1m", "5m"],
                                "partial_share": 0.0},
    "faults": [
        {"entity": "sn01-b03/gpu2", "fault": "hbm_degradation", "template": "a", "onset": "1h", "failure": "5h"},
        {"entity": "sn01-b07/gpu5", "fault": "gpu_off_bus", "template": "a", "onset": "1h30m", "failure": "6h"},
        {"entity": "sn01-b11/mlx5_1:1", "fault": "link_degradation", "template": "a", "onset": "1h",
         "failure": "6h"},
        {"entity": "sn01-b13/gpu4", "fault": "fail_slow", "template": "b", "onset": "1h", "failure": "6h"},
        {"entity": "sn01-b05/gpu1", "fault": "benign_warm_slot", "template": "a", "onset": "0s", "failure": "8h"},
        {"entity": "r01", "fault": "benign_coolant_swing", "template": "b", "onset": "2h"},
        {"entity": "sn01-b09", "fault": "benign_exporter_gap", "template": "a", "onset": "3h"},
    ],
}


# The repair loop's tests run raswarden's detection every 2 minutes (the world still every 30 s): a run takes
# half the time, and the loop is the same at either tick (test_a_longer_tick_reads_the_same_world_...; the technician
# test's orders, validations and node-hours were equal at both, 2026-11-27).
TICK = 120.0


def scenario() -> Scenario:
    return Scenario.from_dict(copy.deepcopy(SCENARIO))


def simulator() -> Simulator:
    """The scenario, with failure times off the millisecond grid its labels are rounded to (as drawn
    windows are): the loop must match a failure to its fault exactly, not through the rounded label."""
    sim = Simulator(scenario(), LIBRARY)
    for p in sim.placed:
        if not p.inst.template.benign:
            p.inst.failure -= 0.0004
    return sim


@pytest.fixture(scope="module")
def results():
    return {p: run(simulator(), p) for p in ("none", "reactive", "full")}


def test_without_raswarden_failures_cost_work_and_crash_loops(results):
    r = results["none"]
    assert r.drains_true == r.drains_false == 0 and r.symptom_to_action_s == []
    assert r.gpu_hours["lost_to_failures"] > 0
    assert r.gpu_hours["restarts"] > results["reactive"].gpu_hours["restarts"]  # jobs re-placed on broken nodes


def test_reactive_drains_failed_nodes_only_after_they_fail(results):
    r = results["reactive"]
    assert r.drains_true == 2 and r.drains_false == 0  # the two broken nodes; the link's node keeps its rails
    assert r.gpu_hours["net_loss"] < results["none"].gpu_hours["net_loss"]


def test_full_acts_before_the_failures_and_loses_less(results):
    full, reactive = results["full"], results["reactive"]
    assert full.acted_before_failure >= 2 and full.drains_false == 0
    by_class = full.acted_by_class  # per class: [acted on before failure, hard faults]
    assert sum(a for a, _ in by_class.values()) == full.acted_before_failure
    assert sum(n for _, n in by_class.values()) == full.hard_faults
    assert full.gpu_hours["lost_to_failures"] < reactive.gpu_hours["lost_to_failures"]
    assert full.gpu_hours["net_loss"] < reactive.gpu_hours["net_loss"]
    assert full.gpu_hours["effective_training_ratio"] > reactive.gpu_hours["effective_training_ratio"]


def test_a_fault_repaired_after_a_drain_ahead_of_it_never_fails(results):
    assert results["none"].failed == results["reactive"].failed == results["none"].hard_faults == 3
    full = results["full"]
    assert full.failed == full.hard_faults - full.acted_before_failure, full.as_dict()


def test_actions_count_for_a_fault_only_from_its_onset_and_acting_needs_the_drain():
    faults = [
        {"entity": "n1/gpu0", "fault": "hbm_degradation", "onset": 100.0, "failure": 500.0},
        {"entity": "n2/gpu3", "fault": "hbm_degradation", "onset": 300.0, "failure": 900.0},
        {"entity": "n3/mlx5_0:1", "fault": "link_degradation", "onset": 100.0, "failure": 400.0},
        {"entity": "n4/gpu1", "fault": "fail_slow", "onset": 100.0, "failure": None},
    ]
    # n1: checkpoint at 150, drain at 160. n2: a job spanning n1 and n2 was signalled at 150 (n1's fault), n2
    # itself drained at 350. n3: only its job checkpointed (a checkpoint leaves the job on the hardware).
    # n4: drained at 200 (no failure to beat).
    actions = {"n1": [150.0, 160.0], "n2": [150.0, 350.0], "n3": [120.0], "n4": [200.0]}
    drains = {"n1": [160.0], "n2": [350.0], "n4": [200.0]}
    s2a, before, by_class = score_actions(faults, actions, drains)
    assert sorted(s2a) == [20.0, 50.0, 50.0, 100.0]  # n2's counts from 350, not from the signal before its onset
    assert before == 2
    assert by_class == {"hbm_degradation": [2, 2], "link_degradation": [0, 1]}
    # a drain after the failure is no action before it
    assert score_actions(faults[:1], {"n1": [600.0]}, {"n1": [600.0]})[1:] == (0, {"hbm_degradation": [0, 1]})


def test_a_drain_is_true_only_while_the_node_carries_its_fault():
    present = [("n1", 1000.0, 90_000.0), ("n2", 500.0, None)]
    assert carries_fault(present, "n1", 1000.0) and carries_fault(present, "n1", 90_000.0)
    assert not carries_fault(present, "n1", 999.0)  # before the onset
    assert not carries_fault(present, "n1", 90_001.0)  # after the repair: the part is new
    assert carries_fault(present, "n2", 10**9) and not carries_fault(present, "n3", 2000.0)


def test_a_fail_slow_gpu_holds_back_its_job_until_it_is_drained(results):
    none, reactive, full = (results[p].gpu_hours["slowed"] for p in ("none", "reactive", "full"))
    assert none > 0 and reactive == pytest.approx(none, rel=0.2)  # nobody acts on a GPU that never fails
    assert full < none / 2


def test_gpu_hours_add_up(results):
    for r in results.values():
        g = r.gpu_hours
        assert g["productive"] + g["lost_to_failures"] + g["checkpoints"] + g["restarts"] + g["slowed"] == \
            pytest.approx(g["allocated"], rel=0.02), r.policy


def test_table_puts_policies_side_by_side(results):
    text = table(list(results.values()))
    assert text.splitlines()[0] == "| 1 run(s) | none | reactive | full |"
    assert "| full's net loss / reactive's |" in text


def test_per_seed_table_gives_each_seeds_losses_and_full_over_reactive(results):
    rows = per_seed_table(list(results.values())).splitlines()
    assert len(rows) == 3  # header, rule, the one seed
    cells = [c.strip() for c in rows[2].strip("|").split("|")]
    none, reactive, full = (results[p] for p in ("none", "reactive", "full"))
    assert cells[1] == f"{none.hard_faults} ({none.failed})"
    assert cells[2:5] == [f"{r.gpu_hours['net_loss']:.0f}" for r in (none, reactive, full)]
    assert float(cells[5]) == pytest.approx(full.gpu_hours["net_loss"] / reactive.gpu_hours["net_loss"], abs=0.005)
    assert cells[6].startswith(f"{full.drains_true} / {full.drains_false}, {full.acted_before_failure} / ")


def test_fault_outcomes_say_what_happened_to_each_fault_and_what_it_cost(results):
    for r in results.values():
        assert sum(o["failed"] for o in r.fault_outcomes) == r.failed, r.policy
        assert {o["fault"] for o in r.fault_outcomes} == {"hbm_degradation", "gpu_off_bus", "link_degradation",
                                                          "fail_slow"}  # the benign ones are left out
    none = results["none"]
    hard = [o for o in none.fault_outcomes if o["failure_h"] is not None]
    assert all(o["failed"] and not o["repaired_early"] and o["first_action_h"] is None for o in hard)
    assert all(o["lost_gpu_h"] > 0 for o in hard if o["job"])
    # the failures' own cost; jobs placed on a broken node afterwards crash too, counted beside it
    assert 0 < sum(o["lost_gpu_h"] for o in hard) <= none.gpu_hours["lost_to_failures"] + 0.01
    full = {o["fault"]: o for o in results["full"].fault_outcomes}
    off_bus = full["gpu_off_bus"]
    assert off_bus["repaired_early"] and not off_bus["failed"] and "lost_gpu_h" not in off_bus
    assert 0 <= off_bus["first_drain_h"] < off_bus["failure_h"] - off_bus["onset_h"]
    link = full["link_degradation"]  # notify-only by default: it fails, on a node nobody drained
    assert link["failed"] and link["drained"] is False and link["first_drain_h"] is None


def test_a_faults_outcome_counts_only_actions_from_its_onset_to_its_repair():
    from types import SimpleNamespace

    hbm = SimpleNamespace(template=SimpleNamespace(fault="hbm_degradation", template="a", fails=True),
                          entity="n1/gpu0", onset=3600.0, failure=4 * 3600.0, until=3 * 3600.0)
    [o] = fault_outcomes([hbm], {}, {0}, {"n1": [0.0, 7200.0, 90000.0]}, {"n1": [0.0, 7200.0, 90000.0]}, 0.0)
    assert o["first_action_h"] == o["first_drain_h"] == 1.0  # not the drain before onset, nor the one after repair
    assert o["repaired_early"] and not o["failed"] and o["onset_h"] == 1.0 and o["failure_h"] == 4.0
    [later] = fault_outcomes([hbm], {}, {0}, {}, {"n1": [90000.0]}, 0.0)  # began on a node already out
    assert later["first_drain_h"] is None


def test_a_false_drain_names_its_incident_and_the_nodes_last_fault():
    from types import SimpleNamespace

    hbm = SimpleNamespace(template=SimpleNamespace(fault="hbm_degradation"), entity="n1/gpu0", onset=3600.0,
                          until=7200.0)
    inc = SimpleNamespace(id="inc-7", entity="n1/gpu0", category="memory", severity="warning",
                          evidence=["dbe rising", "x" * 500, "third", "fourth"])
    false = [("n1", 9000.0, "raswarden: inc-7 memory"), ("n2", 3600.0, "raswarden: inc-gone memory"),
             ("n1", 1800.0, "maintenance")]
    one, gone, other = false_drain_details(false, [hbm], {"inc-7": inc}, 0.0)
    assert one["node"] == "n1" and one["at_h"] == 2.5 and one["reason"] == "raswarden: inc-7 memory"
    assert one["incident"]["category"] == "memory" and len(one["incident"]["evidence"]) == 3
    assert len(one["incident"]["evidence"][1]) == 200  # evidence is cut, not dropped
    assert one["last_fault"] == {"fault": "hbm_degradation", "entity": "n1/gpu0", "repaired_h_before": 0.5}
    assert "incident" not in gone and "last_fault" not in gone  # a closed store or a node that never had a fault
    assert "incident" not in other and "last_fault" not in other  # the fault began after this drain


def test_every_false_drain_is_listed(results):
    for r in results.values():
        assert len(r.false_drains) == r.drains_false


def test_a_result_reads_back_as_it_was_written(results):
    for r in results.values():
        back = LoopResult.from_dict(json.loads(json.dumps(r.as_dict())))
        assert back.as_dict() == r.as_dict()


def test_fault_table_gives_each_faults_fate_under_each_policy(results):
    rows = fault_table(list(results.values())).splitlines()
    assert rows[0] == "| fault | entity | onset (h) | window (h) | none | reactive | full |"
    off_bus = next([c.strip() for c in r.strip("|").split("|")] for r in rows if "gpu_off_bus" in r)
    assert off_bus[4].startswith("failed, ") and off_bus[4].endswith("GPU-h")
    assert off_bus[6].startswith("repaired ahead (drained +")


def test_comparison_table_pairs_the_seeds_both_sets_have(results):
    """Two sets of runs of one policy (with and without validation, in issue 26): means over the seeds both have,
    and the mean of the per-seed differences; a seed only one set has is left out."""
    from dataclasses import replace

    from lab.closedloop.report import comparison_table

    full = results["full"]
    worse = replace(full, gpu_hours=dict(full.gpu_hours, net_loss=full.gpu_hours["net_loss"] + 10.0),
                    node_hours=dict(full.node_hours, broken_in_service=full.node_hours["broken_in_service"] + 3.0))
    lone = replace(full, seed=full.seed + 1)
    rows = comparison_table([full, lone], [worse], ("validated", "returned directly")).splitlines()
    assert rows[0] == "| 1 seed(s) | validated | returned directly | difference |"
    cells = {r.split("|")[1].strip(): [c.strip() for c in r.strip("|").split("|")[1:]] for r in rows[2:]}
    assert cells["net loss (GPU-h)"] == [f"{full.gpu_hours['net_loss']:.1f}",
                                         f"{full.gpu_hours['net_loss'] + 10.0:.1f}", "+10.0"]
    assert cells["node-hours of broken hardware in service"][2] == "+3.0"
    assert cells["botched repairs"] == ["-", "-", "-"]  # runs without the repair loop's figures


def test_a_longer_tick_reads_the_same_world_and_acts_on_the_same_faults(results):
    """raswarden ticking every 2 minutes on 30 s samples: the world still moves every 30 s (without raswarden the
    run is the same to the GPU-second), and raswarden drains the same nodes ahead of the same failures."""
    slow = {p: run(simulator(), p, LoopOptions(tick_s=120.0)) for p in ("none", "full")}
    assert slow["none"].as_dict() | {"wall_s": 0} == results["none"].as_dict() | {"wall_s": 0}
    full, ticked = results["full"], slow["full"]
    assert ticked.ticks == full.ticks
    assert (ticked.drains_true, ticked.drains_false, ticked.acted_before_failure) == \
        (full.drains_true, full.drains_false, full.acted_before_failure)
    assert ticked.gpu_hours["net_loss"] == pytest.approx(full.gpu_hours["net_loss"], rel=0.05)


def test_a_tick_must_be_a_multiple_of_the_worlds_step():
    assert LoopOptions(tick_s=120.0).ticks_every() == 4 and LoopOptions().ticks_every() == 1
    with pytest.raises(ValueError, match="multiple"):
        LoopOptions(tick_s=45.0).ticks_every()


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="unknown policy"):
        run(Simulator(scenario(), LIBRARY), "eager", LoopOptions())


def test_cli_closed_loop(tmp_path):
    sc = tmp_path / "loop.yaml"
    import yaml

    small = copy.deepcopy(SCENARIO) | {"duration": "3h", "faults": SCENARIO["faults"][1:2]}
    small["faults"][0] = small["faults"][0] | {"onset": "30m", "failure": "2h"}
    sc.write_text(yaml.safe_dump(small))
    out = tmp_path / "loop.json"
    p = subprocess.run([sys.executable, "-m", "daemon", "simulate", str(sc), "--closed-loop", "--policy",
                        "none,reactive", "--json", str(out), "--tick", "60"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "| 1 run(s) | none | reactive |" in p.stdout
    data = json.loads(out.read_text())
    assert [r["policy"] for r in data["results"]] == ["none", "reactive"]
    assert data["results"][1]["drains_true"] == 1 and data["results"][1]["ticks"] == 360  # the world's 30 s steps
    odd = subprocess.run([sys.executable, "-m", "daemon", "simulate", str(sc), "--closed-loop", "--tick", "45"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert odd.returncode == 2 and "multiple" in odd.stderr
    bad = subprocess.run([sys.executable, "-m", "daemon", "simulate", str(sc), "--closed-loop", "--policy", "eager"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and "--policy takes" in bad.stderr
    for wrong, says in ((["--checkpoint-policy", "often"], "--checkpoint-policy takes"),
                        (["--policy", "none", "--checkpoint-policy", "advised"], "needs raswarden")):
        bad = subprocess.run([sys.executable, "-m", "daemon", "simulate", str(sc), "--closed-loop", *wrong],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert bad.returncode == 2 and says in bad.stderr, bad.stderr


def test_cli_closed_loop_compares_checkpoint_policies(tmp_path):
    """``--checkpoint-policy daly,advised``: each on the same scenario, and the checkpoint table beside them."""
    import yaml

    sc = tmp_path / "loop.yaml"
    sc.write_text(yaml.safe_dump(copy.deepcopy(SCENARIO) | {"duration": "4h"}))
    out = tmp_path / "loop.json"
    p = subprocess.run([sys.executable, "-m", "daemon", "simulate", str(sc), "--closed-loop", "--policy", "full",
                        "--checkpoint-policy", "daly,advised", "--tick", "120", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "full, daly checkpoints: net loss" in p.stdout and "full, advised checkpoints: net loss" in p.stdout
    assert "| 1 seed(s) | daly | advised |" in p.stdout
    data = json.loads(out.read_text())
    assert [r["checkpoint_policy"] for r in data["results"]] == ["daly", "advised"]
    assert data["results"][0]["checkpoints"]["periodic"] > data["results"][1]["checkpoints"]["periodic"]


def test_a_repaired_node_comes_back_and_is_judged_on_its_new_parts():
    """With a 30-minute repair, the nodes drained ahead of their failures are back within the scenario: the
    technician returns them and raswarden, told their parts are new, does not drain them again."""
    r = run(simulator(), "full", LoopOptions(repair_s=1800.0, tick_s=TICK))
    assert r.drains_false == 0 and r.drains_true >= 2, r.as_dict()
    assert r.gpu_hours["idle_drained"] < 8.0, r.gpu_hours


def test_the_technician_works_from_repair_orders_and_validation_catches_a_botched_repair(monkeypatch):
    """Issue 26's loop: with a 30-minute repair the nodes drained ahead of their failures get repair orders; the
    technician takes each after 10 minutes and marks it done when the repair is over; raswarden's validation job
    returns the node (every order closed, its time to repair measured). When every repair is botched, every
    validation fails and sends the node back: no order closes, no node returns to jobs, and those drains are not
    counted as false detections. Returned without validation, the botched nodes go back to service broken. Only the
    replaced parts are forgotten (their new records start afresh), never the rest of their nodes."""
    from daemon.judgement.pipeline import Pipeline

    forgotten: list[str] = []
    forget = Pipeline.forget
    monkeypatch.setattr(Pipeline, "forget", lambda self, scope: (forgotten.append(scope), forget(self, scope))[1])
    good = run(simulator(), "full", LoopOptions(repair_s=1800.0, repair_orders=True, technician_s=600.0, tick_s=TICK))
    rp = good.repairs
    assert rp["orders"] >= 2 and rp["closed"] == rp["orders"] and rp["validation_catches"] == 0, rp
    assert len(forgotten) == rp["orders"] and all("/" in scope for scope in forgotten), forgotten  # one GPU each
    # back in service when the repair is over (30 minutes after the drain) and its validation job (10 minutes) read:
    # a pass reads the job the step it ends, at any detection tick
    assert rp["validations"] >= 1 and 0.5 <= rp["mttr_h"] <= (1800 + 600 + 2 * 30) / 3600 and good.drains_false == 0, rp
    bad = run(simulator(), "full", LoopOptions(repair_s=1800.0, repair_orders=True, technician_s=600.0,
                                               bad_repair_share=1.0, tick_s=TICK))
    rp = bad.repairs
    assert rp["orders"] == good.repairs["orders"] and rp["closed"] == 0 and rp["validation_catches"] >= 2, rp
    assert rp["returned_broken"] == 0 and bad.drains_false == 0, (rp, bad.false_drains[:2])
    assert bad.gpu_hours["productive"] < good.gpu_hours["productive"]  # the nodes stay out
    direct = run(simulator(), "full", LoopOptions(repair_s=1800.0, bad_repair_share=1.0, tick_s=TICK))
    assert direct.repairs["orders"] == 0 and direct.repairs["returned_broken"] == direct.repairs["botched"] >= 2
    # node-hours: validation keeps the botched nodes out of service (more out, none broken in service for it);
    # returned directly, they are broken hardware in service until an operator drains them (or the scenario ends)
    hours = {name: r.node_hours for name, r in (("good", good), ("bad", bad), ("direct", direct))}
    assert hours["bad"]["out_of_service"] > 4 * hours["good"]["out_of_service"] > 0, hours
    assert hours["direct"]["broken_in_service"] >= 1.0 and hours["bad"]["broken_in_service"] == 0.0, hours
    assert good.node_hours["broken_in_service"] == 0.0, hours


def test_jobs_follow_raswardens_advice_and_checkpoint_often_only_while_at_risk():
    """Checkpoint policies (LoopOptions.checkpoint_policy): under ``daly`` every job checkpoints at Daly's optimum
    for its size at the scenario's failure rate; under ``advised`` the opted-in jobs poll raswarden's advice, so
    they checkpoint far more rarely on healthy-looking nodes, and the job over the degrading port (which the built-in
    playbook only notifies about) was checkpointing more often than that when its port failed."""
    daly = run(simulator(), "full", LoopOptions(tick_s=TICK, checkpoint_policy="daly"))
    advised = run(simulator(), "full", LoopOptions(tick_s=TICK, checkpoint_policy="advised"))
    link = next(o for o in daly.fault_outcomes if o["fault"] == "link_degradation")
    at_risk = next(o for o in advised.fault_outcomes if o["fault"] == "link_degradation")
    assert link["failed"] and at_risk["failed"] and at_risk["job_opted_in"]
    assert at_risk["job_interval_h"] < link["job_interval_h"]  # shortened while its port was sub-healthy
    assert advised.checkpoints["periodic"] < daly.checkpoints["periodic"] / 2
    assert daly.checkpoints["median_interval_h"] != 1.0  # not the fixed hour
    report = checkpoint_table({"daly": [daly], "advised": [advised]})
    assert report.startswith("| 1 seed(s) | daly | advised |")
    ratio = lambda r: r.gpu_hours["productive"] / r.gpu_hours["allocated"]  # noqa: E731
    assert f"| effective training time ratio | {ratio(daly):.4f} | {ratio(advised):.4f} |" in report
    assert f"| ratio, advised - daly (higher in) | {ratio(advised) - ratio(daly):+.4f} (" in report
    assert f"| half the interval the job used then (h) | {link['job_interval_h'] / 2:.2f} (1) |" in report
    assert "| work lost less half the interval, per failure (h; 95 % interval of the mean) | " in report
    with pytest.raises(ValueError, match="checkpoint policy"):
        LoopOptions(checkpoint_policy="often")
    with pytest.raises(ValueError, match="needs raswarden"):
        run(simulator(), "none", LoopOptions(checkpoint_policy="advised"))


def test_work_lost_against_the_interval_is_a_mean_with_its_t_interval():
    """Three failures that lost 1, 2 and 3 hours more than half their intervals: mean 2, standard deviation 1,
    Student's t at 97.5 % with two degrees of freedom 4.303, so 2 +/- 4.303 / sqrt(3)."""
    from lab.closedloop.report import _mean_with_interval

    assert _mean_with_interval([1.0, 2.0, 3.0]) == "+2.00 (-0.48 to +4.48; 3)"
    assert _mean_with_interval([-0.5]) == "-0.50 (1)"
    assert _mean_with_interval([]) == "-"


def test_a_scenario_without_warning_keeps_its_faults_and_their_failure_times():
    """``sample.sudden_share``: the same faults, entities and failure times; about that share of the hard ones show
    their first symptom a minute before they fail."""
    library = ROOT / "lab" / "library"
    plain = Simulator(Scenario.load(library / "scenarios" / "scalex640-30d.yaml"), library / "faults").labels()
    sudden = Simulator(Scenario.load(library / "scenarios" / "scalex640-30d-sudden.yaml"), library / "faults").labels()
    key = lambda lb: (lb["entity"], lb["fault"], lb["failure"])  # noqa: E731
    assert sorted(map(key, plain), key=str) == sorted(map(key, sudden), key=str)
    onset = {key(lb): lb["onset"] for lb in sudden}
    hard = [lb for lb in plain if lb["failure"] is not None and not lb["fault"].startswith("benign")
            and lb["failure"] - lb["onset"] > 120]
    moved = [lb for lb in hard if onset[key(lb)] != lb["onset"]]
    assert all(lb["failure"] - onset[key(lb)] == pytest.approx(60.0, abs=0.01) for lb in moved)
    assert 0.3 < len(moved) / len(hard) < 0.7


def test_daly_knows_the_fleets_long_run_rate_and_oracle_the_seeds_own():
    """The two fixed baselines: ``daly`` at the scenario's expected hard-failure rate (its faults a node-year times
    the failing share of its class mix: what fleet statistics give a job), ``oracle`` at the seed's own count."""
    from lab.closedloop.world import expected_failure_rate, realized_failure_rate

    library = ROOT / "lab" / "library"
    sc = Scenario.load(library / "scenarios" / "scalex640-30d.yaml")
    month = 80 * 30 * 86400.0  # node-seconds
    expected = []
    for seed in (2001, 2002):
        sc.seed = seed
        sim = Simulator(sc, library / "faults")
        hard = sum(1 for p in sim.placed if p.inst.template.fails and not p.inst.template.benign)
        assert realized_failure_rate(sim) * month == pytest.approx(hard)
        expected.append(expected_failure_rate(sim) * month)
    # 1.4 faults a node-year, all classes but fail-slow's 9 of 215 failing: 8.8 hard failures a month of 80 nodes
    assert expected[0] == expected[1] == pytest.approx(1.4 * 80 * 30 / 365 * 206 / 215)
    listed = simulator()  # listed faults: their own templates (fail-slow's does not fail)
    assert expected_failure_rate(listed) == realized_failure_rate(listed) == pytest.approx(
        3 / (listed.topo.n_nodes * listed.scenario.duration))
