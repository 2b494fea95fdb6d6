"""Slurm's node states as reboot evidence (daemon/ingest/collectors/scheduler.py): the ``sinfo --json`` of each Slurm
series,
and a real Slurm (scripts/slurm-lab.sh) rebooting one of its nodes."""

from __future__ import annotations

import time
from pathlib import Path

from daemon.ingest.collectors import build
from daemon.ingest.formats.reader import ReadContext
from daemon.ingest.naming import SeriesMapper
from daemon.judgement.pipeline import Pipeline
from daemon.topology import Topology
from playbooks.slurm import epoch, node_info
from tests.playbooks.conftest import slurm, slurm_lab  # noqa: F401  (fixtures: a real Slurm)

BOOTED = 1795633605.0


def test_the_sinfo_json_of_each_slurm_series_gives_boot_times_and_rebooting_nodes():
    # 22.05 (Debian 12, the lab): the state one word with its flags apart, times plain numbers (0: not known)
    old = node_info({"name": "node2", "state": "down", "state_flags": ["REBOOT_ISSUED"], "boot_time": BOOTED,
                     "reason": "reboot requested : reboot issued"})
    # 23.02 on (slurmrestd's data_parser v0.0.39 and later): the state a list of words, times {set, infinite, number}
    new = node_info({"name": "node2", "state": ["DOWN", "REBOOT_ISSUED"],
                     "boot_time": {"set": True, "infinite": False, "number": int(BOOTED)}})
    for info in (old, new):
        assert info.booting == "REBOOT_ISSUED" and info.boot_time == BOOTED
        assert {"down", "reboot"} <= info.states
    drained = node_info({"name": "node3", "state": ["IDLE", "DRAIN"], "boot_time": 0})
    assert drained.states == {"idle", "drain"} and drained.boot_time is None and not drained.booting
    assert node_info({"name": "n", "state": "idle", "state_flags": ["REBOOT_REQUESTED"]}).booting == ""  # not yet
    assert node_info({"name": "n", "state": ["IDLE", "POWERING_UP"]}).booting == "POWERING_UP"
    for unknown in (0, None, "", {"set": False, "infinite": False, "number": 0},
                    {"set": True, "infinite": True, "number": 0}):
        assert epoch(unknown) is None


def _collector(tmp_path: Path, **options):
    topology = Topology.from_dict({"racks": [{"name": "r01", "nodes": [
        {"name": f"sn01-b0{i}", "scheduler_name": f"node{i}"} for i in range(1, 5)]}]})
    ctx = ReadContext(mapper=SeriesMapper(topology=topology))
    return build([{"type": "slurm", "name": "slurm", **options}], ctx)[0], ctx


def test_an_unreachable_slurm_is_an_error_of_the_collection_not_a_crash(tmp_path):
    collector, _ = _collector(tmp_path, bin_dir=str(tmp_path / "no-slurm"))
    batch, outcome = collector.collect(1000.0)
    assert not outcome.ok and "sinfo" in outcome.errors[0] and "not found" in outcome.errors[0]
    assert len(batch) == 0


def test_a_node_slurm_reboots_is_graced_from_the_moment_it_is_issued(slurm, tmp_path):  # noqa: F811
    collector, ctx = _collector(tmp_path, slurm_conf=slurm.conf)
    now = time.time()
    batch, outcome = collector.collect(now)
    assert outcome.ok and outcome.targets_up == 1 and len(batch.events) == 0
    boot = dict(zip(batch.samples["entity"].astype(str), batch.samples["value"]))
    assert set(boot) == {f"sn01-b0{i}" for i in range(1, 5)}
    host_booted = next(float(x.split()[1]) for x in Path("/proc/stat").read_text().splitlines()
                       if x.startswith("btime "))
    # the lab's slurmd run on this host (or were rebooted through its RebootProgram by an earlier test: booted since)
    assert all(host_booted - 120 < b <= now + 5 for b in boot.values())
    pipeline = Pipeline(ctx.mapper)
    pipeline.tick(now, batch)
    assert not pipeline.grace_until  # a boot time seen for the first time is no reboot
    (slurm.dir / "reboot" / "node4.hang").touch()  # it stays REBOOT_ISSUED (the lab's reset boots it again)
    slurm.run("scontrol", "reboot", "node4")
    slurm.wait(lambda: collector.slurm.nodes()["node4"].booting, 20)
    batch, outcome = collector.collect(now + 30)
    events = batch.events
    assert list(events["entity"]) == ["sn01-b04"] and list(events["kind"]) == ["boot"]
    assert events["message"].iloc[0] == "Slurm: node4 REBOOT_ISSUED"
    pipeline.tick(now + 30, batch)
    assert set(pipeline.grace_until) == {"sn01-b04"} and pipeline.grace_until["sn01-b04"] >= now + 30 + 600 - 1
