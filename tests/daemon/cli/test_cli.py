import argparse
import json
import subprocess
import sys

import pytest

from daemon.cli import COMMAND_GROUPS, build_parser, main
from tests.conftest import ports


def test_replay_cli_writes_findings_and_a_summary(trace_dir, tmp_path, capsys):
    findings = tmp_path / "f.jsonl"
    assert main(["replay", str(trace_dir), "--findings", str(findings)]) == 0
    out = capsys.readouterr().out
    assert "raswarden replay: 4 files" in out and "lines rejected: 0" in out
    assert "# incidents (3)" in out and "r01/gpu_memory 1" in out
    # into a pipe, a table is tab-separated lines under a header, not a box drawing
    assert "\tentity\t" in out and not any(ch in out for ch in "┃━│┏")
    lines = [json.loads(x) for x in findings.read_text().splitlines()]
    assert any(x["entity"] == "sn01-b03/gpu2" and x["state"] == "failed" for x in lines)


def test_replay_missing_path_is_a_clear_error(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_convert_then_replay(trace_dir, tmp_path, capsys):
    out = tmp_path / "long"
    assert main(["convert", str(trace_dir), "--out", str(out), "--format", "csv"]) == 0
    # 53: sn01-b01's reboot is a boot event; sn01-b03's lost GPU is read twice, its Xid 79 and the driver's own line
    # beside it (merged into one when judged)
    assert "wrote 197,788 samples and 53 events" in capsys.readouterr().out
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
    from daemon.store.leases import Lease
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


def test_read_only_commands_never_create_a_state_database(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RASWARDEN_CONFIG", str(tmp_path / "no-config.toml"))  # --db alone needs no config file
    missing = tmp_path / "state" / "raswarden.db"
    for argv in (["incidents"], ["silence", "list"]):
        assert main([*argv, "--db", f"sqlite:///{missing}"]) == 2
        err = capsys.readouterr().err
        assert f"no state database at {missing} (--db)" in err
        assert not missing.exists() and not missing.parent.exists()
    # a store that exists is read with --db alone
    assert main(["silence", "add", "rack=r07", "--comment", "cooling work", "--db", f"sqlite:///{missing}"]) == 0
    assert main(["incidents", "--db", f"sqlite:///{missing}"]) == 0
    assert "no open incidents" in capsys.readouterr().out


def test_read_only_commands_need_only_read_access(request):
    """An operator who may read the daemon's store and nothing else (user nobody; the store, its directory and the
    working directory root's) lists incidents, repairs and silences and writes a report where it may; nothing is
    created beside the store (no migrations lock), and what it may not write is one line, exit 2."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from daemon.store import Store
    from tests.conftest import ROOT, require

    require(os.geteuid() == 0 and shutil.which("setpriv") is not None,
            "needs root and setpriv (util-linux) to run a command as nobody")
    nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    if subprocess.run([*nobody, sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); import daemon"],
                      capture_output=True, cwd="/").returncode != 0:
        pytest.skip(f"user nobody cannot run this checkout's Python ({ROOT} or {sys.executable} not readable by all)")
    tmp_path = Path(tempfile.mkdtemp(prefix="raswarden-read-only-"))  # pytest's own is root's alone
    request.addfinalizer(lambda: shutil.rmtree(tmp_path, ignore_errors=True))
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    db = f"sqlite:///{store_dir / 'state.db'}"
    assert main(["silence", "add", "rack=r07", "--comment", "cooling", "--db", db]) == 0
    Store(db).close()  # the daemon stopped: its -wal and -shm are gone, and nobody may not make them
    for path in (tmp_path, store_dir):
        path.chmod(0o755)
    before = sorted(p.name for p in store_dir.iterdir())
    outside = tmp_path / "out"
    outside.mkdir(mode=0o777)
    outside.chmod(0o777)

    def as_nobody(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([*nobody, sys.executable, "-m", "daemon", *argv, "--db", db], capture_output=True,
                              text=True, cwd=store_dir,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)

    for argv, said in ((["incidents"], "no open incidents"), (["repairs", "list"], "no open repair orders"),
                       (["silence", "list"], "rack=r07"),
                       (["report", "--out", str(outside / "r.html")], "Wrote")):
        run = as_nobody(*argv)
        assert run.returncode == 0 and said in run.stdout, (argv, run.stdout, run.stderr)
    run = as_nobody("report", "--out", str(store_dir / "r.html"))
    assert run.returncode == 2 and run.stderr == f"raswarden: {store_dir / 'r.html'}: Permission denied\n", run.stderr
    run = as_nobody("silence", "add", "rack=r08")  # a command that writes says why it cannot
    assert run.returncode == 2 and "permission denied" in run.stderr.lower() and "Traceback" not in run.stderr
    assert sorted(p.name for p in store_dir.iterdir()) == before


def test_a_read_only_command_on_a_store_of_another_schema_says_so(tmp_path, capsys):
    import sqlite3

    db = tmp_path / "state.db"
    assert main(["silence", "add", "rack=r07", "--db", f"sqlite:///{db}"]) == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0011'")
    assert main(["incidents", "--db", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err
    assert "its schema is at revision 0011, this raswarden's at " in err and "one that only reads does not" in err
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'ffff99'")
    assert main(["incidents", "--db", f"sqlite:///{db}"]) == 2
    assert "written by a newer raswarden" in capsys.readouterr().err
    assert main(["silence", "add", "rack=r08", "--db", f"sqlite:///{db}"]) == 2  # and a writer refuses it too
    assert "written by a newer raswarden" in capsys.readouterr().err


def test_a_silence_lasts_as_long_everywhere_by_default(tmp_path, capsys):
    import time

    from daemon.alerting.silences import DEFAULT_SILENCE, SilenceBook
    from daemon.store import Store
    from playbooks.duration import parse_duration

    db = f"sqlite:///{tmp_path / 'r.db'}"
    assert main(["silence", "add", "rack=r07", "--db", db]) == 0
    (sil,) = SilenceBook(Store(db)).active(time.time())
    assert sil.ends_at - sil.starts_at == pytest.approx(parse_duration(DEFAULT_SILENCE, "d"), abs=1e-3)
    assert DEFAULT_SILENCE == "4h"


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    """`raswarden ... | head`: the pipe closes before the output is written; no traceback, exit as SIGPIPE would."""
    db = f"sqlite:///{tmp_path / 'r.db'}"
    assert main(["silence", "add", "rack=r07", "--db", db]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "daemon", "silence", "list", "--db", db],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err, err


def test_check_config_warns_of_a_missing_file_sd_and_names_a_missing_topology(tmp_path, capsys):
    config = tmp_path / "raswarden.toml"
    config.write_text(f"""
[store]
url = "sqlite:///{tmp_path / 'r.db'}"

[[collectors]]
type = "exposition"
name = "exporters"
file_sd = ["{tmp_path / 'targets.json'}"]
""")
    assert main(["check-config", "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    assert "OK" in out and "1 warning" in out
    assert f"WARNING: collector exporters: file_sd {tmp_path / 'targets.json'}" in err and "No such file" in err
    (tmp_path / "targets.json").write_text('[{"targets": ["127.0.0.1:9400"]}]')
    assert main(["check-config", "--config", str(config)]) == 0
    assert "warning" not in capsys.readouterr().out

    topology = tmp_path / "topo.yaml"
    config.write_text(config.read_text().replace("[store]", f'[service]\ntopology = "{topology}"\n\n[store]'))
    assert main(["check-config", "--config", str(config)]) == 2
    assert f"service.topology: cannot read {topology}: No such file or directory" in capsys.readouterr().err


def test_init_writes_the_topology_and_a_config_for_what_the_exporters_serve(tmp_path, capsys):
    """Against the simulator's live exporters: every node with its addresses, every GPU with the UUID, PCI bus id
    and model its exporter reports, every fabric port; the config it writes passes check-config; a target that
    does not answer is named and the rest is written."""
    import yaml

    from daemon.topology import Topology
    from lab.bundled import FAULTS, SCENARIOS
    from lab.sim.faults import load_library
    from lab.sim.scenario import Scenario
    from lab.sim.serve import SimServer
    from lab.sim.simulator import Simulator

    server = SimServer(Simulator(Scenario.load(SCENARIOS / "mini.yaml"), load_library(FAULTS)), tmp_path / "live",
                       speed=600.0, port_offset=ports(311))
    server.start()
    try:
        server.state.set(next(server.sim.chunks()), 0)
        sd = tmp_path / "live" / "prometheus-targets.json"
        out = tmp_path / "etc"
        from daemon.starter_config import minimal_config

        out.mkdir()
        (out / "raswarden.toml").write_text(minimal_config())  # as the package installs it, unedited
        assert main(["init", "--file-sd", str(sd), "--out", str(out)]) == 0  # docs/install.md: no --force needed
        said = capsys.readouterr().out
        truth = yaml.safe_load((tmp_path / "live" / "topology.yaml").read_text())
        nodes = [n for r in truth["racks"] for n in r["nodes"]]
        assert f"{len(nodes)} nodes, {sum(len(n['accelerators']) for n in nodes)} accelerators" in said
        written = Topology.load(out / "topology.yaml")
        expected = Topology.from_dict(truth)
        assert written.node_rack.keys() == expected.node_rack.keys() and written.aliases == expected.aliases
        assert written.accelerator_ids == {e: {k: v for k, v in ids.items() if k != "serial"}
                                           for e, ids in expected.accelerator_ids.items()}
        assert written.accelerator_model == expected.accelerator_model
        node_ports = {n["name"]: {(p["device"], p.get("port", 1)) for p in n.get("ports", [])} for n in nodes}
        got = yaml.safe_load((out / "topology.yaml").read_text())
        assert {n["name"]: {(p["device"], p["port"]) for p in n.get("ports", [])}
                for r in got["racks"] for n in r["nodes"]} == node_ports
        assert main(["check-config", "--config", str(out / "raswarden.toml")]) == 0
        assert main(["init", "--file-sd", str(sd), "--out", str(out)]) == 2  # never overwrites unasked
        assert "already there (--force to overwrite)" in capsys.readouterr().err
        (out / "topology.yaml").unlink()
        with open(out / "raswarden.toml", "a") as fh:
            fh.write("# an operator's edit\n")
        assert main(["init", "--file-sd", str(sd), "--out", str(out)]) == 2  # an edited config is never replaced
        assert f"{out / 'raswarden.toml'} already there" in capsys.readouterr().err
        dead = "127.0.0.1:9"
        alive = f"127.1.0.1:{9400 + ports(311)}"
        assert main(["init", alive, dead, "--out", str(tmp_path / "two"), "--timeout", "1"]) == 3
        assert f"raswarden: {dead}:" in capsys.readouterr().err and (tmp_path / "two" / "topology.yaml").exists()
    finally:
        server.shutdown()


def test_the_shipped_minimal_config_is_the_one_init_writes():
    from daemon.starter_config import minimal_config
    from tests.conftest import ROOT

    assert (ROOT / "systemd" / "raswarden.toml").read_text() == minimal_config()


def test_advise_gives_the_foresight_and_says_when_a_job_has_no_advice(tmp_path, capsys):
    """``raswarden advise`` on a journal of hand-made failures without a scheduler: the foresight by class and rack
    (tests/playbooks/test_slurm_advice.py has it with a real Slurm's jobs)."""
    from tests.daemon.operations.test_foresight import T0, incident, journal, step

    store, _ = journal(tmp_path / "db", nodes=4, days=1)
    inc = incident(store, "n01/gpu3", "gpu_memory", T0 + 3600, failed=T0 + 7200)
    step(store, inc, "drain", T0 + 4000)
    incident(store, "n02/mlx5_0:1", "fabric_link", T0 + 3600, failed=T0 + 4 * 3600)
    store.close()
    cfg = tmp_path / "r.toml"
    cfg.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "db" / "state.db"}"\n[advice]\nwindow_days = 100000\n')
    assert main(["advise", "--config", str(cfg)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    # as of the journal's last change (4 h after the nodes were first seen), not today: 4 nodes x 4 h
    assert "2 hard failures in 16 node-hours" in out and "1 acted on ahead, 1 warned of only, 0 unwarned" in out
    assert "the store's last data" in captured.err
    assert "fabric_link\t0\t1\t0" in out and "no running job has opted in" in out
    assert main(["advise", "--config", str(cfg), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["jobs"] == {} and data["foresight"]["by_class"]["gpu_memory"] == {"foreseen": 1, "warned": 0,
                                                                                  "unwarned": 0}
    assert main(["advise", "77", "--config", str(cfg)]) == 1
    assert "no advice for job 77" in capsys.readouterr().err


def test_sigquit_prints_every_threads_stack_and_the_command_goes_on(tmp_path):
    """An operator (or a test) asks a process that does not stop what it waits on: ``kill -QUIT`` prints every
    thread's stack to its log, and it runs on until SIGTERM."""
    import signal
    import time

    from tests.conftest import ROOT, spawn, wait_stopped

    config = tmp_path / "c.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "s.db"}"\n')
    log = tmp_path / "follow.log"
    proc = spawn([sys.executable, "-m", "daemon", "-v", "alerts", "flush", "--follow", "--interval", "0.2",
                  "--config", str(config)], log, cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while "'queued'" not in log.read_text():  # its first pass done: running
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        proc.send_signal(signal.SIGQUIT)
        deadline = time.monotonic() + 30
        # the whole dump written (the main thread runs the handler; the other threads' stacks may be in the log
        # before the current one's)
        while not all(m in log.read_text() for m in ("Current thread", "in run_until_stopped", "in _worker")):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        dump = log.read_text()
        while log.read_text().count("'queued'") <= dump.count("'queued'"):  # and it goes on: a pass more after it
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert "Current thread" in dump and "in run_until_stopped" in dump and "in _worker" in dump, dump
    finally:
        proc.send_signal(signal.SIGTERM)
        wait_stopped(proc, log, 30, "raswarden alerts flush --follow")
    assert proc.returncode == 0


def test_check_config_says_a_receiver_off_once_as_a_warning_and_strict_fails_on_it(tmp_path, capsys):
    """Issue 54: a receiver whose secret file is missing printed an ERROR line and then "OK" with exit 0."""
    cfg = tmp_path / "raswarden.toml"
    cfg.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "s.db"}"\n[[alerting.receivers]]\nname = "ops"\n'
                   f'type = "slack"\nurl_file = "{tmp_path / "missing"}"\n')
    assert main(["check-config", "--config", str(cfg)]) == 0
    out = capsys.readouterr()
    assert "OK" in out.out and out.err.count("receiver ops is off") == 1 and "ERROR" not in out.err
    assert main(["check-config", "--strict", "--config", str(cfg)]) == 1
    assert "valid, but not all of it can work" in capsys.readouterr().out
