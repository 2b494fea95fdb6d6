"""The matrix's runs: a cell's scenario, the warm-up before a dense run's faults, and the table per cell."""

from __future__ import annotations

import pytest

from lab.matrix import at_median, check_cells, differences, key, pooled, report, scenario_for
from lab.sim.faults import parse_duration
from lab.sim.scenario import Scenario


def test_a_warm_up_moves_the_faults_and_keeps_what_was_there_from_the_start():
    plain = scenario_for("dense", "300s", "realistic", 3)
    warm = scenario_for("dense", "300s", "realistic", 3, warmup_s=86400.0)
    assert parse_duration(warm["duration"], "d") == parse_duration(plain["duration"], "d") + 86400.0
    assert len(warm["faults"]) == len(plain["faults"])
    moved = kept = 0
    for before, after in zip(plain["faults"], warm["faults"]):
        for field in ("onset", "failure"):
            if before.get(field) is None:
                assert after.get(field) is None
                continue
            was, now = parse_duration(before[field], field), parse_duration(after[field], field)
            if field == "onset" and was == 0:  # a warm slot is there from the start, warm-up or not
                assert now == 0
                kept += 1
            else:
                assert now == was + 86400.0
                moved += 1
    assert moved > 20 and kept >= 1
    Scenario.from_dict(warm, warm["name"])  # a valid scenario
    assert scenario_for("quiet", "300s", "realistic", 3, warmup_s=86400.0) == scenario_for("quiet", "300s",
                                                                                            "realistic", 3)


def _run(warmup_s: float, flagged: int) -> dict:
    ev = {"classes": {"gpu_off_bus": {"faults": 2, "flagged": flagged, "leads_s": [3600.0] * flagged, "hard": 2,
                                      "in_time": 2, "latencies_s": [0.0, 0.0]}},
          "windows_s": [7200.0, 7200.0], "false_flags": 0, "confounder_flags": 0, "node_days": 46.7,
          "false_flag_list": []}
    return {"kind": "dense", "sampling": "300s", "noise": "realistic", "seed": 1, "model": None,
            "warmup_s": warmup_s, "raswarden": ev, "baseline": ev}


def test_runs_with_and_without_a_warm_up_are_kept_and_tabled_apart():
    runs = [_run(0.0, 1), _run(86400.0, 2)]
    assert key(runs[0]) != key(runs[1])
    lines = report({"runs": runs}).splitlines()
    assert any(line.startswith("300s/realistic   raswarden    0.500") for line in lines)
    assert any(line.startswith("300s/realistic +24h raswarden    1.000") for line in lines)


def test_runs_made_without_the_baseline_table_raswarden_alone():
    with_base, without = _run(0.0, 1), {**_run(86400.0, 2), "baseline": None}
    assert pooled([with_base, without], "baseline")["runs"] == 1
    assert pooled([with_base, without], "raswarden")["recall"] == 0.75
    lines = report({"runs": [with_base, without]}).splitlines()
    assert any(line.startswith("300s/realistic   baseline") for line in lines)
    assert not any(line.startswith("300s/realistic +24h baseline") for line in lines)
    assert any(line.startswith("300s/realistic +24h raswarden    1.000") for line in lines)


def test_differences_name_the_runs_whose_findings_or_figures_moved():
    a = [_run(0.0, 1), _run(86400.0, 2)]
    b = [_run(0.0, 1), _run(86400.0, 2)]
    for r, digest in zip(a + b, ("d1", "d2", "d1", "d3")):
        r["raswarden"] = {**r["raswarden"], "findings_digest": digest}
    b[0]["wall_s"] = 99.0  # time is no difference
    compared, differ = differences({"runs": a}, {"runs": b})
    assert compared == 2 and differ == ["dense 300s/realistic seed 1 (raswarden): findings_digest"]
    old = {**_run(0.0, 2), "baseline": None}  # a record from before digests: its figures still compare
    assert differences({"runs": [old]}, {"runs": a[:1]}) == (1, ["dense 300s/realistic seed 1 (raswarden): classes"])
    assert differences({"runs": a}, {"runs": []}) == (0, [])


