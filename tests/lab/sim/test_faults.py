"""Templates load and validate; every fault class and confounder has two of them."""

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from lab.sim.faults import Effect, TemplateError, load_template, parse_duration

CLASSES = ["hbm_degradation", "gpu_off_bus", "thermal_degradation", "link_degradation", "nvlink_errors", "fail_slow",
           "benign_coolant_swing", "benign_warm_slot", "benign_reboot", "benign_maintenance", "benign_exporter_gap",
           "benign_application_xid", "benign_single_correctable_ecc"]


def test_two_templates_of_every_class(library):
    count = Counter(t.fault for t in library.values())
    for c in CLASSES:
        assert count[c] >= 2, c
    for t in library.values():
        assert t.window[0] <= t.window[1]


def test_durations():
    assert parse_duration("2h30m", "x") == 9000 and parse_duration(90, "x") == 90
    assert parse_duration("1.5d", "x") == 129600
    with pytest.raises(TemplateError, match="x: not a duration"):
        parse_duration("soon", "x")


def test_segments_do_not_add_up_and_the_last_one_holds():
    x = np.array([0.0, 0.25, 0.5, 0.75, 1.0, 1.5])
    first = Effect("offset", "m", 0.0, 0.5, 0.0, 10.0)
    last = Effect("offset", "m", 0.5, 1.0, 10.0, 0.0)
    total = np.nan_to_num(first.level(x)) + np.nan_to_num(last.level(x))
    assert list(total) == [0.0, 5.0, 10.0, 5.0, 0.0, 0.0]  # segments are half-open: no double count
    assert np.isnan(first.level(np.array([0.75])))[0]
    assert last.level(np.array([1.5]))[0] == 0.0  # reaches the failure: holds its end value
    assert Effect("rate", "m", 0.0, 1.0, 1.0, 100.0, "exp").level(np.array([0.5]))[0] == pytest.approx(10.0)


def test_bad_template_names_file_and_key(tmp_path: Path):
    p = tmp_path / "bad.yaml"
    p.write_text("class: x\ntemplate: a\ntarget: accelerator\nwindow: [1h, 2h]\neffects:\n  - {rate_per_h: [1, 2]}\n")
    with pytest.raises(TemplateError, match=r"bad.yaml: effects\[0\]: needs 'metric'"):
        load_template(p)
    p.write_text("class: x\ntemplate: a\ntarget: gpu\nwindow: [1h, 2h]\n")
    with pytest.raises(TemplateError, match="target must be one of"):
        load_template(p)
