"""A GPU at its slowdown limit in a rack-wide coolant swing is the rack's cooling (a watch); one heating on its own
is sub-healthy, swing or not. Hand-made fleets: two racks of four 8-GPU nodes, temperature = coolant + R x power."""

import numpy as np
import pandas as pd
import pytest

from detectors.contract import TickInput
from detectors.rules import RuleDetector
from detectors.schema import State, events_frame
from detectors.shared_heat import SharedHeat

EMPTY_INC = pd.DataFrame({"entity": [], "metric": [], "increase": [], "resets": []})
RACKS = {f"r{r}-b{b}": f"r{r}" for r in range(2) for b in range(4)}
GPUS = [f"{node}/gpu{g}" for node in RACKS for g in range(8)]


class Fleet:
    """Busy GPUs at 450-650 W each (a few watts from tick to tick; the hot ones at 600); each GPU's offset, each
    rack's coolant and a GPU's own fault set by the test."""

    def __init__(self, seed: int = 7):
        self.rng = np.random.default_rng(seed)
        self.r_thermal = self.rng.uniform(0.072, 0.082, len(GPUS))
        self.p_mean = self.rng.uniform(450, 650, len(GPUS))
        self.p_mean[[WARM, HOT]] = 600.0
        self.offset = np.zeros(len(GPUS))
        self.coolant = {"r0": 30.0, "r1": 30.0}

    def gauges(self, fresh: bool = True) -> pd.DataFrame:
        power = self.p_mean + self.rng.uniform(-10, 10, len(GPUS))
        coolant = np.array([self.coolant[RACKS[g.split("/")[0]]] for g in GPUS])
        temp = coolant + self.r_thermal * power + self.offset + self.rng.normal(0, 0.5, len(GPUS))
        util = self.rng.uniform(85, 100, len(GPUS))
        n = len(GPUS)
        return pd.DataFrame({"entity": GPUS * 3, "metric": ["gpu_temp_c"] * n + ["power_w"] * n + ["gpu_util_pct"] * n,
                             "last": np.concatenate([temp, power, util]),
                             "max": np.concatenate([temp, power, util]), "fresh": fresh})


WARM, HOT = GPUS.index("r0-b2/gpu5"), GPUS.index("r0-b1/gpu2")


def run(det: RuleDetector, fleet: Fleet, now: float, racks=RACKS, fresh: bool = True):
    return det.update(TickInput(now, events_frame([]), EMPTY_INC, fleet.gauges(fresh), frozenset(), racks=racks))


def thermal(evidence, entity):
    return [e for e in evidence if e.entity == entity and e.category == "gpu_thermal"]


def settle(det, fleet, hours=3.0, step=30.0):
    t = 0.0
    while t < hours * 3600:
        t += step
        run(det, fleet, t)
    return t


def swing(det, fleet, t, rack="r0", by=7.0, minutes=20, step=30.0, hold=10):
    """Warm ``rack``'s coolant by ``by`` °C over ``minutes`` and hold it ``hold`` ticks; returns the time and the
    evidence of the ticks at the top (power, and so temperature, varies from tick to tick)."""
    steps = int(minutes * 60 / step)
    base = fleet.coolant[rack]
    ev = []
    for i in range(1, steps + hold + 1):
        fleet.coolant[rack] = base + by * min(i, steps) / steps
        t += step
        tick = run(det, fleet, t)
        if i > steps:
            ev += tick
    return t, ev


def levels(evidence, entity):
    return {e.level for e in thermal(evidence, entity)}


def test_a_warm_slot_in_a_coolant_swing_is_a_watch_not_a_flag():
    fleet = Fleet()
    fleet.offset[WARM] = 87.0 - 7.0 + 2.0 - (30 + fleet.r_thermal[WARM] * 600)  # 2 °C short of the limit before
    det = RuleDetector().fit()
    t = settle(det, fleet)
    assert not thermal(run(det, fleet, t + 30), GPUS[WARM])
    _, ev = swing(det, fleet, t + 30)
    assert levels(ev, GPUS[WARM]) == {State.SUSPECT}
    assert any("slowdown limit" in e.reasons[0] and "rack r0 warmed with it" in e.reasons[0]
               for e in thermal(ev, GPUS[WARM]))
    # The static-threshold yardstick keeps what DCGM does: the limit is the limit.
    base, fleet = RuleDetector(baseline=True).fit(), Fleet()
    fleet.offset[WARM] = 87.0 - 7.0 + 2.0 - (30 + fleet.r_thermal[WARM] * 600)
    _, ev = swing(base, fleet, settle(base, fleet))
    assert levels(ev, GPUS[WARM]) == {State.SUBHEALTHY}


def test_a_gpu_heating_on_its_own_is_subhealthy_swing_or_not():
    fleet = Fleet()
    hot = HOT
    det = RuleDetector().fit()
    t = settle(det, fleet)
    fleet.offset[hot] += 89.0 - (30 + fleet.r_thermal[hot] * 600)  # its own 13 °C: over the limit
    ev = [e for i in range(1, 11) for e in run(det, fleet, t + 30 * i)]
    assert levels(ev, GPUS[hot]) == {State.SUBHEALTHY}
    # In a swing of its rack, a GPU that rose 6 °C more than its rack is still its own fault.
    fleet = Fleet()
    det = RuleDetector().fit()
    t = settle(det, fleet)
    fleet.offset[hot] += 89.0 - 7.0 - (30 + fleet.r_thermal[hot] * 600)  # its own 6 °C, and the rack's 7
    _, ev = swing(det, fleet, t)
    assert levels(ev, GPUS[hot]) == {State.SUBHEALTHY}


