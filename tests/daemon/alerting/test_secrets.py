"""Secrets never reach a log line, an error message, the outbox or the CLI's output."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.alerting.secrets import RedactingFilter, SecretError, read_secret, redact_url
from daemon.alerting.runner import Alerting
from daemon.config import load
from daemon.store import OutboxRow
from sqlmodel import select
from tests.daemon.alerting.conftest import make_incident

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "T0SECRET/B0SECRET/xoxbSECRETTOKEN42"
SIGNING = "SECsigning-key-that-must-not-leak"


def config(tmp_path: Path, port: int) -> Path:
    (tmp_path / "dingtalk.secret").write_text(SIGNING + "\n")
    os.chmod(tmp_path / "dingtalk.secret", 0o600)
    path = tmp_path / "raswarden.toml"
    path.write_text(f"""
[store]
url = "sqlite:///{tmp_path / 'state.db'}"
[alerting]
group_wait_s = 0
[alerting.delivery]
base_s = 0.1
max_s = 0.2
[[alerting.receivers]]
name = "slack"
type = "slack"
url = "http://127.0.0.1:{port}/services/{TOKEN}"
[[alerting.receivers]]
name = "ding"
type = "dingtalk"
url = "http://127.0.0.1:{port}/robot/send?access_token={TOKEN}"
secret_file = "{tmp_path / 'dingtalk.secret'}"
""")
    return path


def test_no_secret_in_logs_errors_or_outbox(tmp_path, caplog):
    caplog.handler.addFilter(RedactingFilter())
    caplog.set_level(logging.DEBUG)
    cfg = load(config(tmp_path, 9))  # port 9: nothing listens, every delivery fails with the URL in hand
    from daemon.store import Store

    store = Store(cfg.store_url)
    alerting = Alerting.from_config(cfg, store)
    store.record_tick([], [make_incident("sn01-b07/gpu3", at=1000.0)])
    alerting.step(now=1000.0)
    alerting.step(now=1001.0)
    logging.getLogger("raswarden.test").warning("receivers: %r; a careless line with %s", alerting.receivers,
                                                f"http://127.0.0.1:9/services/{TOKEN}")
    with store.session() as s:
        errors = [r.last_error for r in s.exec(select(OutboxRow)).all()]
    store.close()
    assert any("127.0.0.1" in e for e in errors)
    text = caplog.text + "\n".join(errors) + repr(alerting.receivers) + str(alerting.test("slack").error)
    for secret in (TOKEN, SIGNING, "xoxbSECRETTOKEN42"):
        assert secret not in text


def test_cli_output_has_no_secret(tmp_path):
    path = config(tmp_path, 9)
    runs = [subprocess.run([sys.executable, "-m", "daemon", "-vv", "alerts", *args, "--config", str(path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
            for args in (["test", "slack"], ["test", "ding"], ["flush", "--timeout", "1"], ["outbox", "--all"])]
    assert runs[0].returncode == 1 and "not delivered" in runs[0].stderr
    assert runs[3].returncode == 0 and runs[3].stdout == "no notifications\n"  # nothing to tell in this store
    for r in runs:
        assert TOKEN not in r.stdout + r.stderr and SIGNING not in r.stdout + r.stderr


def test_secret_sources(tmp_path, monkeypatch):
    f = tmp_path / "s"
    f.write_text("from-file-secret\n")
    f.chmod(0o644)
    with pytest.raises(SecretError, match="readable by group or others"):
        read_secret("alerting.receivers[0].secret", file=str(f))
    f.chmod(0o600)
    assert read_secret("k", file=str(f)) == "from-file-secret"
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    (tmp_path / "slack_url").write_text("https://hooks.slack.com/services/X/Y/Z")
    assert read_secret("k", credential="slack_url").endswith("/X/Y/Z")
    with pytest.raises(SecretError, match="k: missing"):
        read_secret("k")


def test_redact_url_keeps_only_where():
    assert redact_url(f"https://hooks.slack.com/services/{TOKEN}") == "https://hooks.slack.com/<secret>"
    assert redact_url("https://oapi.dingtalk.com/robot/send?access_token=abc") == \
        "https://oapi.dingtalk.com/<secret>"


def test_credentials_under_systemd_and_from_a_shell(tmp_path, monkeypatch):
    """Under systemd the unit loads the whole credentials directory (``raswarden_NAME``) and an operator may add
    their own ``LoadCredential=NAME``; from a shell (check-config as root) the directory itself is read."""
    loaded = tmp_path / "run-creds"
    loaded.mkdir()
    (loaded / "raswarden_slack_url").write_text("https://hooks.slack.com/services/A/B/C")
    (loaded / "teams_url").write_text("https://teams.example/workflows/D")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(loaded))
    assert read_secret("k", credential="slack_url").endswith("/A/B/C")
    assert read_secret("k", credential="teams_url").endswith("/D")
    with pytest.raises(SecretError) as missing:
        read_secret("alerting.receivers[2].url", credential="wecom_url")
    assert "alerting.receivers[2].url_credential 'wecom_url': no such credential" in str(missing.value)
    assert "raswarden_wecom_url" in str(missing.value) and "_file" not in str(missing.value)

    monkeypatch.delenv("CREDENTIALS_DIRECTORY")
    store = tmp_path / "etc-creds"
    store.mkdir()
    (store / "slack_url").write_text("https://hooks.slack.com/services/E/F/G")
    (store / "slack_url").chmod(0o600)
    monkeypatch.setenv("RASWARDEN_CREDENTIALS_DIRECTORY", str(store))
    assert read_secret("k", credential="slack_url").endswith("/E/F/G")


def test_a_credential_not_there_turns_its_receiver_and_the_api_off_not_the_daemon(tmp_path, monkeypatch, capsys):
    from daemon.alerting.runner import Alerting
    from daemon.cli import main
    from daemon.config import load
    from daemon.store import Store

    creds = tmp_path / "creds"
    creds.mkdir()  # empty: as after install, before the operator adds any secret
    monkeypatch.setenv("RASWARDEN_CREDENTIALS_DIRECTORY", str(creds))
    config = tmp_path / "raswarden.toml"
    config.write_text(f"""[store]
