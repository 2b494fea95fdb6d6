"""The bundled library: a scenario by name or by path, and the fixtures/ links to it."""

from lab.bundled import FAULTS, SCENARIOS, scenario_names, scenario_path
from tests.conftest import ROOT


def test_a_scenario_by_name_or_by_path():
    assert {"mini", "dense-all-classes", "quiet-7d", "scalex640-30d"} <= set(scenario_names())
    assert scenario_path("mini") == SCENARIOS / "mini.yaml" == scenario_path("mini.yaml")
    assert scenario_path(ROOT / "fixtures" / "scenarios" / "mini.yaml") == ROOT / "fixtures" / "scenarios" / "mini.yaml"
    assert str(scenario_path("nope")) == "nope"  # neither: its loader says it is missing
    assert (ROOT / "fixtures" / "faults").resolve() == FAULTS and len(list(FAULTS.glob("*.yaml"))) >= 20
