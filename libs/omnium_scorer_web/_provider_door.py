"""The provider push door, POST /v1/providers/{provider}/messages: limits, then scoring.

In this order, each step cheaper than the next: the client address's wrong-key budget (an
address that has spent it is refused before its key is looked at, from this worker's memory
once Redis has said so), the key itself against the push providers' key hashes (read from the
database, kept a few seconds), the provider's own rate, the body read up to its bound, then
scoring, which checks the key again, counts the day's bytes, keeps the message and reads it.

A wrong key therefore costs one Redis call and never reaches scoring, and it never spends the
real provider's rate: strangers cannot silence a feed by pushing with made-up keys. Both rates
are token buckets in Redis, so every gateway copy shares them; while Redis is down each worker
keeps its own with the same numbers.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable

import asyncpg
import redis.asyncio as aioredis
from aiohttp import web
from grpc import aio
from redis.exceptions import RedisError

from omnium.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from omnium_db import DATABASE_ERRORS
from omnium_process import client_address
from omnium_settings import Settings

log = logging.getLogger(__name__)

# The gateway's one statement outside a sql/ folder (its role's grant: omnium_db's roles.sql).
PUSH_KEYS_SQL = (
    "SELECT code, api_key_hash FROM provider"
    " WHERE mode = 'push' AND enabled AND api_key_hash IS NOT NULL"
)

# KEYS[1] the bucket; ARGV: rate per second, burst, cost (0: only look). Answers the
# milliseconds to wait, 0 when the request may go on (and then the cost is taken).
_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
if tokens < 1 then
  return math.max(1, math.ceil((1 - tokens) / rate * 1000))
end
if cost > 0 then
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - cost), 'at', tostring(now))
  redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
end
return 0
"""
_REDIS_DOWN = (RedisError, OSError, asyncio.TimeoutError)
# The database away, or the pool not attached yet (AccountsUnavailable is a RuntimeError).
_KEYS_UNREADABLE: tuple[type[BaseException], ...] = (*DATABASE_ERRORS, RuntimeError)
# The provider table's own CHECK on codes: anything else names no provider.
_PROVIDER = re.compile(r"[a-z0-9][a-z0-9_-]{1,39}")
# A key is printable ASCII; anything else is no provider's key (and could not travel in gRPC).
_KEY = re.compile(r"[!-~]{1,256}")
_CONTENT_TYPE = re.compile(r"[!-~ ]{0,256}")
# The same answer for an unknown provider and a wrong key, so a stranger cannot list providers.
WRONG_KEY = (
    "this is not the key of a provider here: check the provider code in the address and the "
    "key in the X-Api-Key header"
)


class DoorLimits:
    """Token buckets by name: wait() answers None when a request may go on, else seconds.

    A bucket Redis has refused is refused again from this worker's memory until its wait is
    over (nothing in the door gives tokens back, so none can come sooner): a flood from one
    address costs Redis one call per worker, not one per request."""

    def __init__(self, settings: Settings, redis: aioredis.Redis | None) -> None:
        self.prefix = settings.gateway.redis_prefix + "provider-door:"
        self.redis = redis
        self.take_script = redis.register_script(_TAKE) if redis is not None else None
        self.most_local = settings.scoring.provider_local_buckets
        # name -> (tokens, monotonic time of that count): this worker's own, while Redis is down.
        self.local: OrderedDict[str, tuple[float, float]] = OrderedDict()
        # name -> monotonic time until which it is refused, as Redis last answered.
        self.refused_until: OrderedDict[str, float] = OrderedDict()

    async def wait(self, name: str, rate: float, burst: int, *, cost: int = 1) -> float | None:
        now = time.monotonic()
        until = self.refused_until.get(name)
        if until is not None:
            if now < until:
                return until - now
            del self.refused_until[name]
        wait = await self._wait(name, rate, burst, cost)
        if wait is not None:
            self.refused_until[name] = now + wait
            while len(self.refused_until) > self.most_local:
                self.refused_until.popitem(last=False)
        return wait

    async def _wait(self, name: str, rate: float, burst: int, cost: int) -> float | None:
        if self.take_script is not None:
            try:
                retry_ms = await self.take_script(
                    keys=[self.prefix + name], args=[rate, burst, cost]
                )
            except _REDIS_DOWN as exc:
                log.warning("provider door: Redis did not answer (%r); limiting per worker", exc)
            else:
                return int(retry_ms) / 1000 if int(retry_ms) > 0 else None
        return self._local_wait(name, rate, burst, cost)

    def _local_wait(self, name: str, rate: float, burst: int, cost: int) -> float | None:
        now = time.monotonic()
        tokens, at = self.local.pop(name, (float(burst), now))
        tokens = min(float(burst), tokens + (now - at) * rate)
        wait = None if tokens >= 1 else (1 - tokens) / rate
        if wait is None:
            tokens -= cost
        self.local[name] = (tokens, now)
        while len(self.local) > self.most_local:
            self.local.popitem(last=False)
        return wait


