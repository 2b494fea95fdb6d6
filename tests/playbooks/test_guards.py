"""The guards on their own: each answers with its reason, or None when it lets the step go."""

from playbooks.guards import (Guards, breaker_trip, incident_in_reason, over_budget, owned_by_others, rate_limit,
                              repeat_offender, strictest)
from playbooks.model import parse
from playbooks.scheduler import ClusterState, NodeInfo


def cluster(down: dict[str, tuple[set[str], str, str]], n: int = 40) -> ClusterState:
    nodes = {f"n{i:02d}": NodeInfo(f"n{i:02d}", frozenset({"idle"})) for i in range(n)}
    for name, (states, reason, by) in down.items():
        nodes[name] = NodeInfo(name, frozenset(states), reason, by)
    return ClusterState(0.0, nodes)


def test_others_nodes_are_left_alone_but_raswardens_and_merely_down_ones_are_not():
    state = cluster({"n01": ({"drain"}, "bad dimm", "alice"), "n02": ({"drain"}, "raswarden: inc-7 gpu_memory", ""),
                     "n03": ({"down"}, "Not responding", "slurm"), "n04": ({"maint"}, "", "")})
    assert "reason 'bad dimm' by alice" in owned_by_others("n01", state)
    assert owned_by_others("n02", state) is None and owned_by_others("n03", state) is None
    assert owned_by_others("n04", state) is not None and owned_by_others("n05", state) is None
    assert incident_in_reason("raswarden: inc-7 gpu_memory") == "inc-7" and incident_in_reason("bad dimm") is None


def test_the_blast_radius_counts_every_unavailable_node_in_the_cluster_and_the_rack():
    g = Guards(max_drained_nodes=10, max_cluster_fraction=0.05, max_rack_fraction=0.25)
    rack = {f"n{i:02d}": "r1" if i < 8 else "r2" for i in range(40)}.get
    state = cluster({"n01": ({"down"}, "", "")})
    assert over_budget(g, "n02", state, rack) is None  # 2 of 40 is 5 % and 2 of the rack's 8 is 25 %: not over
    state = cluster({"n01": ({"down"}, "", ""), "n02": ({"drain"}, "x", "y")})
    assert over_budget(g, "n03", state, rack) == "3 of 40 nodes would be unavailable (budget 5%)"
    assert over_budget(Guards(max_cluster_fraction=1.0), "n03", state, rack) == \
        "3 of 8 nodes of rack r1 would be unavailable (budget 25%)"
    assert over_budget(Guards(max_drained_nodes=2, max_cluster_fraction=1.0), "n20", state, rack) == \
        "3 nodes would be unavailable (budget 2)"


def test_the_breaker_rate_limits_modes_and_repeat_offenders():
    g = Guards(breaker_incidents=20, breaker_window_s=600.0, breaker_stale_fraction=0.2)
    assert breaker_trip(g, 19, 100, 19) is None
    assert breaker_trip(g, 20, 100, 0) == "20 new incidents within 600 s (limit 20)"
    assert breaker_trip(g, 0, 100, 20) == "telemetry gone from 20 of 100 nodes"
    assert strictest("act", "dry-run") == "dry-run" and strictest("shadow", "act", "dry-run") == "shadow"
    pb = parse({"name": "p", "match": {"states": ["failed"]}, "guards": {"rate_limit": {"max": 2, "per": "1h"}},
                "steps": [{"step": "drain"}]})
    assert rate_limit(pb, 1) is None and rate_limit(pb, 2) == "rate limit: 2 actions of p within 3600 s"
    assert repeat_offender(Guards(repeat_offender=3), 2) is None
    assert repeat_offender(Guards(repeat_offender=3), 3) == \
        "repeat offender: drained 3 times within 7 days; left drained for a human"
