"""One golden example per receiver (docs/alert-examples.md, written by scripts/render_alert_examples.py): what an
on-call person needs is in every receiver's request, and the document is what the code sends today."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _examples():
    script = ROOT / "scripts" / "render_alert_examples.py"
    spec = importlib.util.spec_from_file_location("render_alert_examples", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_receiver_says_where_what_was_done_what_to_do_and_links_the_incident():
    examples = _examples()
    assert set(examples.requests()) >= {"webhook", "alertmanager", "slack", "mattermost", "teams", "feishu",
                                         "dingtalk", "wecom"}
    for kind, (_receiver, request) in examples.requests().items():
        text = json.dumps(request.body, ensure_ascii=False)
        for needed in ("rack r01", "serial 1652222014738", "UUID GPU-5f3c1a2e", "PCI 00000000:9B:00.0",  # where
                       "jobs 48213 alice",  # who it touches
                       "done: checkpoint; next drain",  # what raswarden did
                       "RMA the GPU by the serial above",  # what to do next
                       "/incidents/inc-3f9c2a1b7e"):  # the incident's own page
            assert needed in text, (kind, needed)


def test_the_document_is_what_the_code_sends():
    assert (ROOT / "docs" / "alert-examples.md").read_text() == _examples().render(), \
        "run scripts/render_alert_examples.py"