class ProviderKeys:
    """The push providers' key hashes (sha256, as scoring registered them in `provider`), read
    from the database and trusted for `provider_keys_seconds`. A key that matches none is read
    again, at most once a second, so a key rotated in the provider's file (scoring restarted)
    works at the first push. While the database cannot be read, `matches` answers None and
    scoring, which checks every key again, decides."""

    REREAD_ON_MISS_SECONDS = 1.0

    def __init__(self, settings: Settings, pool: Callable[[], asyncpg.Pool]) -> None:
        self.pool = pool
        self.trust_seconds = settings.scoring.provider_keys_seconds
        self.hashes: dict[str, bytes] = {}
        self.read_at: float | None = None
        self._reading: asyncio.Lock | None = None

    async def matches(self, provider: str, key: str) -> bool | None:
        """True: the provider's key; False: not (no such push provider, or another key)."""
        sent = hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()
        if not await self._fresh(self.trust_seconds):
            return None
        if self._match(provider, sent):
            return True
        if not await self._fresh(self.REREAD_ON_MISS_SECONDS):
            return None
        return self._match(provider, sent)

    def _match(self, provider: str, sent: bytes) -> bool:
        stored = self.hashes.get(provider)
        return stored is not None and hmac.compare_digest(sent, stored)

    def _young(self, most_seconds: float) -> bool:
        return self.read_at is not None and time.monotonic() - self.read_at < most_seconds

    async def _fresh(self, most_seconds: float) -> bool:
        """Read again if the copy is older than `most_seconds`; False if it cannot be read."""
        if self._young(most_seconds):
            return True  # every push but one in a few seconds: no lock taken
        if self._reading is None:
            self._reading = asyncio.Lock()
        async with self._reading:  # one read at a time: the others take its result
            if self._young(most_seconds):
                return True
            try:
                rows = await self.pool().fetch(PUSH_KEYS_SQL)
            except _KEYS_UNREADABLE as exc:
                log.warning("provider door: cannot read the providers' keys (%r)", exc)
                return False
            self.hashes = {row["code"]: bytes(row["api_key_hash"]) for row in rows}
            self.read_at = time.monotonic()
            return True