def test_another_racks_swing_excuses_nothing():
    fleet = Fleet()
    fleet.offset[WARM] = 87.0 - 7.0 + 2.0 - (30 + fleet.r_thermal[WARM] * 600)
    det = RuleDetector().fit()
    t = settle(det, fleet)
    t, _ = swing(det, fleet, t, rack="r1")
    fleet.offset[WARM] += 7.0  # r0's GPU gets there on its own while r1 is warm
    ev = [e for i in range(1, 11) for e in run(det, fleet, t + 30 * i)]
    assert levels(ev, GPUS[WARM]) == {State.SUBHEALTHY}


def test_without_a_settled_baseline_the_limit_is_the_limit():
    """Half an hour in, no GPU has a baseline to rise from: a warm slot in a swing is sub-healthy, as before."""
    fleet = Fleet()
    fleet.offset[WARM] = 87.0 - 7.0 + 2.0 - (30 + fleet.r_thermal[WARM] * 600)
    det = RuleDetector().fit()
    _, ev = swing(det, fleet, settle(det, fleet, hours=0.25))
    assert levels(ev, GPUS[WARM]) == {State.SUBHEALTHY}


@pytest.mark.parametrize("racks_warming, own, expected", [(("r0", "r1"), 0.0, State.SUSPECT),
                                                          (("r0",), 3.0, State.SUBHEALTHY)])
def test_without_a_topology_the_tick_is_one_group(racks_warming, own, expected):
    """No racks known: the tick's accelerators are one group. The whole fleet warming (one rack watched without a
    topology) excuses the warm slot; half of it warming moves the group's median only half as far, and a GPU 3 °C
    over that and the margin keeps its flag."""
    fleet = Fleet()
    fleet.offset[WARM] = 88.0 - 7.0 - own - (30 + fleet.r_thermal[WARM] * 600)
    det = RuleDetector().fit()
    t = 0.0
    while t < 3 * 3600:
        t += 30
        run(det, fleet, t, racks=None)
    ev = []
    for i in range(1, 51):
        for rack in racks_warming:
            fleet.coolant[rack] = 30 + 7.0 * min(i, 40) / 40
        fleet.offset[WARM] += own / 40 if i <= 40 else 0.0
        t += 30
        tick = run(det, fleet, t, racks=None)
        ev += tick if i > 40 else []
    assert levels(ev, GPUS[WARM]) == {expected}
    if expected == State.SUSPECT:
        assert all("; the whole fleet warmed with it (" in e.reasons[0] for e in thermal(ev, GPUS[WARM]))


def test_the_shutdown_limit_is_failed_in_any_swing():
    fleet = Fleet()
    fleet.offset[WARM] = 92.0 - 7.0 + 1.0 - (30 + fleet.r_thermal[WARM] * 600)
    det = RuleDetector().fit()
    t = settle(det, fleet)
    _, ev = swing(det, fleet, t)
    assert State.FAILED in levels(ev, GPUS[WARM])


def test_sampled_every_five_minutes_held_readings_do_not_teach_the_baseline():
    """At 5-minute sampling the tick holds each reading for ten ticks: the baseline moves on fresh readings only,
    and the rise is the same judgment."""
    fleet = Fleet()
    heat = SharedHeat()
    t, g = 0.0, fleet.gauges()
    heat.observe(t, g, RACKS)
    while t < 3 * 3600:
        t += 30
        fresh = int(t) % 300 == 0
        if fresh:
            g = fleet.gauges()
        heat.observe(t, g.assign(fresh=fresh), RACKS)
    row = heat._rows.index.get_indexer([GPUS[0]])[0]
    assert heat._temp[1].at[row] == t - t % 300  # the last fresh reading's time, not the tick's
    fleet.coolant["r0"] += 6.0
    t += 300 - t % 300
    heat.observe(t, fleet.gauges(), RACKS)
    h = heat.shared(GPUS[WARM])
    assert h is not None and h.rack == "r0" and 5.0 < h.rack_rise_c < 7.0
    assert heat.shared("r1-b0/gpu0") is None  # r1 did not move


def watched(racks) -> tuple[Fleet, SharedHeat]:
    """A fleet and the judgment after two hours of it, a reading a minute."""
    fleet, heat = Fleet(), SharedHeat()
    for k in range(1, 121):
        heat.observe(60.0 * k, fleet.gauges(), racks)
    return fleet, heat


def test_a_replaced_gpu_starts_its_baseline_afresh():
    fleet, heat, t = *watched(RACKS), 2 * 3600.0
    heat.forget(GPUS[WARM])
    fleet.coolant["r0"] += 6.0
    heat.observe(t + 60, fleet.gauges(), RACKS)
    assert heat.shared(GPUS[WARM]) is None  # no baseline yet: not judged shared
    assert heat.shared(GPUS[WARM - 1]) is not None


def test_a_new_topology_regroups_the_gpus():
    """A reloaded topology (the pipeline hands over a new node -> rack map) puts each GPU in its rack afresh: first
    all GPUs are one group (no map), then r0's warm slot is judged against r0."""
    fleet, heat, t = *watched(None), 2 * 3600.0
    fleet.coolant["r0"] += 6.0
    heat.observe(t + 60, fleet.gauges(), None)
    before = heat.shared(GPUS[WARM])
    assert before is None or before.rack == ""  # one group: half the fleet warmed
    heat.observe(t + 120, fleet.gauges(), dict(RACKS))
    assert heat.shared(GPUS[WARM]) is not None and heat.shared(GPUS[WARM]).rack == "r0"
