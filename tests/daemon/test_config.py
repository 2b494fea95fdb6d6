"""The config file: validated, errors naming the key."""

from __future__ import annotations

import pytest

from daemon.config import ConfigError, load, parse


def test_minimal_and_defaults(tmp_path):
    cfg = parse({})
    assert cfg.store_url.startswith("sqlite:////var/lib/raswarden")
    assert cfg.alerting.group_wait_s == 30 and cfg.receivers == []


@pytest.mark.parametrize("raw,message", [
    ({"alerting": {"group_wait_s": "soon"}}, "alerting.group_wait_s: expected float"),
    ({"alerting": {"receivers": [{"name": "x", "type": "pager", "url": "http://a/b"}]}},
     "alerting.receivers[0].type: unknown receiver type 'pager'"),
    ({"alerting": {"receivers": [{"name": "x", "type": "slack"}]}}, "alerting.receivers[0].url: missing"),
    ({"alerting": {"receivers": [{"name": "x", "type": "feishu", "url": "http://a/b"}]}},
     "alerting.receivers[0].secret: required"),
    ({"alerting": {"receivers": [{"name": "x", "type": "slack", "url": "http://a/b", "chanel": "#a"}]}},
     "alerting.receivers[0]: unknown key(s) chanel"),
    ({"alerting": {"routes": [{"receivers": ["nobody"]}]}}, "alerting.routes[0].receivers: no receiver named"),
    ({"alerting": {"receivers": [{"name": "x", "type": "webhook", "url": "file:///etc/passwd"}]}},
     "alerting.receivers[0].url: the scheme must be http or https, not 'file'"),
    ({"alerting": {"receivers": [{"name": "x", "type": "webhook", "url": "ftp://h/x"}]}},
     "alerting.receivers[0].url: the scheme must be http or https, not 'ftp'"),
    ({"alerting": {"receivers": [{"name": "x", "type": "webhook", "url": "javascript:alert(1)"}]}},
     "alerting.receivers[0].url: the scheme must be http or https, not 'javascript'"),
    ({"alerting": {"receivers": [{"name": "x", "type": "webhook", "url": "http:///hook/t0ken"}]}},
     "alerting.receivers[0].url: no host in http:///"),
    ({"alertng": {}}, "top level: unknown key(s) alertng"),
    ({"alerting": {"runbooks": {"gpu_memroy": "see wiki"}}}, "alerting.runbooks.gpu_memroy: not a category"),
    ({"http": {"max_connections": 0}}, "http.max_connections, http.max_connections_per_peer and "
                                      "http.request_timeout_s: must be positive"),
    ({"http": {"max_connections_per_peer": 0}}, "http.max_connections, http.max_connections_per_peer and "
                                               "http.request_timeout_s: must be positive"),
    ({"service": {"interval_s": float("nan")}}, "service.interval_s: must be a finite number, got nan"),
    ({"service": {"interval_s": float("inf")}}, "service.interval_s: must be a finite number, got inf"),
    ({"service": {"interval_s": 1e308}}, "service.interval_s: must be from 0.1 s to 86400 s (a day), got 1e+308"),
    ({"service": {"interval_s": 1e-6}}, "service.interval_s: must be from 0.1 s to 86400 s (a day), got 1e-06"),
    ({"alerting": {"group_wait_s": float("nan")}}, "alerting.group_wait_s: must be a finite number"),
    ({"advice": {"quantile": 1.0}}, "advice.quantile: from 0.5"),
    ({"advice": {"cost_s": -1}}, "advice.cost_s: must be positive"),
    ({"advice": {"min_interval_s": 7200, "max_interval_s": 3600}}, "advice.max_interval_s: must be at least"),
    ({"advice": {"directroy": "/x"}}, "advice: unknown key(s) directroy"),
])
def test_errors_name_the_key(raw, message):
    with pytest.raises(ConfigError) as exc:
        parse(raw)
    assert message in str(exc.value)


def test_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "raswarden.toml"
    bad.write_text("[alerting\n")
    with pytest.raises(ConfigError, match="raswarden.toml"):
        load(bad)
    with pytest.raises(ConfigError, match="No such file"):
        load(tmp_path / "missing.toml")


def test_example_config_is_valid(tmp_path, monkeypatch):
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "systemd" / "raswarden.toml.example"
    text = example.read_text().replace("/var/lib/raswarden", str(tmp_path))
    (tmp_path / "ex.toml").write_text(text)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    for name in ("slack_url", "feishu_secret", "feishu_url", "dingtalk_url", "dingtalk_secret", "wecom_url",
                 "teams_url", "mattermost_url", "api_token", "jira_token", "servicenow_token"):
        (tmp_path / name).write_text(f"http://127.0.0.1:1/{name}")
    cfg = load(tmp_path / "ex.toml")
    from daemon.ingest.collectors import REGISTRY

    # every collector type is documented with every key it takes
    assert {c["type"] for c in cfg.collectors} == set(REGISTRY)
    for c in cfg.collectors:
        assert set(REGISTRY[c["type"]].options) <= set(c), c["type"]
    assert cfg.http.token and cfg.service.interval_s == 30
    from daemon.alerting.receivers import RECEIVERS

    assert {r.type for r in cfg.receivers} == set(RECEIVERS)  # every receiver type is documented


def test_an_operators_runbook_line_replaces_the_shipped_one():
    from daemon.alerting.runbooks import RUNBOOKS, runbook_for

    cfg = parse({"alerting": {"runbooks": {"fabric_link": "https://wiki.example/ib-link"}}})
    assert runbook_for("fabric_link", cfg.alerting.runbooks) == "https://wiki.example/ib-link"
    assert runbook_for("gpu_bus", cfg.alerting.runbooks) == RUNBOOKS["gpu_bus"]


def test_the_minimal_config_is_safe_to_copy(tmp_path, monkeypatch):
    """Dry-run, every alert (a failed part's too) reaches the chat receiver, and it loads with no secret there."""
    from pathlib import Path

    from daemon.alerting.alert import Alert, Notification
    from daemon.alerting.routing import route

    systemd = Path(__file__).resolve().parents[2] / "systemd"
    monkeypatch.setenv("RASWARDEN_CREDENTIALS_DIRECTORY", str(tmp_path))  # empty, as after install
    failed = Notification("rack=r01,category=gpu_bus", 1, 0.0, [Alert(
        "inc-1", "firing", "critical", "failed", "n1/gpu0", "accelerator", "gpu_bus", "r01", "n1/gpu0 has failed",
        [], 0.0)])
    for name, chat in (("raswarden.toml", "chat"), ("raswarden.toml.example", "oncall-slack")):
        (tmp_path / name).write_text((systemd / name).read_text().replace("/var/lib/raswarden", str(tmp_path)))
        cfg = load(tmp_path / name)
        assert cfg.guards.mode == "dry-run", name
        assert chat in route(failed, cfg.alerting.routes, cfg.alerting.default_receivers), name
        assert any(r.name == chat and r.unavailable for r in cfg.receivers), name  # off until its secret is there
