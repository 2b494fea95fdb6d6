"""Reading a playbook's values: durations, argument lists, placeholders; :class:`PlaybookError` names the key.

Shared by the playbook model (:mod:`playbooks.model`) and the steps (:mod:`playbooks.steps`), which read their
own parameters.
"""

from __future__ import annotations

import re
from typing import Any

from playbooks.duration import parse_duration

SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP")
PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
PLACEHOLDERS = {"incident", "node", "entity", "category", "state", "rack", "job", "playbook"}


class PlaybookError(ValueError):
    """A playbook is malformed; the message names the file and the key."""


def duration(value: Any, where: str) -> float:
    """Seconds from ``90``, ``"15m"``, ``"1h"`` ..."""
    try:
        return parse_duration(value, where)
    except ValueError as exc:
        raise PlaybookError(str(exc)) from None


def templates(value: str, where: str) -> None:
    """Refuse a placeholder that no action fills (see :data:`PLACEHOLDERS`)."""
    for name in PLACEHOLDER.findall(value):
        if name not in PLACEHOLDERS:
            raise PlaybookError(f"{where}: unknown placeholder {{{name}}} (one of {', '.join(sorted(PLACEHOLDERS))})")


def argv(value: Any, where: str) -> list[str]:
    """An argument list of strings (never a shell string), each a template."""
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise PlaybookError(f"{where}: an argument list, e.g. [\"/usr/bin/ticket\", \"--node\", \"{{node}}\"] "
                            "(never a shell string)")
    for i, v in enumerate(value):
        templates(v, f"{where}[{i}]")
    return list(value)


def render(template: str, values: dict[str, str]) -> str:
    """A template with its placeholders filled (an unknown one is left as written)."""
    return re.sub(r"\{([a-z_]+)\}", lambda m: values.get(m.group(1), m.group(0)), template)
