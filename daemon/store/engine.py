"""Opening a store: the engine for a URL (SQLite with WAL, or PostgreSQL; read-only for commands that only read),
the alembic configuration of the packaged migrations, and what a database error means, said in one line."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import StaticPool
from sqlmodel import create_engine

if TYPE_CHECKING:
    from alembic.config import Config

DEFAULT_URL = "sqlite:////var/lib/raswarden/raswarden.db"

def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


class StoreError(Exception):
    """The state database cannot be opened or migrated: one line naming the store, the cause and what to do."""


# (what the driver's message holds, what it means and what to do); the first that matches names the cause
_CAUSES = (
    ("can't load plugin", "no such kind of store: use sqlite:////PATH or postgresql+psycopg://USER@HOST/DB"),
    ("could not parse sqlalchemy url", "not a store URL: use sqlite:////PATH or postgresql+psycopg://USER@HOST/DB"),
    ("file is not a database", "the file is not a SQLite database (damaged or truncated?): move it aside and start "
                               "again, or restore a backup"),
    ("database disk image is malformed", "the database is damaged: move it aside and start again, or restore a "
                                         "backup"),
    ("database is locked", "another process holds the database locked: wait for it, or stop the raswarden that "
                           "holds it"),
    ("readonly database", "the database is read-only here: give the raswarden user write access to it and its "
                          "directory"),
    ("read-only file system", "the file system is read-only: put the store on a writable one (store.url)"),
    ("unable to open database file", "cannot open the database file: does its directory exist, and may raswarden "
                                     "write there?"),
    ("permission denied", "permission denied: give the raswarden user access to the store"),
    ("no space left", "the disk is full: free space where the store is"),
    ("database or disk is full", "the disk is full: free space where the store is"),
    ("can't locate revision", "written by a newer raswarden (its schema revision is unknown to this one): run the "
                              "newer raswarden, or use another store"),
    ("connection refused", "nothing answers at the server's address: is PostgreSQL running, and is the URL's host "
                           "and port right?"),
    ("could not translate host name", "the server's host name does not resolve: check the URL"),
    ("password authentication failed", "the server refused the credentials: check the URL's user and password"),
    ("holds the migrations lock", "another raswarden is migrating this store: wait for it, or stop it"),
    ("timeout", "the server did not answer in time"),
)


STORE_TROUBLE = (OperationalError, InterfaceError, DisconnectionError, PoolTimeout)
"""What the store's server, file or disk raise while the daemon runs (not a constraint violated: that is a bug)."""


def store_cause(exc: BaseException) -> str:
    """What a database exception means and what to do, in one line (the driver's own words in brackets)."""
    text = " ".join(str(getattr(exc, "orig", None) or exc).split())
    lowered = f"{type(exc).__name__} {text}".lower()
    cause = next((what for key, what in _CAUSES if key in lowered), None)
    first = text.split(" [SQL:")[0][:200]
    return f"{cause} ({first})" if cause else first


def store_error(url: str, exc: BaseException) -> StoreError:
    """The one-line :class:`StoreError` for an exception raised opening or migrating the store at ``url``."""
    from sqlalchemy.engine import make_url

    try:
        where = make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a URL that does not parse is named as given, without what could be a secret
        where = url.split("@")[-1]
    return StoreError(f"store {where}: {store_cause(exc)}")


def _sqlite_read_only(path: str):
    """A read-only connection to the SQLite file at ``path``, for a user who may not write it or its directory.

    ``mode=ro`` reads a WAL database with its -wal and -shm files; where they are not there and cannot be made (a
    directory the user may not write, a read-only mount), no raswarden is writing (a writer keeps its -wal), and the
    file is read as it is (``immutable``)."""
    import sqlite3

    def connect() -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            if not Path(path).exists() or Path(f"{path}-wal").exists():
                raise
            conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("PRAGMA query_only=ON")
        return conn

    return connect


def make_engine(url: str, read_only: bool = False) -> Engine:
    """An engine for ``url``; SQLite gets WAL and a busy timeout, in-memory SQLite one shared connection.
    ``read_only``: the engine never writes (SQLite opened read-only, PostgreSQL transactions read-only), so a user
    who may only read the store can use it."""
    if url.startswith("sqlite"):
        if url in ("sqlite://", "sqlite:///:memory:"):
            engine = create_engine(url, connect_args={"check_same_thread": False}, poolclass=StaticPool)
        else:
            path = url.split(":///", 1)[1] if ":///" in url else ""
            if read_only and path:
                return create_engine("sqlite://", creator=_sqlite_read_only(path))
            if path:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if read_only and url.startswith("postgresql"):
        return create_engine(url, pool_pre_ping=True,
                             connect_args={"options": "-c default_transaction_read_only=on"})
    return create_engine(url, pool_pre_ping=True)


def alembic_config(engine: Engine) -> Config:
    """Alembic configuration pointing at the packaged migrations and at ``engine``."""
    from alembic.config import Config  # (imported when a store is opened, not by every process that imports this)

    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("daemon.store") / "migrations"))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    cfg.attributes["engine"] = engine
    return cfg


def dumps(obj: Any) -> str:
    """Compact, key-sorted JSON (the form findings and payloads are compared in)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))
