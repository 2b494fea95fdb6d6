import argparse
import json
import subprocess
import sys

import pytest

from daemon.cli import COMMAND_GROUPS, build_parser, main


def test_replay_cli_writes_findings_and_a_summary(trace_dir, tmp_path, capsys):
    findings = tmp_path / "f.jsonl"
    assert main(["replay", str(trace_dir), "--findings", str(findings)]) == 0
    out = capsys.readouterr().out
    assert "raswarden replay: 4 files" in out and "lines rejected: 0" in out
    assert "incidents (3)" in out and "r01/gpu_memory 1" in out
    lines = [json.loads(x) for x in findings.read_text().splitlines()]
    assert any(x["entity"] == "sn01-b03/gpu2" and x["state"] == "failed" for x in lines)


def test_replay_missing_path_is_a_clear_error(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_convert_then_replay(trace_dir, tmp_path, capsys):
    out = tmp_path / "long"
    assert main(["convert", str(trace_dir), "--out", str(out), "--format", "csv"]) == 0
    assert "wrote 197,788 samples and 52 events" in capsys.readouterr().out  # 52: sn01-b01's reboot is a boot event
    assert (out / "samples.csv").exists() and (out / "topology.yaml").exists() and (out / "labels.jsonl").exists()
    assert main(["replay", str(out)]) == 0
    assert "incidents (3)" in capsys.readouterr().out


def test_help_everywhere():
    for args in (["--help"], ["replay", "--help"], ["convert", "--help"]):
        r = subprocess.run([sys.executable, "-m", "daemon", *args], capture_output=True, text=True)
        assert r.returncode == 0 and "usage: raswarden" in r.stdout


def _commands(parser: argparse.ArgumentParser, path=()):
    """Every command and action of the parser, as argv prefixes, with its parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


def test_every_command_group_registers_commands_that_run_something(capsys):
    """Each module of daemon/cli adds its commands; every leaf command has help and a function to run."""
    parser = build_parser()
    seen = set()
    for group in COMMAND_GROUPS:
        sub = argparse.ArgumentParser().add_subparsers()
        group.register(sub)
        assert sub.choices, f"{group.__name__} registers no command"
        seen |= set(sub.choices)
    commands = dict(_commands(parser))
    assert {path[0] for path in commands} == seen
    for path, sub in commands.items():
        with pytest.raises(SystemExit) as exit:
            parser.parse_args([*path, "--help"])
        assert exit.value.code == 0 and f"usage: raswarden {' '.join(path)}" in capsys.readouterr().out
        if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
            assert callable(sub.get_default("func")) or callable(commands[path[:1]].get_default("func")), path


def test_evaluate_cli_beside_the_baseline(trace_dir, tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["evaluate", str(trace_dir), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "recall (raswarden / baseline)" in text and "raswarden: " in text and "baseline: " in text
    d = json.loads(out.read_text())
    assert d["raswarden"]["all"]["faults"] == 3 and d["raswarden"]["all"]["recall_before_failure"] == 1.0
    assert d["raswarden"]["false_flags"] == 0 and d["raswarden"]["confounder_flags"] == 0
    assert d["raswarden"]["all"]["hard_faults_failed"] == 3
    # The baseline sees the PCIe fault only when the GPU is gone: no early flag.
    assert d["baseline"]["by_class"]["gpu_off_bus"]["recall_before_failure"] == 0.0


def test_evaluate_needs_labels(tmp_path, capsys):
    (tmp_path / "x.json").write_text("")
    assert main(["evaluate", str(tmp_path)]) == 2
    assert "no labels.jsonl" in capsys.readouterr().err


def test_simulate_at_another_cadence_and_noise(tmp_path, capsys):
    """The same fleet sampled otherwise: the accelerators every minute, the ports on a 5-minute grid."""
    out = tmp_path / "t"
    scenario = "fixtures/scenarios/mini.yaml"
    assert main(["simulate", scenario, "--out", str(out), "--sampling", "dcgm=60s:jitter=2s,node=5m:aligned",
                 "--noise", "realistic"]) == 0
    said = capsys.readouterr().out
    assert "dcgm every 60 s, node every 300 s (downsampled), realistic noise" in said
    stamps = [float(line.rsplit(" ", 1)[1]) for line in (out / "node-exporter.om").read_text().splitlines()
              if line.startswith("node_infiniband_state_id{device=\"mlx5_0\",instance=\"10.0.0.1:9100\"")]
    assert stamps and all(t % 300 == 0 for t in stamps) and len(stamps) == 4 * 12
    assert main(["simulate", scenario, "--out", str(out), "--sampling", "dcgm=7s"]) == 2
    assert "not a multiple of the resolution" in capsys.readouterr().err


def test_evaluate_over_the_matrix_of_fleets(tmp_path, capsys):
    """One cell, one dense seed: every fault flagged before failure at 5-minute sampling, the hard faults failed
    in time, no false flag; a second call resumes from the results file instead of running again."""
    out = tmp_path / "m.json"
    args = ["evaluate", "--matrix", "--sampling", "300s", "--noise", "realistic", "--seeds", "1", "--json", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    run = json.loads(out.read_text())["runs"][0]
    ours = run["raswarden"]
    assert (run["sampling"], run["noise"], run["seed"], run["kind"]) == ("300s", "realistic", 1, "dense")
    faults = sum(c["faults"] for c in ours["classes"].values())
    assert faults >= 10 and sum(c["flagged"] for c in ours["classes"].values()) == faults
    assert sum(c["in_time"] for c in ours["classes"].values()) == sum(c["hard"] for c in ours["classes"].values())
    assert ours["false_flags"] == 0 and ours["confounder_flags"] == 0
    assert "300s/realistic   raswarden    1.000" in text and "baseline" in text
    assert main(args) == 0 and len(json.loads(out.read_text())["runs"]) == 1  # resumed: nothing to run
    assert main(["evaluate", "--matrix", "--sampling", "7s"]) == 2
    assert "unknown sampling cell '7s'" in capsys.readouterr().err
    assert main(["evaluate", "--matrix", "--sampling", "300s", "--warmup", "soon"]) == 2
    assert "--warmup" in capsys.readouterr().err
    assert main(["evaluate"]) == 2


def test_a_command_that_follows_acts_for_the_daemons_shard(tmp_path):
    """Without --shard, 'playbook run' takes the lease of the config's service.shard, the one the daemon holds, so
    an operator's run beside the daemon stands by instead of acting at the same time."""
    from daemon.lease import Lease
    from daemon.store import Store

    db = tmp_path / "s.db"
    cfg = tmp_path / "raswarden.toml"
    cfg.write_text(f'[store]\nurl = "sqlite:///{db}"\n\n[service]\nshard = "r07"\n')
    assert main(["playbook", "run", "--config", str(cfg)]) == 0
    store = Store(f"sqlite:///{db}")
    try:
        held = Lease(store, "shard:r07").current()
        assert held is not None and held.expires_at == 0.0  # taken for the pass, then let go
        assert Lease(store, "shard:default").current() is None
    finally:
        store.close()
