"""raswarden evaluate's per-vendor split on a small mixed-vendor trace."""

import numpy as np
import pytest

from daemon.cli import main
from lab.evaluate import evaluate_trace_by_vendor
from lab.sim.simulator import Simulator
from lab.sim.faults import load_library
from lab.sim.scenario import Scenario
from lab.sim.writer import simulate_to
from tests.detectors.sim_helpers import LIBRARY


def mini(name: str, **changes) -> Simulator:
    """The bundled ``mini`` scenario with ``changes`` (duration, resolution, sampling, noise) as a simulator."""
    import yaml

    from lab.bundled import SCENARIOS

    d = yaml.safe_load((SCENARIOS / "mini.yaml").read_text())
    d.update(changes)
    return Simulator(Scenario.from_dict(d, name), load_library(LIBRARY))


def test_each_vendors_faults_flags_and_node_days_are_scored_apart(tmp_path, capsys):
    sc = Scenario.from_dict({
        "name": "m", "seed": 8, "topology": {"preset": "scalex640-mixed", "accelerators": 72}, "duration": "3h",
        "resolution": "30s", "jobs": {"nodes_per_job": [3, 3], "duration": ["12h", "12h"], "gap": ["1m", "1m"]},
        "faults": [{"entity": "random", "vendor": v, "fault": "hbm_degradation", "template": "a", "onset": "20m",
                    "failure": "2h30m"} for v in ("nvidia", "amd", "ascend")]
        + [{"entity": "random", "vendor": "amd", "fault": "gpu_off_bus", "template": "a", "onset": "30m",
            "failure": "2h"}]})
    out = tmp_path / "t"
    simulate_to(Simulator(sc, load_library(LIBRARY)), out, fmt="parquet")
    ev = evaluate_trace_by_vendor(out, baseline=False)
    assert set(ev) == {"all", "nvidia", "amd", "ascend"}
    faults = {v: e.all_faults.faults for v, e in ev.items()}
    assert faults == {"all": 4, "nvidia": 1, "amd": 2, "ascend": 1}
    assert abs(sum(ev[v].node_days for v in ("nvidia", "amd", "ascend")) - ev["all"].node_days) < 1e-6
    assert ev["amd"].all_faults.recall == 1.0
    assert main(["evaluate", str(out)]) == 0
    assert "per vendor (raswarden / baseline)" in capsys.readouterr().out


def test_a_simulation_is_ticked_as_replay_ticks_it_when_its_step_is_longer_than_the_tick(monkeypatch):
    """A 5-minute cell's simulator steps 60 s: the daemon (and a replay of the trace) still ticks every 30 s, and a
    kernel line is read at the tick of its stamp, not at the end of the step it fell in."""
    from daemon.judgement.pipeline import Pipeline
    from lab.evaluate import evaluate_simulation

    ticks: list[tuple[float, list[float], list[float]]] = []
    real_tick = Pipeline.tick

    def tick(self, now, batch):
        ticks.append((now, batch.events["ts"].tolist(), batch.samples["ts"].tolist()))
        return real_tick(self, now, batch)

    monkeypatch.setattr(Pipeline, "tick", tick)
    ev = evaluate_simulation(mini("mini-60s", duration="2h", resolution="60s",
                                  sampling={"dcgm": {"interval": "5m", "aligned": True},
                                            "node": {"interval": "5m", "aligned": True}}), baseline=False)
    nows = [t[0] for t in ticks]
    assert all(b - a == 30.0 for a, b in zip(nows, nows[1:])) and len(nows) >= 2 * 60 * 2 - 1
    events = [(now, ts) for now, stamps, _ in ticks for ts in stamps]
    assert events and all(now - 30.0 < ts <= now for now, ts in events)
    assert all(ts <= now for now, _, stamps in ticks for ts in stamps)
    assert ev.all_faults.faults > 0


def test_judges_of_one_simulation_score_as_their_own_runs():
    """raswarden and the baseline ticked side by side from one simulation (the matrix's runs) give each the
    evaluation, findings and all, that a simulation of its own gives it."""
    from lab.evaluate import evaluate_simulation, evaluate_simulation_judges

    def sim():
        return mini("mini-mixed", duration="3h", resolution="15s",
                    sampling={"dcgm": {"interval": "15s", "jitter": "1s", "missed": 0.01},
                              "node": {"interval": "60s", "jitter": "1s", "missed": 0.01}})

    ours, base = evaluate_simulation_judges(sim(), [(False, None), (True, None)])
    alone = [evaluate_simulation(sim(), baseline=False), evaluate_simulation(sim(), baseline=True)]
    assert [ours.findings_digest, base.findings_digest] == [e.findings_digest for e in alone]
    assert ours.findings_digest != base.findings_digest  # two judges, not one twice
    assert (ours.flags, base.flags) == (alone[0].flags, alone[1].flags) and ours.all_faults.faults > 0


