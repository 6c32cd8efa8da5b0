"""Applying every migration gives the schema the design names, and applying again is a no-op."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest

from omnium_db import (
    MIGRATIONS_DIR,
    UNIT_STATUSES,
    MigrationError,
    applied_versions,
    apply_migrations,
)

EXPECTED_TABLES = {
    "event",
    "discipline",
    "competitor",
    "unit",
    "unit_competitor",
    "entry",
    "medal_row",
    "command",
    "timeline_item",
    "domain_event",
    "account",
    "account_change",
    "api_key",
    "integration",
    "integration_run",
    "integration_row",
    "integration_key_state",
    "schema_version",
    "integration_version",
    "integration_job",
    "integration_lookup",
    "review_item",
    "alert",
    "account_session",
    "sign_in_throttle",
    "client",
    "client_feed",
    "delivery_attempt",
    "delivery_cursor",
    "delivery_alert",
    "match_action",
    "provider",
    "provider_message",
    "scorer_assignment",
    "scorer_refusal",
}
PINNABLE = {"competitor", "unit", "unit_competitor", "entry", "medal_row"}


async def test_the_schema_has_every_table_and_the_pin_columns(db: asyncpg.Connection) -> None:
    tables = {
        r["tablename"]
        for r in await db.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    }
    assert tables == EXPECTED_TABLES
    for table in PINNABLE:
        columns = {
            r["column_name"]: r["data_type"]
            for r in await db.fetch(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = $1",
                table,
            )
        }
        assert columns["pinned"] == "ARRAY", table
        assert columns["changed_seq"] == "bigint", table
    timeline = {
        r["column_name"]
        for r in await db.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'timeline_item'"
        )
    }
    assert {"actor_kind", "actor_name", "source_code", "screen", "diff"} <= timeline
    key_state = {
        r["column_name"]
        for r in await db.fetch(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'integration_key_state'"
        )
    }
    assert {
        "last_hash",
        "applied_seq",
        "last_seen_run",
        "missing_runs",
        "official_at",
        "next_read_at",
    } <= key_state
    assert (
        await db.fetchval("SELECT count(*) FROM pg_trigger WHERE tgname = 'domain_event_notify'")
        == 1
    )


async def test_applying_again_changes_nothing(db: asyncpg.Connection) -> None:
    before = await applied_versions(db)
    assert await apply_migrations(db) == []
    assert await applied_versions(db) == before == list(range(1, len(before) + 1))


def _copy_with_first_edited(target: Path) -> None:
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        (target / path.name).write_text(path.read_text())
    first = sorted(target.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited\n")


async def test_an_edited_migration_is_refused(db: asyncpg.Connection, tmp_path: Path) -> None:
    _copy_with_first_edited(tmp_path)
    with pytest.raises(MigrationError, match="was changed after it was applied"):
        await apply_migrations(db, tmp_path)


async def test_unit_statuses_in_code_match_the_schema(db: asyncpg.Connection) -> None:
    check = await db.fetchval(
        """SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
            WHERE c.conrelid = 'unit'::regclass AND c.contype = 'c'
              AND pg_get_constraintdef(c.oid) LIKE '%status%'"""
    )
    assert re.findall(r"'([A-Z_]+)'::text", check) == list(UNIT_STATUSES)
