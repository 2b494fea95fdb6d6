import pytest

from lab.stage_cost import stage_cost, stages


def test_each_stage_s_cpu_within_its_parent_and_the_methods_restored():
    """Half an hour of a quiet 5-minute week: the detectors within detect, detect within the tick, the tick and the
    simulator making the whole; every method the one it was."""
    before = [getattr(cls, name) for _, cls, name in stages()]
    out = stage_cost("quiet", "300s", "realistic", 1, 0.5)
    cpu = {row["stage"].strip(): row["cpu_s"] for row in out["stages"]}
    assert all(v >= 0 for v in cpu.values()) and cpu["tick"] > 0
    assert cpu["detect"] <= cpu["tick"] + 1e-6
    assert cpu["rules"] + cpu["trend"] + cpu["peer"] <= cpu["detect"] + 1e-6
    assert cpu["simulator and harness (not the tick)"] + cpu["tick"] == pytest.approx(out["total_cpu_s"], abs=2e-3)
    assert sum(row["share"] for row in out["stages"][:2]) == pytest.approx(1.0, abs=1e-3)
    assert [getattr(cls, name) for _, cls, name in stages()] == before


def test_a_cell_the_matrix_lacks_is_refused_before_anything_is_wrapped():
    before = [getattr(cls, name) for _, cls, name in stages()]
    with pytest.raises(ValueError, match="unknown sampling cell"):
        stage_cost("quiet", "7s", "realistic", 1, 0.5)
    assert [getattr(cls, name) for _, cls, name in stages()] == before
