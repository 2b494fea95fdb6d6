from lab.fault_trace import fault_lines

H = 3600.0


def _record() -> dict:
    leads = [{"entity": "n1/gpu0", "fault": "gpu_off_bus", "template": "a", "onset": 1 * H, "failure": 5 * H,
              "window_s": 4 * H, "lead_s": 2.5 * H},
             {"entity": "n2/mlx5_0:1", "fault": "link_degradation", "template": "b", "onset": 2 * H,
              "failure": 3 * H, "window_s": 1 * H, "lead_s": None}]
    return {"raswarden": {"fault_leads": leads}}


FINDINGS = [
    {"ts": 0.5 * H, "entity": "n1/gpu0", "state": "suspect", "detector": "trend", "reasons": ["before its onset"]},
    {"ts": 2.0 * H, "entity": "n1/gpu0", "state": "suspect", "detector": "trend", "reasons": ["watched"]},
    {"ts": 2.5 * H, "entity": "n1", "state": "subhealthy", "detector": "rules", "reasons": ["its node"]},
    {"ts": 3.0 * H, "entity": "n1/gpu0", "state": "suspect", "detector": "trend", "reasons": ["again"]},
    {"ts": 5.0 * H, "entity": "n1/gpu0", "state": "failed", "detector": "rules", "reasons": ["Xid 79"]},
    {"ts": 2.5 * H, "entity": "n9/gpu0", "state": "subhealthy", "detector": "peer", "reasons": ["another part"]},
]


def test_each_fault_s_findings_from_its_onset_to_its_failure_first_of_each_state():
    lines = fault_lines(_record(), FINDINGS, start=0.0)
    assert lines == [
        "== gpu_off_bus a n1/gpu0: onset +1.00 h, failure +5.00 h (4.00 h), lead 2.50 h",
        "   +2.00 h (lead 3.00 h) n1/gpu0 suspect [trend]: watched",
        "   +2.50 h (lead 2.50 h) n1 subhealthy [rules]: its node",
        "   +5.00 h (lead 0.00 h) n1/gpu0 failed [rules]: Xid 79",
        "== link_degradation b n2/mlx5_0:1: onset +2.00 h, failure +3.00 h (1.00 h), not flagged in time",
    ]


def test_one_class_every_finding_and_a_width():
    lines = fault_lines(_record(), FINDINGS, start=1 * H, fault="gpu_off_bus", every=True, width=40)
    assert lines[0] == "== gpu_off_bus a n1/gpu0: onset +0.00 h, failure +4.00 h (4.00 h), lead 2.50 h"
    assert [line.split()[0] for line in lines[1:]] == ["+1.00", "+1.50", "+2.00", "+4.00"]
    assert all(len(line) <= 40 for line in lines[1:]) and lines[3] == "   +2.00 h (lead 2.00 h) n1/gpu0 suspect"
