"""Every receiver against a real local HTTP server: method, headers, payload shape as each platform
documents it, signatures checked by an independent implementation, limits, and the platform's errors."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from urllib.parse import unquote_plus

import pytest

from daemon.alerting.alert import Alert, Notification
from daemon.alerting.http import Response, post
from daemon.alerting.receivers import RECEIVERS, build
from daemon.alerting.receivers.receiver import ReceiverConfig
from daemon.alerting.render import Renderer

NOW = 1_780_000_000.0


def alert(i: int = 3, status: str = "firing", state: str = "subhealthy", evidence: list[str] | None = None) -> Alert:
    return Alert(incident_id=f"inc-{i:04d}", status=status, severity="critical" if state == "failed" else "warning",
                 state=state, entity=f"sn01-b07/gpu{i}", kind="accelerator", category="gpu_memory", rack="r01",
                 summary=f"sn01-b07/gpu{i} is {state}: GPU memory degrading",
                 evidence=evidence or [f"gpu{i} HBM correctable ECC 41/h (peers 0.2/h), rising for 5 h"],
                 started_at=NOW - 600, ended_at=NOW if status == "resolved" else None,
                 action="playbook subhealthy-node: drain done (dry run)")


def note(*alerts: Alert, seq: int = 1) -> Notification:
    return Notification("rack=r01,category=gpu_memory", seq, NOW, list(alerts), "http://mgmt01:9470")


def receiver(kind: str, url: str, **options):
    secret = options.pop("secret", None)
    return build(ReceiverConfig(name=f"{kind}-test", type=kind, url=url, secret=secret, options=options),
                 Renderer(status_url="http://mgmt01:9470"))


def deliver(r, n: Notification, now: float = NOW):
    req = r.request(n, now)
    req.headers.setdefault("Idempotency-Key", n.key)
    return r.outcome(post(req))


def test_registry_has_the_eight_platforms_and_three_trackers():
    assert set(RECEIVERS) == {"webhook", "alertmanager", "slack", "mattermost", "teams", "feishu", "dingtalk",
                              "wecom", "jira", "servicenow", "ticket"}


def test_generic_webhook_is_alertmanagers_version_4_payload(chat):
    r = receiver("webhook", chat.url("/alert"), headers={"X-Team": "hpc"})
    assert deliver(r, note(alert(3), alert(5))).ok
    got = chat.received[0]
    assert got.method == "POST" and got.path == "/alert"
    assert got.headers["content-type"].startswith("application/json")
    assert got.headers["x-team"] == "hpc" and got.headers["idempotency-key"] == "rack=r01,category=gpu_memory#1"
    body = got.json()
    assert set(body) == {"version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels",
                         "commonLabels", "commonAnnotations", "externalURL", "alerts"}
    assert body["version"] == "4" and body["status"] == "firing" and body["truncatedAlerts"] == 0
    assert body["groupLabels"] == {"rack": "r01", "category": "gpu_memory"}
    assert body["commonLabels"]["rack"] == "r01" and "entity" not in body["commonLabels"]
    a = body["alerts"][0]
    assert set(a) == {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}
    assert a["labels"]["entity"] == "sn01-b07/gpu3" and a["labels"]["severity"] == "warning"
    assert a["endsAt"] == "0001-01-01T00:00:00Z" and a["startsAt"].endswith("Z")
    assert "41/h" in a["annotations"]["description"]
    assert "raswarden silence add incident=inc-0003" in a["annotations"]["commands"]
    assert a["generatorURL"] == "http://mgmt01:9470/incidents/inc-0003"


def test_webhook_truncates_long_groups_and_counts_what_it_left_out(chat):
    r = build(ReceiverConfig(name="w", type="webhook", url=chat.url(), max_alerts=3))
    assert deliver(r, note(*[alert(i) for i in range(8)])).ok
    body = chat.received[0].json()
    assert len(body["alerts"]) == 3 and body["truncatedAlerts"] == 5


def test_alertmanager_api_v2_postable_alerts(chat):
    r = receiver("alertmanager", chat.url(""))
    assert deliver(r, note(alert(1), alert(2, status="resolved"))).ok
    got = chat.received[0]
    assert got.path == "/api/v2/alerts"
    body = got.json()
    assert isinstance(body, list) and len(body) == 2
    for a in body:
        assert set(a) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
        assert a["labels"]["alertname"] == "raswarden_gpu_memory"
    firing, resolved = body
    assert firing["endsAt"] > firing["startsAt"]  # held open ahead (Alertmanager would resolve it otherwise)
    assert resolved["endsAt"].startswith("2026-05-28")  # its real end (NOW)


def test_slack_blocks_within_limits_and_escaped(chat):
    long_evidence = [f"reason {i} <!channel> & more " + "x" * 200 for i in range(40)]
    r = receiver("slack", chat.url("/services/T000/B000/XXXX"), channel="#hpc-oncall")
    assert deliver(r, note(alert(1, evidence=long_evidence), alert(2))).ok
    body = chat.received[0].json()
    assert body["channel"] == "#hpc-oncall" and body["text"].startswith("[WARNING]")
    blocks = body["blocks"]
    assert blocks[0]["type"] == "header" and blocks[0]["text"]["type"] == "plain_text"
    assert len(blocks[0]["text"]["text"]) <= 150 and len(blocks) <= 50
    sections = [b for b in blocks if b["type"] == "section"]
    assert sections and all(b["text"]["type"] == "mrkdwn" and len(b["text"]["text"]) <= 3000 for b in sections)
    text = "\n".join(b["text"]["text"] for b in sections)
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text  # no one gets pinged by a log line
    assert "raswarden silence add incident=inc-0001" in text


@pytest.mark.parametrize("status,body,retry", [(400, b"invalid_payload", False), (404, b"channel_not_found", False),
                                               (410, b"channel_is_archived", False), (500, b"", True)])
def test_slack_errors(chat, status, body, retry):
    chat.answers.append((status, {"Content-Type": "text/plain"}, body))
    out = deliver(receiver("slack", chat.url()), note(alert()))
    assert not out.ok and out.retry is retry
    if body:
        assert body.decode() in out.error


def test_rate_limited_answer_is_retried_after_the_platforms_delay(chat):
    chat.answers.append((429, {"Retry-After": "17"}, b"rate_limited"))
    out = deliver(receiver("slack", chat.url()), note(alert()))
    assert out.retry and out.retry_after == 17.0


def test_mattermost_markdown_text_and_limit(chat):
    r = receiver("mattermost", chat.url("/hooks/xxx-generatedkey-xxx"), username="raswarden", channel="hpc")
    many = [alert(i, evidence=["y" * 900] * 30) for i in range(20)]
    assert deliver(r, note(*many)).ok
    body = chat.received[0].json()
    assert body["username"] == "raswarden" and body["channel"] == "hpc"
    assert body["text"].startswith("#### [WARNING] 20 incidents in rack r01: GPU memory")
    assert len(body["text"]) <= 16383 and "[truncated:" in body["text"]
    assert body["props"]["raswarden_key"] == "rack=r01,category=gpu_memory#1"


def test_teams_workflows_adaptive_card(chat):
    chat.default = (202, {}, b"")
    r = receiver("teams", chat.url("/workflows/abc/triggers/manual/paths/invoke"))
    assert deliver(r, note(alert(1, state="failed"))).ok
    body = chat.received[0].json()
    assert body["type"] == "message" and len(body["attachments"]) == 1
    att = body["attachments"][0]
    assert att["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = att["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4" and card["$schema"].startswith("http")
    kinds = [b["type"] for b in card["body"]]
    assert kinds[0] == "TextBlock" and "FactSet" in kinds
    assert card["body"][0]["color"] == "Attention" and card["body"][0]["text"].startswith("[CRITICAL]")
    assert card["actions"][0] == {"type": "Action.OpenUrl", "title": "Status page",
                                  "url": "http://mgmt01:9470/incidents"}


def feishu_expected_sign(timestamp: str, secret: str) -> str:
    # Independent of the module: the string to sign is the HMAC *key*, the message is empty (Feishu's docs).
    mac = hmac.HMAC(key=(timestamp + "\n" + secret).encode("utf-8"), msg=None, digestmod="sha256")
    return base64.standard_b64encode(mac.digest()).decode("ascii")


def test_feishu_signed_card(chat):
    chat.default = (200, {"Content-Type": "application/json"}, b'{"code":0,"msg":"success","data":{}}')
    r = receiver("feishu", chat.url("/open-apis/bot/v2/hook/abcdef"), secret="feishu-signing-secret")
    now = time.time()
    assert deliver(r, note(alert(1)), now).ok
    body = chat.received[0].json()
    assert body["timestamp"] == str(int(now)) and isinstance(body["timestamp"], str)
    assert body["sign"] == feishu_expected_sign(body["timestamp"], "feishu-signing-secret")
    assert body["msg_type"] == "interactive"
    card = body["card"]
    assert card["header"]["title"]["tag"] == "plain_text" and card["header"]["template"] == "orange"
    assert card["elements"][0]["text"]["tag"] == "lark_md" and "41/h" in card["elements"][0]["text"]["content"]


@pytest.mark.parametrize("code,retry", [(19021, False), (11232, True)])
def test_feishu_error_codes_in_a_200(chat, code, retry):
    chat.default = (200, {}, json.dumps({"code": code, "msg": "sign match fail or timestamp is not within one hour "
                                         "from current time" if code == 19021 else "frequency limited"}).encode())
    out = deliver(receiver("feishu", chat.url(), secret="s3cr3t-feishu"), note(alert()))
    assert not out.ok and out.retry is retry and str(code) in out.error


def dingtalk_expected_sign(timestamp_ms: str, secret: str) -> str:
    # Independent: key = secret, message = "timestamp\nsecret", base64 (the robot's docs); the query is decoded.
    digest = hmac.new(secret.encode("utf-8"), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def test_dingtalk_signed_markdown(chat):
    chat.default = (200, {}, b'{"errcode":0,"errmsg":"ok"}')
    r = receiver("dingtalk", chat.url("/robot/send?access_token=tok123456"), secret="SECdingtalk-secret-0001")
    now = time.time()
    assert deliver(r, note(alert(1)), now).ok
    got = chat.received[0]
    assert got.query["access_token"] == ["tok123456"]
    ts = got.query["timestamp"][0]
    assert abs(int(ts) - now * 1000) < 1000 and len(ts) == 13  # milliseconds
    assert got.query["sign"][0] == dingtalk_expected_sign(ts, "SECdingtalk-secret-0001")
    raw_sign = got.raw_query.split("sign=", 1)[1]
    assert unquote_plus(raw_sign) == got.query["sign"][0] and not set("+/=") & set(raw_sign)  # URL-encoded
    body = got.json()
    assert body["msgtype"] == "markdown" and body["markdown"]["title"].startswith("[WARNING]")
    assert body["markdown"]["text"].startswith("#### [WARNING]")


def test_dingtalk_too_fast_is_retried(chat):
    chat.default = (200, {}, b'{"errcode":130101,"errmsg":"send too fast, exceed 20 times per minute"}')
    out = deliver(receiver("dingtalk", chat.url("/robot/send?access_token=t"), secret="SECx-123456"), note(alert()))
    assert out.retry and out.retry_after == 60.0


def test_wecom_markdown_under_4096_bytes(chat):
    chat.default = (200, {}, b'{"errcode":0,"errmsg":"ok"}')
    r = receiver("wecom", chat.url("/cgi-bin/webhook/send?key=693axxx6-7aoc-4bc4"))
    many = [alert(i, evidence=["机架过热 " * 40] * 5) for i in range(10)]  # multi-byte text
    assert deliver(r, note(*many)).ok
    body = chat.received[0].json()
    assert body["msgtype"] == "markdown"
    content = body["markdown"]["content"]
    assert len(content.encode("utf-8")) <= 4096 and "[truncated:" in content
    assert content.startswith("### [WARNING]")


def test_wecom_error_codes(chat):
    chat.answers += [(200, {}, b'{"errcode":45009,"errmsg":"api freq out of limit"}'),
                     (200, {}, b'{"errcode":93000,"errmsg":"invalid webhook url"}')]
    r = receiver("wecom", chat.url("/cgi-bin/webhook/send?key=k-123456"))
    first, second = deliver(r, note(alert())), deliver(r, note(alert()))
    assert first.retry and not second.ok and not second.retry and "93000" in second.error


def test_unreachable_receiver_is_retried_and_its_url_token_not_shown():
    r = receiver("slack", "http://127.0.0.1:9/services/T000/B000/SECRETTOKEN")
    out = r.outcome(post(r.request(note(alert()), NOW), timeout=2))
    assert out.retry and "SECRETTOKEN" not in out.error and "127.0.0.1" in out.error


def test_resolved_message(chat):
    r = receiver("mattermost", chat.url())
    assert deliver(r, note(alert(1, status="resolved"))).ok
    text = chat.received[0].json()["text"]
    assert text.startswith("#### [RESOLVED]") and "**RESOLVED** sn01-b07/gpu1" in text


def test_operator_template_overrides_the_shipped_one(chat, tmp_path):
    (tmp_path / "mattermost.body.j2").write_text("{% for a in n.firing %}ON CALL: {{ a.entity }}{% endfor %}")
    r = build(ReceiverConfig(name="m", type="mattermost", url=chat.url()), Renderer(tmp_path))
    assert deliver(r, note(alert(4))).ok
    assert chat.received[0].json()["text"].endswith("ON CALL: sn01-b07/gpu4")


def test_signed_receivers_refuse_to_run_without_a_secret():
    with pytest.raises(ValueError, match="secret"):
        build(ReceiverConfig(name="f", type="feishu", url="http://127.0.0.1:1/x"))


def test_generic_http_outcome_rules():
    from daemon.alerting.http import http_outcome

    assert http_outcome(Response(204, {}, b"")).ok
    assert http_outcome(Response(503, {"retry-after": "5"}, b"busy")).retry_after == 5.0
    assert not http_outcome(Response(403, {}, b"forbidden")).retry
