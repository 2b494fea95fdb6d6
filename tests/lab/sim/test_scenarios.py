"""Every bundled scenario loads and builds; together they cover every fault class and confounder."""

from collections import Counter

import pytest

from lab.sim.simulator import Simulator
from lab.sim.faults import TemplateError
from lab.sim.scenario import Scenario
from tests.lab.sim.conftest import SCENARIOS
from tests.lab.sim.test_faults import CLASSES


def test_bundled_scenarios_build_and_cover_every_class(library):
    seen = Counter()
    for path in sorted(SCENARIOS.glob("*.yaml")):
        sim = Simulator(Scenario.load(path), library)
        first = next(iter(sim.chunks()))
        assert first.gpu["gpu_temp_c"].shape[0] == sim.topo.n_gpus
        seen.update(label["fault"] for label in sim.labels())
    for fault in CLASSES + ["benign_partial_node_job", "benign_load_step"]:
        assert seen[fault] >= 1, fault


def test_default_scenario_is_a_month_of_scalex640_with_sampled_faults(library):
    sc = Scenario.load(SCENARIOS / "scalex640-30d.yaml")
    assert sc.accelerators == 640 and sc.duration == 30 * 86400 and sc.sample is not None
    sim = Simulator(sc, library)
    hard = [p for p in sim.placed if not p.inst.template.benign]
    assert 3 <= len(hard) <= 20  # about 1.4 per node-year on 80 blades for 30 days: ~9


def test_scenario_errors_name_the_key():
    with pytest.raises(TemplateError, match="unknown key 'fautls'"):
        Scenario.from_dict({"name": "x", "fautls": []})
    with pytest.raises(TemplateError, match=r"faults\[0\]: needs 'fault' and 'onset'"):
        Scenario.from_dict({"name": "x", "faults": [{"entity": "a"}]})
    with pytest.raises(TemplateError, match="profile must be one of"):
        Scenario.from_dict({"name": "x", "profile": "fancy"})
