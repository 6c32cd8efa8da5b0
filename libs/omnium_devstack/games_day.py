"""`make run`: the servers, the schema, a dev token and every service built so far, in one go."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

import asyncpg

from omnium_db import apply_migrations
from omnium_devstack.launcher import ServiceSpec, run_services
from omnium_devstack.stack import Stack
from omnium_settings import Settings

log = logging.getLogger(__name__)


def services(settings: Settings) -> list[ServiceSpec]:
    """Every omnium process `make run` starts. A new service adds its line here."""
    host = settings.bind_host
    return [
        ServiceSpec(
            name="command",
            module="omnium_command",
            listens=[("gRPC", f"grpc://{host}:{settings.command_port}")],
        ),
    ]


def _dev_token(data_dir: Path) -> str:
    """One token per dev stack, kept beside its data, so restarts keep working clients."""
    path = data_dir / "grpc-token"
    if path.exists():
        return path.read_text().strip()
    token = secrets.token_urlsafe(24)
    data_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token


async def _migrate(database_url: str) -> list[int]:
    conn = await asyncpg.connect(database_url)
    try:
        return await apply_migrations(conn)
    finally:
        await conn.close()


def run_games_day(
    data_dir: Path, pg_port: int, redis_port: int, environ: Mapping[str, str] | None = None
) -> int:
    environ = os.environ if environ is None else environ
    settings = Settings.from_env(environ)
    stack: Stack | None = None
    env: dict[str, str] = {}
    if settings.database_url and settings.redis_url:
        database_url, redis_url = settings.database_url, settings.redis_url
        log.info("using the servers OMNIUM_DATABASE_URL and OMNIUM_REDIS_URL name")
    else:
        stack = Stack(
            data_dir,
            pg_port,
            redis_port,
            True,
            pg_port_setting="--pg-port",
            redis_port_setting="--redis-port",
        )
        stack.start()
        database_url = settings.database_url or stack.database_url
        redis_url = settings.redis_url or stack.redis_url
    try:
        applied = asyncio.run(_migrate(database_url))
        log.info("schema up to date%s", f" (applied {applied})" if applied else "")
        token = settings.grpc_token or _dev_token(data_dir)
        env = {
            "OMNIUM_DATABASE_URL": database_url,
            "OMNIUM_REDIS_URL": redis_url,
            "OMNIUM_GRPC_TOKENS": ",".join(settings.grpc_tokens) or token,
            "OMNIUM_GRPC_TOKEN": token,
        }
        print(f"PostgreSQL  {database_url}\nRedis       {redis_url}")
        print(f"gRPC token  {token}   (send 'authorization: Bearer <token>')")
        return asyncio.run(run_services(services(settings), env))
    finally:
        if stack is not None:
            stack.stop(only_started=True)
