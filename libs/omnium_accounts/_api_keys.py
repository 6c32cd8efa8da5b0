"""Media clients' API keys kept in the database: made and turned off without a restart."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg

from omnium_accounts._accounts import AccountError
from omnium_accounts._sql import QUERIES

_NAME = re.compile(r"^[a-z0-9._-]{2,64}$")


def hash_key(key: str) -> str:
    """What is kept of a key, and what a request's X-API-Key is looked up by."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ApiKeyView:
    """One key as the admins' screen shows it (never the key itself)."""

    id: UUID
    name: str
    rate_per_second: float | None
    burst: int | None
    disabled: bool
    made_by: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class LiveKey:
    """A key the gateway admits; None limits mean the gateway's defaults."""

    name: str
    key_hash: str
    rate_per_second: float | None
    burst: int | None


class ApiKeys:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create(
        self, name: str, *, rate_per_second: float | None, burst: int | None, by: str
    ) -> tuple[ApiKeyView, str]:
        """A new key for a client: its record and the key, which is not kept and not shown
        again."""
        if not _NAME.match(name):
            raise AccountError(
                f"the name {name!r} is not allowed: use 2 to 64 of a-z, 0-9 and . _ -"
            )
        if rate_per_second is not None and not rate_per_second > 0:
            raise AccountError("the rate must be more than 0 requests a second")
        if burst is not None and burst < 1:
            raise AccountError("the burst must be at least 1 request")
        key = secrets.token_urlsafe(24)
        try:
            row = await self._pool.fetchrow(
                *QUERIES.bind(
                    "insert_api_key",
                    name=name,
                    key_hash=hash_key(key),
                    rate_per_second=rate_per_second,
                    burst=burst,
                    made_by=by,
                )
            )
        except asyncpg.UniqueViolationError:
            raise AccountError(f"a key named {name!r} exists already") from None
        assert row is not None
        return _view(row), key

    async def set_disabled(self, name: str, disabled: bool) -> None:
        if await self._pool.fetchval(QUERIES["set_api_key_disabled"], name, disabled) is None:
            raise AccountError(f"there is no key named {name!r}")

    async def every(self) -> list[ApiKeyView]:
        return [_view(r) for r in await self._pool.fetch(QUERIES["list_api_keys"])]

    async def live(self) -> list[LiveKey]:
        return [
            LiveKey(r["name"], r["key_hash"], r["rate_per_second"], r["burst"])
            for r in await self._pool.fetch(QUERIES["live_api_keys"])
        ]


def _view(row: asyncpg.Record) -> ApiKeyView:
    return ApiKeyView(
        row["id"],
        row["name"],
        row["rate_per_second"],
        row["burst"],
        row["disabled"],
        row["made_by"],
        row["created_at"],
    )