class ProviderDoor:
    """The handler, with the settings, the limits and the scoring client it needs."""

    def __init__(
        self,
        settings: Settings,
        redis: aioredis.Redis | None,
        scoring: Callable[[], scoring_pb2_grpc.ScoringServiceStub],
        pool: Callable[[], asyncpg.Pool],
    ) -> None:
        self.settings = settings
        self.limits = DoorLimits(settings, redis)
        self.keys = ProviderKeys(settings, pool)
        self.scoring = scoring

    async def message(self, request: web.Request) -> web.StreamResponse:
        address = client_address(request, self.settings)
        refused = await self._admit(request, address)
        if refused is not None:
            return refused
        door = self.settings.scoring
        body = await _read_bounded(request, door.provider_max_bytes)
        if body is None:
            return _refused(
                413,
                f"the message is over {door.provider_max_bytes} bytes, the most taken "
                "(OMNIUM_PROVIDER_MAX_BYTES); nothing was kept. Send it in smaller parts.",
            )
        provider = request.match_info["provider"]
        try:
            answer: scoring_pb2.ProviderAnswer = await self.scoring().ReceiveProviderMessage(
                scoring_pb2.ProviderMessage(
                    provider=provider,
                    api_key=request.headers["X-Api-Key"],
                    content_type=request.content_type,
                    body=body,
                ),
                timeout=self.settings.grpc.deadline_seconds * 5,
            )
        except aio.AioRpcError as exc:
            log.warning("provider %s: scoring did not answer: %s", provider, exc.code())
            return _refused(
                503,
                "scoring did not answer, so this message may not have been kept. Send it "
                "again: actions already saved are not applied twice.",
                retry_after=door.provider_retry_after_seconds,
            )
        return await self._answer(answer)

    async def _admit(self, request: web.Request, address: str) -> web.Response | None:
        """A refusal before the body is read, or None: this push may be read."""
        door = self.settings.scoring
        refused = await self._check_key(request, address)
        if refused is not None:
            return refused
        provider = request.match_info["provider"]
        wait = await self.limits.wait(
            f"provider:{provider}", door.provider_rate_per_second, door.provider_burst
        )
        if wait is not None:
            return _refused(
                429,
                f"{provider} is sending more than {door.provider_rate_per_second:g} messages a "
                f"second (bursts of {door.provider_burst}); this one was not read. Send it "
                "again after Retry-After.",
                retry_after=wait,
            )
        if not _CONTENT_TYPE.fullmatch(request.content_type):
            return _refused(
                400,
                "the Content-Type header is not plain text; send application/xml. Nothing was "
                "kept.",
            )
        return None

    async def _check_key(self, request: web.Request, address: str) -> web.Response | None:
        """401 (or 429) for a key that is not the provider's, counted against the address and
        never sent on: a wrong key neither reaches scoring nor spends the provider's own rate.
        None for the provider's key, and for any key while the keys cannot be read (then
        counted first, as if wrong, so a stranger gets no more tries; scoring checks it)."""
        provider = request.match_info["provider"]
        key = request.headers.get("X-Api-Key", "")
        right = (
            await self.keys.matches(provider, key)
            if key and _PROVIDER.fullmatch(provider) and _KEY.fullmatch(key)
            else False
        )
        if right is True:
            # The right key from an address out of wrong-key tries is refused as a wrong one is:
            # a guess that lands after the limit is not confirmed. A wrong key needs no such
            # look first (spending its try answers the same), so a flood of wrong keys costs
            # one Redis call each, not two.
            wait = await self._wrong_key(address, cost=0)
            return None if wait is None else _too_many_wrong_keys(wait)
        wait = await self._wrong_key(address)
        if wait is not None:
            return _too_many_wrong_keys(wait)
        if right is None:
            return None
        return _refused(
            401, WRONG_KEY if key else "send the provider's key in the X-Api-Key header"
        )

    async def _answer(self, answer: scoring_pb2.ProviderAnswer) -> web.StreamResponse:
        if answer.outcome != "refused":
            return web.json_response(_outcome(answer))
        if answer.refused_for == "key":
            # Only while the keys could not be read here (already counted), or a key revoked
            # since they were.
            return _refused(401, WRONG_KEY)
        if answer.refused_for == "quota":
            return _refused(429, answer.reason, retry_after=answer.retry_after_seconds)
        if answer.refused_for == "too_large":
            return _refused(413, answer.reason)
        # Kept: a message that cannot be read (400), or read and refused by its match's rules.
        status = 400 if answer.refused_for == "unreadable" else 422
        return web.json_response({"error": answer.reason, **_outcome(answer)}, status=status)

    async def _wrong_key(self, address: str, *, cost: int = 1) -> float | None:
        """Spend `cost` of the address's wrong-key tokens (0: only look); the wait if none
        was left."""
        door = self.settings.scoring
        return await self.limits.wait(
            f"wrong-key:{address}",
            door.provider_wrong_key_per_minute / 60,
            door.provider_wrong_key_burst,
            cost=cost,
        )


async def _read_bounded(request: web.Request, most: int) -> bytes | None:
    """The body, or None as soon as it is known to be over `most` bytes (never read past)."""
    if request.content_length is not None and request.content_length > most:
        return None
    parts: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > most:
            return None
        parts.append(chunk)
    return b"".join(parts)


def _outcome(answer: scoring_pb2.ProviderAnswer) -> dict[str, object]:
    return {
        "outcome": answer.outcome,
        "reason": answer.reason,
        "message_id": answer.message_id,
        "actions": answer.actions,
    }


def _refused(status: int, message: str, *, retry_after: float = 0) -> web.Response:
    response = web.json_response({"error": message, "outcome": "refused"}, status=status)
    return _with_retry_after(response, retry_after) if retry_after > 0 else response


def _too_many_wrong_keys(wait: float) -> web.Response:
    return _refused(
        429,
        "too many pushes with a wrong or missing key came from this address; nothing was read. "
        "Check the provider code and the X-Api-Key header, then try again after Retry-After.",
        retry_after=wait,
    )


def _with_retry_after(response: web.Response, seconds: float) -> web.Response:
    response.headers["Retry-After"] = str(max(1, math.ceil(seconds)))
    return response


__all__ = ["WRONG_KEY", "DoorLimits", "ProviderDoor", "ProviderKeys"]
