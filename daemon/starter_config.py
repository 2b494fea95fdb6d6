"""The minimal config an operator starts from: safe to copy (dry-run, every alert to the chat receiver, no secret
needed to start). ``systemd/raswarden.toml`` is this text with its defaults (a test keeps them equal);
``raswarden init`` writes it with the targets and topology it found."""

from __future__ import annotations

import json

_TEMPLATE = """\
# raswarden: a minimal configuration that is safe to copy (/etc/raswarden/raswarden.toml).
#
# * dry-run: raswarden decides and records what it would do (checkpoint, drain, resume) and does nothing;
#   watch what it would have done for a week, then set [playbooks] mode = "act".
# * every alert reaches the chat receiver, failed parts included.
# * no secret is needed to start: put the chat webhook URL in /etc/raswarden/credentials/slack_url (root,
#   0600) when you have it; until then the receiver is off, check-config and /healthz say so, and its alerts
#   wait in the outbox.
#
# Every other key, with its default: raswarden.toml.example (docs/install.md). Check with
#   sudo raswarden check-config --config /etc/raswarden/raswarden.toml

[service]
interval_s = 30
# Racks, address aliases, Slurm names, PCI ids and switch ports (docs/replay.md): optional, but alerts can
# only say where a part is (rack, serial, PCI, far end of a cable) from it.
{topology}

[[collectors]]
# dcgm-exporter (:9400) and node_exporter (:9100) of every blade: the file_sd file Prometheus uses.
type = "exposition"
name = "exporters"
{targets}

[[collectors]]
# The kernel lines (Xid, AER, EDAC, MCE, link) the nodes forward to this host (systemd-journal-remote).
type = "journald"
name = "kernel"
args = ["--directory=/var/log/journal/remote"]

[alerting]
# Base URL of the status page, linked from every message (each incident's own page).
status_url = "http://localhost:9470"
default_receivers = ["chat"]

[[alerting.receivers]]
name = "chat"
type = "slack"                  # or mattermost, teams, feishu, dingtalk, wecom, webhook, alertmanager
url_credential = "slack_url"

[playbooks]
mode = "dry-run"

[scheduler]
type = "slurm"
checkpoint_comment = "raswarden:checkpoint"
"""


def minimal_config(file_sd: list[str] | None = None, targets: list[str] | None = None,
                   topology: str | None = None) -> str:
    """The minimal config's text: scraping ``targets`` or the ``file_sd`` files (default
    /etc/raswarden/targets.json), with ``topology`` when given."""
    if targets:
        where = f"targets = {json.dumps(targets)}"
    else:
        where = f"file_sd = {json.dumps(file_sd or ['/etc/raswarden/targets.json'])}"
    topo = f"topology = {json.dumps(topology)}" if topology else '# topology = "/etc/raswarden/topology.yaml"'
    return _TEMPLATE.format(topology=topo, targets=where)
