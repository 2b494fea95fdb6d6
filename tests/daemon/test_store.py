"""The store on embedded SQLite (WAL) and on a real PostgreSQL server, migrated by alembic."""

import io

import pytest
from sqlalchemy import inspect, text

from daemon.replay import replay
from daemon.store import Store

TABLES = {"entity", "health", "finding", "incident", "action", "alert_outbox", "alert", "alert_group", "silence",
          "alert_cursor", "lease", "warm_state", "alembic_version"}


def check_replay_into(url: str, trace_dir) -> None:
    out = io.StringIO()
    result = replay([trace_dir], findings_out=out, db_url=url)
    store = Store(url)  # a second open is a no-op migration
    try:
        assert set(inspect(store.engine).get_table_names()) >= TABLES
        rows = store.findings()
        assert len(rows) == len(out.getvalue().splitlines()) > 0
        assert rows[0].reasons and isinstance(rows[0].reasons, list)
        incidents = store.incidents(status="open")
        assert {i.entity for i in incidents} == {i.entity for i in result.pipeline.incidents.open.values()}
        assert all(i.evidence for i in incidents)
        with store.session() as s:
            assert s.exec(text("SELECT version_num FROM alembic_version")).one()[0] == "0009"
            assert s.exec(text("SELECT count(*) FROM entity")).one()[0] == 4 * (1 + 8 + 4)
    finally:
        store.close()


def test_sqlite_file_in_wal_mode(tmp_path, trace_dir):
    url = f"sqlite:///{tmp_path}/state/raswarden.db"
    check_replay_into(url, trace_dir)
    store = Store(url)
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    store.close()


@pytest.mark.postgres
def test_postgresql(pg_url, trace_dir):
    check_replay_into(pg_url, trace_dir)
