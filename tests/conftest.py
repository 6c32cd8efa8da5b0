"""Test servers: real PostgreSQL and Redis (the private dev stack, unless OMNIUM_* say where)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

from omnium_db import apply_migrations, init_connection
from omnium_devstack.stack import running_stack
from tests.support.servers import Servers
from tests.support.streams import name_stream_origins

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    # The processes the tests start are dev ones; tests of production mode set it themselves.
    os.environ.setdefault("OMNIUM_ENVIRONMENT", "development")
    # A stream left unclosed fails a later test: its warning must say which code opened it.
    name_stream_origins()


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """PostgreSQL and Redis for the whole run.

    With OMNIUM_DATABASE_URL and OMNIUM_REDIS_URL set, those servers are used (each test
    gets its own database on that server); otherwise a private pair is started from the
    machine's binaries and stopped at the end.
    """
    database_url = os.environ.get("OMNIUM_DATABASE_URL")
    redis_url = os.environ.get("OMNIUM_REDIS_URL")
    if database_url and redis_url:
        yield Servers(database_url, redis_url)
        return
    data_dir = tmp_path_factory.mktemp("stack")
    with running_stack(data_dir, pg_port=0, redis_port=0, fsync=False) as stack:
        yield Servers(stack.database_url, stack.redis_url)
    # As root, PostgreSQL's files may live in a fallback folder its own user can reach.
    shutil.rmtree(stack.postgres.fallback_home, ignore_errors=True)


@pytest.fixture(scope="session")
async def template_database(servers: Servers) -> AsyncIterator[str]:
    """A database with every migration applied, cloned for each test that needs one."""
    name = f"omnium_template_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(servers.admin_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        conn = await asyncpg.connect(servers.url_for(name))
        try:
            await apply_migrations(conn)
        finally:
            await conn.close()
        yield name
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@asynccontextmanager
async def cloned_database(servers: Servers, template: str, prefix: str) -> AsyncIterator[str]:
    """A fresh database of our schema (CREATE DATABASE ... TEMPLATE ...), dropped after."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(servers.admin_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        yield servers.url_for(name)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
async def database_url(servers: Servers, template_database: str) -> AsyncIterator[str]:
    """A fresh database of our schema for one test."""
    async with cloned_database(servers, template_database, "omnium_test") as url:
        yield url


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection to the test's database, for setting up and checking."""
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def empty_url(servers: Servers) -> AsyncIterator[str]:
    """A database with no schema yet, dropped after."""
    name = f"omnium_empty_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(servers.admin_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield servers.url_for(name)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
