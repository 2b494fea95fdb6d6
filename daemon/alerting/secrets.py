"""Secrets (webhook URLs with tokens, signing keys): where they come from, and keeping them out of logs.

A secret is read from the config value itself, a file (``*_file``, which must not be readable by
others) or a systemd credential (``*_credential``: :func:`credential_path`). Every secret read is registered
with :class:`RedactingFilter`, which replaces it in
every log record; error messages name URLs through :func:`redact_url` (scheme and host only).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path
from urllib.parse import urlsplit

REDACTED = "<secret>"
_known: set[str] = set()
_lock = threading.Lock()


class SecretError(ValueError):
    """A secret could not be read (the message names the key and the file, never the value)."""


def token_like(piece: str) -> bool:
    """A URL's path segment or query value that can be a token: 16 characters or more, or 8 or more mixing letters
    and digits (Slack's T00000000 and its 24-letter key, Feishu's UUID, WeCom's key). A plain word of a path
    (``/raswarden``, ``/api/v2/alerts``) is not: registered, it turned every ``/var/lib/raswarden`` in the log into
    ``/var/lib<secret>``."""
    if len(piece) >= 16:
        return True
    return len(piece) >= 8 and any(c.isdigit() for c in piece) and any(c.isalpha() for c in piece)


def register(value: str) -> str:
    """Remember ``value`` (and the pieces of a URL that can be tokens: :func:`token_like` path segments, the query and
    its values) so that log records never show it."""
    if value and len(value) >= 6:
        with _lock:
            _known.add(value)
            parts = urlsplit(value)
            if parts.scheme and parts.netloc:
                pieces = [seg for seg in parts.path.split("/") if token_like(seg)]
                if parts.query:
                    pieces.append(parts.query)
                    pieces += [kv.partition("=")[2] for kv in parts.query.split("&")]
                _known.update(p for p in pieces if len(p) >= 6)
    return value


def scrub(text: str) -> str:
    """``text`` with every registered secret replaced by ``<secret>`` (longest first)."""
    with _lock:
        known = sorted(_known, key=len, reverse=True)
    for s in known:
        if s in text:
            text = text.replace(s, REDACTED)
    return text


def redact_url(url: str) -> str:
    """Scheme, host and port only: webhook tokens live in the path or query."""
    parts = urlsplit(url)
    if not parts.scheme:
        return REDACTED
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}/{REDACTED}" if (parts.path.strip("/") or parts.query) else url


CREDENTIALS_DIR = "/etc/raswarden/credentials"
"""Where the unit loads credentials from (``LoadCredential=raswarden:/etc/raswarden/credentials``: each file
``NAME`` there reaches the service as ``raswarden_NAME``), and where a command outside systemd reads them
(``$RASWARDEN_CREDENTIALS_DIRECTORY`` overrides it)."""


def credential_path(name: str) -> tuple[Path | None, list[Path]]:
    """The file of systemd credential ``name`` and the places looked in. Under systemd: ``raswarden_NAME`` (the unit
    loads the whole credentials directory) or ``NAME`` (an operator's own ``LoadCredential=NAME:...``) in
    ``$CREDENTIALS_DIRECTORY``; outside it (``check-config`` from a shell, as root): the credentials directory
    itself."""
    base = os.environ.get("CREDENTIALS_DIRECTORY")
    if base:
        tried = [Path(base) / f"raswarden_{name}", Path(base) / name]
    else:
        tried = [Path(os.environ.get("RASWARDEN_CREDENTIALS_DIRECTORY") or CREDENTIALS_DIR) / name]
    for t in tried:
        try:
            if t.exists():
                return t, tried
        except PermissionError:  # the directory is root's (0700): found, unreadable, and read_secret says so
            return t, tried
    return None, tried


def read_secret(key: str, value: str | None = None, file: str | None = None, credential: str | None = None,
                required: bool = True) -> str | None:
    """The secret of config key ``key`` from its value, a ``*_file`` or a systemd ``*_credential``; a
    :class:`SecretError` naming the key (``url_credential``, ``url_file``) and where it looked, never the value."""
    if value:
        return register(value)
    source = f"{key}_file {file}"
    if credential:
        found, tried = credential_path(credential)
        if found is None:
            raise SecretError(f"{key}_credential {credential!r}: no such credential (looked for "
                              f"{', '.join(str(t) for t in tried)})")
        file, source = str(found), f"{key}_credential {credential!r} ({found})"
    if file:
        path = Path(file)
        try:
            mode = path.stat().st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO) and not os.environ.get("CREDENTIALS_DIRECTORY"):
                raise SecretError(f"{source}: readable by group or others (chmod 600)")
            text = path.read_text().strip()
        except PermissionError:
            raise SecretError(f"{source}: not readable by this user (the credentials are root's: run check-config "
                              "as root, the service under systemd, which passes them on)") from None
        except OSError as exc:
            raise SecretError(f"{source}: {exc.strerror or exc}") from None
        if not text:
            raise SecretError(f"{source}: empty")
        return register(text)
    if required:
        raise SecretError(f"{key}: missing (set {key}, {key}_file or {key}_credential)")
    return None


class RedactingFilter(logging.Filter):
    """A logging filter that replaces every registered secret in a record's message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            text = scrub(logging.Formatter().formatException(record.exc_info))
            record.exc_info, record.exc_text = None, text
        return True


def install_log_redaction() -> None:
    """Attach :class:`RedactingFilter` to every handler of the root logger (idempotent)."""
    root = logging.getLogger()
    for handler in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
