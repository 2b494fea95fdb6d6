"""Alert receivers, one module each, and the registry that config ``type`` names."""

from __future__ import annotations

from daemon.alerting.receivers.alertmanager import AlertmanagerReceiver
from daemon.alerting.receivers.receiver import Receiver, ReceiverConfig
from daemon.alerting.receivers.dingtalk import DingTalkReceiver
from daemon.alerting.receivers.feishu import FeishuReceiver
from daemon.alerting.receivers.jira import JiraReceiver
from daemon.alerting.receivers.mattermost import MattermostReceiver
from daemon.alerting.receivers.servicenow import ServiceNowReceiver
from daemon.alerting.receivers.slack import SlackReceiver
from daemon.alerting.receivers.teams import TeamsReceiver
from daemon.alerting.receivers.ticket import GenericTicketReceiver
from daemon.alerting.receivers.webhook import WebhookReceiver
from daemon.alerting.receivers.wecom import WeComReceiver

RECEIVERS: dict[str, type[Receiver]] = {r.type: r for r in (
    WebhookReceiver, AlertmanagerReceiver, SlackReceiver, MattermostReceiver, TeamsReceiver, FeishuReceiver,
    DingTalkReceiver, WeComReceiver, JiraReceiver, ServiceNowReceiver, GenericTicketReceiver)}


def build(config: ReceiverConfig, renderer=None) -> Receiver:
    """The receiver for one config entry; ValueError names an unknown type."""
    cls = RECEIVERS.get(config.type)
    if cls is None:
        raise ValueError(f"receiver {config.name!r}: unknown type {config.type!r} "
                         f"(one of {', '.join(sorted(RECEIVERS))})")
    return cls(config, renderer)
