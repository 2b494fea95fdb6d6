"""A cluster of both schedulers (playbooks/mixed.py): half the Slurm lab's nodes, half the kube-apiserver's, one
topology saying whose is whose, one budget across both."""

from __future__ import annotations

import pytest

from playbooks.scheduler import DRAIN, SchedulerError


def test_one_budget_holds_across_slurm_and_kubernetes_nodes(slurm, kube_lab, tmp_path):
    from kubernetes import client

    from daemon.config import parse
    from daemon.operations.remediation import scheduler_from_config
    from daemon.store import Store
    from daemon.store.journal import StoreJournal
    from playbooks.engine import Engine, IncidentRef
    from playbooks.guards import Guards
    from playbooks.mixed import MixedScheduler
    from playbooks.model import load

    for name in ("km-1", "km-2"):
        kube_lab.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name)))
    topology = tmp_path / "topology.yaml"
    topology.write_text("racks:\n"
                        "  - {name: r01, scheduler: slurm, nodes: [node1, node2, node3, node4]}\n"
                        "  - {name: r02, scheduler: kubernetes, nodes: [km-1, km-2]}\n")
    cfg = parse({"service": {"topology": str(topology)}, "scheduler": {
        "type": "mixed", "slurm": {"slurm_conf": slurm.conf},
        "kubernetes": {"kubeconfig": str(kube_lab.kubeconfig)}}})
    sched = scheduler_from_config(cfg)
    assert isinstance(sched, MixedScheduler)
    state = sched.snapshot()
    assert {"node1", "node4", "km-1", "km-2"} <= set(state.nodes)
    # the lab's API server keeps the nodes other tests left cordoned or not ready: they count too
    before = sum(not i.available for i in state.nodes.values())
    budget = before + 2

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    journal = StoreJournal(store)
    eng = Engine(sched, journal, load(), Guards(max_drained_nodes=budget, max_cluster_fraction=1.0,
                                                max_rack_fraction=1.0))
    first = eng.submit(IncidentRef("inc-m1", "node1/gpu0", "accelerator", "failed", "gpu_bus"), sched.snapshot())
    second = eng.submit(IncidentRef("inc-m2", "km-1/gpu0", "accelerator", "failed", "gpu_bus"), sched.snapshot())
    eng.run()
    assert journal.get(first.key).status == "done" and journal.get(second.key).status == "done"
    assert slurm.node_state("node1").startswith("drain")  # each drained by its own scheduler
    assert kube_lab.core.read_node("km-1").spec.unschedulable
    state = sched.snapshot()
    assert DRAIN in state.nodes["node1"].states and DRAIN in state.nodes["km-1"].states

    # the budget of two more counts both: a third drain is held, whichever scheduler has the node
    for incident, node in (("inc-m3", "km-2"), ("inc-m4", "node2")):
        held = eng.submit(IncidentRef(incident, f"{node}/gpu0", "accelerator", "failed", "gpu_bus"),
                          sched.snapshot())
        eng.run()
        action = journal.get(held.key)
        assert action.status == "held", [(s.type, s.status, s.detail) for s in action.steps]
        assert f"{before + 3} nodes would be unavailable (budget {budget})" in next(
            s.detail["held"] for s in action.steps if "held" in s.detail)
    assert not kube_lab.core.read_node("km-2").spec.unschedulable
    assert not slurm.node_state("node2").startswith("drain")

    sched.resume("km-1")
    sched.resume("node1")
    assert not kube_lab.core.read_node("km-1").spec.unschedulable
    with pytest.raises(SchedulerError, match="no scheduler of this cluster knows it"):
        sched.drain("nowhere-9", "raswarden: inc-x host")
    store.close()


def test_the_topology_decides_a_node_both_schedulers_list_and_actions_go_to_its_owner():
    """A host that is both a slurmd and a kubelet: the topology says whose it is; jobs go to the part that lists
    them (the simulated cluster stands in for both parts here: what is tested is the routing)."""
    from lab.sim.cluster import SimJob, SimScheduler
    from playbooks.mixed import MixedScheduler

    slurm_part, k8s_part = SimScheduler(["a1", "both"]), SimScheduler(["b1", "both"])
    k8s_part.submit(SimJob("ns/Job/x", 1, work_s=3600.0, opt_in=True))
    k8s_part.step(60.0)
    mixed = MixedScheduler({"slurm": slurm_part, "kubernetes": k8s_part}, owners={"both": "kubernetes"})
    state = mixed.snapshot()
    assert set(state.nodes) == {"a1", "b1", "both"} and "ns/Job/x" in state.jobs
    mixed.drain("both", "raswarden: inc-1 host")
    assert [x[2] for x in k8s_part.log if x[1] == "drain"] == ["both raswarden: inc-1 host"]
    assert not [x for x in slurm_part.log if x[1] == "drain"]
    mixed.requeue("ns/Job/x")
    assert any(x[1] == "requeue" for x in k8s_part.log)
    with pytest.raises(ValueError, match="names schedulers"):
        MixedScheduler({"slurm": slurm_part}, owners={"a1": "kubernetes"})


def test_the_config_and_topology_name_the_parts_or_say_what_is_wrong(tmp_path):
    from daemon.config import ConfigError, parse
    from daemon.topology import Topology, TopologyError

    with pytest.raises(ConfigError, match=r"needs both \[scheduler.slurm\] and \[scheduler.kubernetes\]"):
        parse({"scheduler": {"type": "mixed", "slurm": {"slurm_conf": "/etc/slurm/slurm.conf"}}})
    with pytest.raises(ConfigError, match="scheduler.kubernetes"):
        parse({"scheduler": {"type": "mixed", "slurm": {}, "kubernetes": {"kubecfg": "x"}}})
    topo = Topology.from_dict({"racks": [{"name": "r1", "scheduler": "slurm", "nodes": [
        "n1", {"name": "n2", "scheduler": "kubernetes"}]}]})
    assert topo.node_scheduler == {"n1": "slurm", "n2": "kubernetes"}
    with pytest.raises(TopologyError, match="scheduler: 'pbs' is not one of slurm, kubernetes"):
        Topology.from_dict({"racks": [{"name": "r1", "scheduler": "pbs", "nodes": ["n1"]}]})