def test_a_pipeline_that_keeps_its_tick_layout_judges_as_one_that_works_it_out_every_tick(monkeypatch):
    """Issue 56: how a tick's rows split (counters, gauges, their series) is kept while a tick names the same series
    as the last one, and handed out as the same read-only name columns, on which the counter tracker, the gauge hold
    and the detectors keep what they work out from them. A simulated fleet whose parts vanish, reboot and come back
    (so the rows change from tick to tick now and then) is judged alike,
    to the finding, by a pipeline made to work the layout out afresh every tick (every name column a new object).
    (Sampled with jitter, a tick's rows seldom repeat: the closed loop's world, sampled every step, is where it is
    kept.)"""
    from daemon.judgement.pipeline import Pipeline
    from lab.evaluate import evaluate_simulation

    def run():
        return evaluate_simulation(mini("mini-jitter", duration="3h"), False)

    layout = Pipeline._split_layout
    kept = []

    def counting(self, *args):
        before = self._layout_memo
        out = layout(self, *args)
        kept.append(before is not None and out is before[4])
        return out

    monkeypatch.setattr(Pipeline, "_split_layout", counting)
    keeping = run()
    assert 0 < sum(kept) < len(kept)  # the layout was kept on some ticks and worked out again on others

    def afresh(self, *args):
        self._layout_memo = None
        return layout(self, *args)

    monkeypatch.setattr(Pipeline, "_split_layout", afresh)
    again = run()
    assert keeping.findings_digest == again.findings_digest and keeping.flags == again.flags
    assert keeping.all_faults.faults > 0 and keeping.flags


@pytest.mark.parametrize("resolution, sampling", [("15s", "15s"), ("60s", "5m")])
def test_a_simulation_is_judged_alike_whatever_ticks_a_chunk_holds(monkeypatch, resolution, sampling):
    """The simulator's world does not depend on its chunks (lab/sim/streams.py), so the evaluation makes many ticks'
    steps at once and cuts them at the ticks: every tick's batch, row for row, and every finding are those of
    chunks of one tick's steps (jittered, lost scrapes; a step longer than the tick too)."""
    import lab.evaluate
    from daemon.judgement.pipeline import Pipeline
    from lab.evaluate import evaluate_simulation

    every = {"interval": sampling, "jitter": "2s", "missed": 0.02}
    real_tick = Pipeline.tick

    def run(ticks_a_chunk: int) -> tuple:
        batches: list[tuple] = []

        def tick(self, now, batch):
            s = batch.samples
            batches.append((now, np.asarray(s["ts"]).tolist(), np.asarray(s["value"]).tolist(),
                            [str(x) for x in s["entity"]], batch.events["ts"].tolist()))
            return real_tick(self, now, batch)

        monkeypatch.setattr(Pipeline, "tick", tick)
        monkeypatch.setattr(lab.evaluate, "TICKS_A_CHUNK", ticks_a_chunk)
        ev = evaluate_simulation(mini("mini-chunks", duration="3h", resolution=resolution,
                                      sampling={"dcgm": every, "node": every}), False)
        return ev, batches

    one, one_batches = run(1)
    many, many_batches = run(23)
    assert one_batches == many_batches
    assert one.findings_digest == many.findings_digest and one.all_faults.faults > 0


def test_a_simulation_judged_directly_finds_what_a_replay_of_its_trace_finds(tmp_path):
    """The matrix judges a simulation straight from the simulator's chunks; written to a trace (a chunk of up to 240
    steps at a time) and replayed, the same scenario gives the same findings, to the byte (they were two worlds
    while a step's draws depended on its chunk's size)."""
    from daemon.judgement.pipeline import PipelineConfig
    from daemon.replay import replay
    from lab.evaluate import _Collect, evaluate_simulation_judges, findings_digest

    def sim():
        return mini("mini-trace", duration="3h", resolution="15s", noise="realistic",
                    sampling={"dcgm": {"interval": "15s", "jitter": "2s", "missed": 0.02},
                              "node": {"interval": "60s", "jitter": "2s"}})

    direct: list[list[dict]] = []
    evaluate_simulation_judges(sim(), [(False, None)], findings_out=direct)
    simulate_to(sim(), tmp_path / "trace")
    replayed = _Collect()
    replay([tmp_path / "trace"], findings_out=replayed, config=PipelineConfig())
    assert direct[0] and findings_digest(direct[0]) == findings_digest(replayed.findings)
