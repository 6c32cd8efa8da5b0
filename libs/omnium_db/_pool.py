"""asyncpg pools, one per road, each with that road's time limits set on its connections."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

import asyncpg

from omnium_settings import Settings


class Road(Enum):
    """Which road a pool serves; each has its own size and time limits (DESIGN §4)."""

    PEOPLE = "people"
    IMPORTS = "imports"
    READER = "reader"


def _ms(seconds: float) -> str:
    return str(int(seconds * 1000))


def server_settings(settings: Settings, road: Road, application_name: str) -> dict[str, str]:
    """The session settings a road's connections start with, so no transaction pays a SET."""
    common = {"application_name": application_name, "synchronous_commit": "on"}
    if road is Road.IMPORTS:
        return {
            **common,
            "lock_timeout": _ms(settings.import_lock_timeout_seconds),
            "statement_timeout": _ms(settings.import_statement_timeout_seconds),
            "idle_in_transaction_session_timeout": _ms(settings.import_idle_seconds),
        }
    # People and scorers: the whole command must fit in its transaction time. PostgreSQL 15
    # has no transaction_timeout, so each statement and each idle gap is bounded by it and
    # the road also puts an asyncio deadline on the transaction.
    limit = _ms(settings.people_transaction_seconds)
    return {
        **common,
        "lock_timeout": limit,
        "statement_timeout": limit,
        "idle_in_transaction_session_timeout": limit,
    }


async def init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _reset(conn: asyncpg.Connection) -> None:
    # asyncpg's default reset costs a round trip per release (UNLISTEN *, RESET ALL, ...).
    # Our units of work leave no session state behind; only an unfinished transaction, from a
    # cancelled caller, must not reach the next user of the connection.
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


async def create_pool(
    settings: Settings,
    road: Road,
    *,
    application_name: str,
    size: int | None = None,
    min_size: int = 1,
    **kwargs: Any,
) -> asyncpg.Pool:
    """Create the pool for one road. Call once at start-up and close it at shutdown."""
    default_size = {
        Road.PEOPLE: settings.people_pool_size,
        Road.IMPORTS: settings.import_pool_size,
        Road.READER: settings.reader_pool_size,
    }[road]
    max_size = size or default_size
    pool = await asyncpg.create_pool(
        settings.require_database_url(),
        min_size=min(min_size, max_size),
        max_size=max_size,
        server_settings=server_settings(settings, road, f"{application_name}:{road.value}"),
        init=init_connection,
        reset=_reset,
        **kwargs,
    )
    assert pool is not None
    return pool
