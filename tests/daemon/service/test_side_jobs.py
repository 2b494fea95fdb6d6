"""The service's other jobs: housekeeping trims by retention, retraining swaps in a model that loads (and
keeps running without one that does not), and the status/incidents commands read the store."""

from __future__ import annotations

import time

from sqlmodel import select

from daemon.cli import main
from daemon.config import parse
from daemon.service.service import Service
from daemon.store import AlertRow, FindingRow, IncidentRow, OutboxRow


def service(tmp_path, **service_keys) -> Service:
    raw = {"store": {"url": f"sqlite:///{tmp_path / 'state.db'}"}, "http": {"listen": "127.0.0.1:1"},
           "service": {"interval_s": 30, **service_keys}}
    return Service(parse(raw))


def test_housekeeping_removes_what_is_older_than_the_retention(tmp_path):
    svc = service(tmp_path, retention_days=1)
    now = time.time()
    old, new = now - 2 * 86400, now - 3600
    with svc.store.session() as s:
        for ts in (old, new):
            s.add(FindingRow(ts=ts, entity="n1/gpu0", kind="accelerator", state="subhealthy", score=1.0,
                             detector="rules", reasons=[]))
            s.add(OutboxRow(idempotency_key=f"g#{ts}", receiver="chat", group_key="g", status="delivered",
                            created_at=ts, payload={}))
            s.add(AlertRow(incident_id=f"inc-{ts}", group_key="g", status="done", digest="", updated_at=ts))
        s.add(OutboxRow(idempotency_key="g#pending", receiver="chat", group_key="g", status="pending",
                        created_at=old, payload={}))
        s.commit()
    assert svc.housekeeping() == {"findings": 1, "outbox": 1, "alerts": 1}
    with svc.store.session() as s:
        assert len(s.exec(select(OutboxRow)).all()) == 2  # a pending notification is never trimmed
    svc.stop()


def test_retraining_uses_a_model_that_loads(tmp_path, monkeypatch):
    from tests.lab.test_train import simulate

    traces = [str(simulate(tmp_path / f"t{seed}", seed)) for seed in (3, 4)]
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    svc = service(tmp_path, retrain_interval_s=86400, retrain_traces=traces)
    assert not any(d.name in ("multivariate", "predictor") for d in svc.pipeline.detectors)
    assert svc.retrain()
    assert {"multivariate", "predictor"} <= {d.name for d in svc.pipeline.detectors}
    assert list((tmp_path / "state").glob("model-*/model.json"))
    svc.cfg.service.retrain_traces = [str(tmp_path / "no-such-trace")]
    assert not svc.retrain()  # a failed training keeps the running model
    assert {"multivariate", "predictor"} <= {d.name for d in svc.pipeline.detectors}
    svc.stop()


def test_status_and_incidents_commands(tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'state.db'}"
    config = tmp_path / "raswarden.toml"
    config.write_text(f'[store]\nurl = "{db}"\n[http]\nlisten = "127.0.0.1:1"\n')
    svc = service(tmp_path)
    with svc.store.session() as s:
        s.add(IncidentRow(id="inc-1", fingerprint="n1/gpu0|gpu_memory", entity="n1/gpu0", kind="accelerator",
                          category="gpu_memory", severity="subhealthy", status="open", opened_at=1.0, updated_at=1.0,
                          evidence=["gpu0 correctable ECC 41/h (peers 0.2/h)"]))
        s.commit()
    svc.cycle()  # takes the shard's lease
    assert main(["status", "--config", str(config)]) == 1  # no daemon answers on its http port
    out = capsys.readouterr().out
    assert "shard default: held by" in out and "open incidents: 1 (1 subhealthy)" in out and "not answering" in out
    assert "shard default: no warm state saved" in out
    from daemon.judgement import warmstate

    warmstate.save(svc.store, "default", svc.pipeline, time.time() - 600)
    main(["status", "--config", str(config)])
    assert "shard default: warm state saved" in capsys.readouterr().out
    assert main(["incidents", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "inc-1" in out and "gpu0 correctable ECC 41/h" in out
    svc.stop()