def test_the_faults_each_side_of_a_cell_s_median_lead_are_named():
    """Five runs' faults (one unflagged): the median of the four leads, and the faults on either side of it with
    their windows; a run recorded before faults' leads were kept is left out, and the per-fault leads differ only
    where both records carry them."""
    runs = []
    for seed, (lead, template) in enumerate(((1.0, "a"), (2.5, "b"), (None, "a"), (3.0, "a"), (4.0, "b")), 1):
        r = _run(0.0, 1)
        r["seed"], r["profile"] = seed, "stock" if seed % 2 else "full"
        r["raswarden"] = {**r["raswarden"], "fault_leads": [
            {"entity": "n/gpu0", "fault": "gpu_off_bus", "template": template, "window_s": 5 * 3600.0,
             "lead_s": None if lead is None else lead * 3600.0}]}
        runs.append(r)
    runs.append(_run(0.0, 2))  # (no faults' leads)
    out = at_median({"runs": runs}, 1).splitlines()
    assert out == ["300s/realistic: median lead 2.75 h of 4 leads",
                   "   2.50 h of  5.0 h (0.50)  gpu_off_bus b full seed 2",
                   "   3.00 h of  5.0 h (0.60)  gpu_off_bus a full seed 4"]
    moved = {**runs[0], "raswarden": {**runs[0]["raswarden"], "fault_leads": []}}
    assert differences({"runs": [moved]}, {"runs": runs[:1]})[1] == [
        "dense 300s/realistic seed 1 (raswarden): fault_leads"]
    older = {**runs[0], "raswarden": {k: v for k, v in runs[0]["raswarden"].items() if k != "fault_leads"}}
    assert differences({"runs": [older]}, {"runs": runs[:1]}) == (1, [])


def test_the_live_five_minute_cell_scrapes_with_jitter_where_the_stored_one_is_on_the_grid():
    """``300s`` is downsampled storage on the clock's grid; ``300s-live`` is a Prometheus scraping every 5 minutes
    (jitter, lost scrapes), where the trend's episodes once merged (Run 12)."""
    live = scenario_for("dense", "300s-live", "realistic", 1)["sampling"]
    stored = scenario_for("dense", "300s", "realistic", 1)["sampling"]
    assert all(s["interval"] == "5m" and s["jitter"] and s["missed"] > 0 for s in live.values())
    assert all(s.get("aligned") and "jitter" not in s for s in stored.values())
    with pytest.raises(ValueError, match="unknown sampling cell '301s'"):
        check_cells(["301s"], ["realistic"])


def test_the_two_mixed_cells_scrape_accelerators_and_ports_at_their_own_intervals():
    """``15s-60s`` and ``60s-5m``: DCGM's and node_exporter's intervals apart, each live (jitter, lost scrapes), on a
    simulator step that divides both; the scenario samples each source at its own."""
    from lab.matrix import SAMPLING

    for cell, dcgm, node in (("15s-60s", "15s", "60s"), ("60s-5m", "60s", "5m")):
        sampling = scenario_for("dense", cell, "realistic", 1)["sampling"]
        assert (sampling["dcgm"]["interval"], sampling["node"]["interval"]) == (dcgm, node)
        assert all(s["jitter"] and s["missed"] > 0 for s in sampling.values())
        resolution = SAMPLING[cell][0]
        assert all(int(s.interval) % int(resolution) == 0
                   for s in Scenario.from_dict(scenario_for("dense", cell, "realistic", 1)).sampling.values())


def test_the_loaded_cell_s_quiet_weeks_are_a_fleet_idle_half_the_time():
    """Errors that come with use are tested where use changes: its quiet weeks' jobs leave hours idle between them."""
    import numpy as np

    from lab.matrix import FAULTS
    from lab.sim.faults import load_library
    from lab.sim.simulator import Simulator

    busy = {}
    for noise in ("noisy", "loaded"):
        d = scenario_for("quiet", "300s", noise, 1)
        d["duration"] = "2d"
        sim = Simulator(Scenario.from_dict(d, d["name"]), load_library(FAULTS))
        busy[noise] = float(sim._util(sim.scenario.start + 300.0 * np.arange(1, 577)).mean())
    assert scenario_for("quiet", "300s", "loaded", 1)["jobs"]["gap"] == ["2h", "12h"]
    assert busy["noisy"] > 0.9 and 0.3 < busy["loaded"] < 0.7, busy


def test_a_gb200_fleet_runs_the_same_scenarios_on_nvl72_racks_and_is_kept_and_tabled_apart():
    h100, gb200 = scenario_for("dense", "60s", "noisy", 3), scenario_for("dense", "60s", "noisy", 3, fleet="gb200")
    assert gb200["topology"] == {"preset": "nvl72", "accelerators": 648}
    assert h100["topology"]["preset"] == "scalex640" and gb200["faults"] == h100["faults"]
    assert Scenario.from_dict(gb200, gb200["name"]).preset == "nvl72"
    runs = [_run(0.0, 1), {**_run(0.0, 2), "fleet": "gb200"}]
    assert key(runs[0]) != key(runs[1])
    lines = report({"runs": runs}).splitlines()
    assert any(line.startswith("300s/realistic   raswarden    0.500") for line in lines)
    assert any(line.startswith("gb200 300s/realistic raswarden    1.000") for line in lines)
    changed = {**runs[1], "raswarden": {**runs[1]["raswarden"], "false_flags": 1}}
    assert differences({"runs": [changed]}, {"runs": runs})[1] == [
        "dense gb200 300s/realistic seed 1 (raswarden): false_flags"]
    with pytest.raises(ValueError, match="unknown fleet"):
        check_cells(["60s"], ["noisy"], "b300")