url = "sqlite:///{tmp_path / 'r.db'}"
[http]
token_credential = "api_token"
[alerting]
[[alerting.receivers]]
name = "generic"
type = "webhook"
url = "http://127.0.0.1:9/hook"
[[alerting.receivers]]
name = "oncall"
type = "slack"
url_credential = "slack_url"
""")
    cfg = load(config)
    assert cfg.http.token is None and "api_token" in cfg.http.token_error
    alerting = Alerting.from_config(cfg, Store(cfg.store_url))
    assert set(alerting.receivers) == {"generic"} and "slack_url" in alerting.unavailable["oncall"]
    assert "is off" in alerting.test("oncall").error
    assert main(["check-config", "--config", str(config)]) == 0
    err = capsys.readouterr().err
    assert "WARNING: receiver oncall is off: alerting.receivers[1].url_credential 'slack_url'" in err
    assert "WARNING: the API's write calls are off" in err



def test_only_a_urls_token_like_pieces_are_secrets():
    """Issue 54: a plain receiver path (/raswarden) was registered, and every log line with /var/lib/raswarden read
    /var/lib<secret><secret>.db."""
    from daemon.alerting.secrets import register, scrub

    register("http://127.0.0.1:9095/raswarden")
    assert scrub("opened /var/lib/raswarden/raswarden.db") == "opened /var/lib/raswarden/raswarden.db"
    register("https://hooks.slack.com/services/T0AB1CD2E/B0FG3HI4J/XxYyZz0123456789AbCdEfGh")
    said = scrub("POST /services/T0AB1CD2E/B0FG3HI4J/XxYyZz0123456789AbCdEfGh failed")
    assert "T0AB1CD2E" not in said and "XxYyZz0123456789AbCdEfGh" not in said and "/services/" in said
    register("https://oapi.dingtalk.com/robot/send?access_token=0123abcd4567ef")
    assert "0123abcd4567ef" not in scrub("token 0123abcd4567ef refused")
