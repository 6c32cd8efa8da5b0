"""Sign-in throttles, taken before any password is hashed: failures per client address, per
address and login, and a generous ceiling per login; in Redis (one Lua script) where the process
has it, else in PostgreSQL (one INSERT ... ON CONFLICT ... RETURNING in a transaction).

Each attempt takes a place in all three counts at once, or in none: parallel guesses cannot all
pass a check made before the count. A good sign-in gives its places back, so the counts are of
failures (and attempts still being checked), and the people at a venue behind one address are
not slowed by each other's good sign-ins. Counts are fixed windows: the longest wait is a window.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import asyncpg
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from omnium_accounts._sql import QUERIES
from omnium_settings import Settings

log = logging.getLogger("omnium.accounts")


@dataclass(frozen=True, slots=True)
class Count:
    """One throttle count: its key, how many failures it allows per window, and the window."""

    key: str
    limit: int
    window_seconds: float


def counts(settings: Settings, address: str, login: str) -> list[Count]:
    """The three counts an attempt from `address` on `login` takes, sorted by key (so two
    attempts lock the same rows in the same order). Keys carry a digest of the login, never
    the login itself, so a crafted login cannot make a huge or odd key."""
    s = settings.sign_in
    who = hashlib.sha256(login.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    where = hashlib.sha256(address.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return sorted(
        [
            Count(f"address:{where}", s.address_failures, s.address_window_seconds),
            Count(f"login:{who}", s.login_failures, s.login_window_seconds),
            Count(f"address-login:{where}:{who}", s.free_failures, s.login_address_window_seconds),
        ],
        key=lambda c: c.key,
    )


class Throttle(Protocol):
    async def take(self, taken: list[Count]) -> float:
        """0 when the attempt may go on (it took its place in every count); else the seconds
        until the fullest count's window ends (it took none)."""
        ...

    async def give_back(self, taken: list[Count]) -> None:
        """A good sign-in: its places are given back."""
        ...


class PostgresThrottle:
    """Counts in the `sign_in_throttle` table, over the people pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def take(self, taken: list[Count]) -> float:
        keys = [c.key for c in taken]
        async with self._pool.acquire() as conn:
            tr = conn.transaction()
            await tr.start()
            try:
                rows = await conn.fetch(
                    QUERIES["throttle_take"], keys, [c.window_seconds for c in taken]
                )
                limits = {c.key: c.limit for c in taken}
                over = [float(r["wait"]) for r in rows if r["failures"] > limits[r["key"]]]
            except BaseException:
                await tr.rollback()
                raise
            if over:
                # The row locks made parallel attempts wait their turn; undoing lets the next
                # one see the count without this refused attempt in it.
                await tr.rollback()
                return max(*over, 1.0)
            await tr.commit()
            return 0.0

    async def give_back(self, taken: list[Count]) -> None:
        await self._pool.execute(QUERIES["throttle_give_back"], [c.key for c in taken])


# KEYS: the counts; ARGV: per key its limit and window (ms). Refuses (the longest time left, in
# ms) if any count is full, else takes a place in each (a new window starts with its first).
_TAKE = """
local wait = 0
for i, key in ipairs(KEYS) do
  local n = tonumber(redis.call('GET', key) or '0')
  if n >= tonumber(ARGV[2 * i - 1]) then
    local left = redis.call('PTTL', key)
    if left < 0 then left = tonumber(ARGV[2 * i]) end
    if left > wait then wait = left end
  end
end
if wait > 0 then return wait end
for i, key in ipairs(KEYS) do
  if redis.call('INCR', key) == 1 then redis.call('PEXPIRE', key, ARGV[2 * i]) end
end
return 0
"""
_GIVE_BACK = """
for _, key in ipairs(KEYS) do
  if tonumber(redis.call('GET', key) or '0') > 0 then redis.call('DECR', key) end
end
return 0
"""


class RedisThrottle:
    """Counts in Redis; while Redis fails, the PostgreSQL counts (a Redis outage does not turn
    the throttle off, and sign-in still works). After a failure Redis is left alone for
    `retry_seconds`, so each sign-in does not wait out a timeout first."""

    def __init__(
        self,
        redis: aioredis.Redis,
        prefix: str,
        fallback: Callable[[], Throttle],
        *,
        retry_seconds: float,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._fallback = fallback
        self._retry_seconds = retry_seconds
        self._down_until = 0.0
        self._take = redis.register_script(_TAKE)
        self._give_back = redis.register_script(_GIVE_BACK)

    def _keys(self, taken: list[Count]) -> list[str]:
        return [f"{self._prefix}sign-in:{c.key}" for c in taken]

    async def take(self, taken: list[Count]) -> float:
        argv: list[float] = []
        for c in taken:
            argv += [c.limit, int(c.window_seconds * 1000)]
        if time.monotonic() < self._down_until:
            return await self._fallback().take(taken)
        try:
            wait_ms = await self._take(keys=self._keys(taken), args=argv)
        except (RedisError, OSError) as exc:
            self._failed(exc)
            return await self._fallback().take(taken)
        return max(int(wait_ms) / 1000.0, 1.0) if int(wait_ms) > 0 else 0.0

    async def give_back(self, taken: list[Count]) -> None:
        if time.monotonic() < self._down_until:
            await self._fallback().give_back(taken)
            return
        try:
            await self._give_back(keys=self._keys(taken), args=[])
        except (RedisError, OSError) as exc:
            self._failed(exc)
            await self._fallback().give_back(taken)

    def _failed(self, exc: BaseException) -> None:
        log.warning("sign-in throttle: Redis failed (%s); counting in PostgreSQL for now", exc)
        self._down_until = time.monotonic() + self._retry_seconds
