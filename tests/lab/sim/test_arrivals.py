"""A long sampled run looks like the fleet in docs/fleet-stats.md, within stated tolerances."""

from collections import Counter

import numpy as np
from scipy.stats import weibull_min

from lab.sim.arrivals import DEFAULT_MIX
from lab.sim.simulator import Simulator
from lab.sim.scenario import Scenario


def test_long_sampled_run_matches_fleet_statistics(library):
    # InfiniteHBD's shape: 400 servers for 349 days, 584 faults (1.53 per node-year).
    sc = Scenario.from_dict({"name": "fleet", "seed": 3, "duration": "349d", "resolution": "60s",
                             "topology": {"accelerators": 3200}, "sample": {"faults_per_node_year": 1.53}})
    faults = [p.inst for p in Simulator(sc, library).placed]
    assert 450 < len(faults) < 750
    gaps = np.diff(np.sort([f.onset for f in faults])) / 3600.0
    shape, _, _ = weibull_min.fit(gaps[gaps > 0], floc=0)
    assert 0.5 <= shape <= 0.75, shape
    total = sum(DEFAULT_MIX.values())
    mix = Counter(f.template.fault for f in faults)
    for fault, weight in DEFAULT_MIX.items():
        assert abs(mix[fault] / len(faults) - weight / total) <= 0.05, fault
    per_node = Counter(f.entity.split("/")[0] for f in faults)
    share = sum(n for n in per_node.values() if n >= 2) / len(faults)
    assert abs(share - 0.836) <= 0.1, share


def test_confounders_arrive_at_their_rates(library):
    sc = Scenario.from_dict({"name": "c", "seed": 9, "duration": "30d", "resolution": "60s",
                             "topology": {"accelerators": 640},
                             "sample": {"faults_per_node_year": 0.0,
                                        "confounders_per_day": {"benign_reboot": 2, "benign_exporter_gap": 4}}})
    got = Counter(p.inst.template.fault for p in Simulator(sc, library).placed)
    assert 40 <= got["benign_reboot"] <= 85 and 90 <= got["benign_exporter_gap"] <= 150


def test_sampled_warm_slots_stand_for_the_whole_scenario(library):
    sc = Scenario.from_dict({"name": "w", "seed": 4, "duration": "3d", "resolution": "60s",
                             "topology": {"accelerators": 640},
                             "sample": {"faults_per_node_year": 0.0, "confounders_per_day": {"benign_warm_slot": 2}}})
    sim = Simulator(sc, library)
    slots = [p.inst for p in sim.placed if p.inst.template.fault == "benign_warm_slot"]
    assert slots
    for inst in slots:
        assert inst.onset == sc.start and inst.failure == inst.until == sc.start + sc.duration


def test_no_slot_is_warm_twice_over(library):
    """Two warm slots drawn onto one GPU added up to a GPU 11 °C and its HBM 15 °C above its peers, which
    is no longer "a few degrees, steady" (30-day seed 2001's only false drain, idle for the whole month)."""
    sc = Scenario.from_dict({"name": "w", "seed": 2001, "duration": "30d", "resolution": "60s",
                             "topology": {"accelerators": 640},
                             "sample": {"faults_per_node_year": 0.0, "confounders_per_day": {"benign_warm_slot": 1}}})
    nodes = [p.inst.entity.split("/")[0] for p in Simulator(sc, library).placed
             if p.inst.template.fault == "benign_warm_slot"]
    assert len(nodes) > 20 and len(set(nodes)) == len(nodes)
