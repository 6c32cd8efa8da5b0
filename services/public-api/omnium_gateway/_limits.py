"""API keys and per-client rate limits: a token bucket per key in Redis, leased out in slices.

Each worker takes a slice of a bucket's tokens from Redis in one atomic call and spends them
from memory, so a busy client costs a Redis call per slice, not per request. A slice is a small
share of the bucket (at least one token) and is given back to nobody: it simply expires after a
second, so the limit holds across every worker and copy. While Redis is down, each worker keeps
its own bucket with the same numbers.

A worker's memory of clients is bounded (`OMNIUM_GATEWAY_RATE_CLIENTS`): past it, the client
seen least recently is forgotten. Forgetting costs that client one more Redis call when it comes
back (Redis keeps its bucket), so an attacker cycling through addresses grows nothing.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import redis.asyncio as aioredis

from omnium_accounts import LiveKey, hash_key
from omnium_gateway._cache import REDIS_ERRORS, Cache
from omnium_settings import Settings, SettingsError

# KEYS[1] the bucket; ARGV: rate per second, burst, tokens wanted. Answers {granted, retry_ms,
# whole tokens left in the bucket}.
_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local granted = math.min(want, math.floor(tokens))
tokens = tokens - granted
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
if granted > 0 then return {granted, 0, math.floor(tokens)} end
return {0, math.ceil((1 - tokens) / rate * 1000), 0}
"""
LEASE_SECONDS = 1.0
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class Client:
    """Who is asking, and the bucket they draw from."""

    name: str
    bucket: str
    rate: float
    burst: int
    # The bucket as a RateLimit-Policy item: its kind ("key", "ip", ...) as the policy's
    # name, the burst as the quota, and the seconds an empty bucket takes to fill as the window.
    policy: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        kind = self.bucket.partition(":")[0]
        window = max(1, math.ceil(self.burst / self.rate))
        object.__setattr__(self, "policy", f'"{kind}";q={self.burst};w={window}')


def database_keys(keys: list[LiveKey], settings: Settings) -> dict[str, Client]:
    """The keys admins made on the console, by hash; no limits of their own means defaults."""
    return {
        key.key_hash: Client(
            key.name,
            f"key:{key.name}",
            key.rate_per_second or settings.gateway.key_rate_per_second,
            key.burst or settings.gateway.key_burst,
        )
        for key in keys
    }


def parse_api_keys(settings: Settings) -> dict[str, Client]:
    """OMNIUM_GATEWAY_API_KEYS, by the sha256 of each key (the key itself is never kept)."""
    clients: dict[str, Client] = {}
    for item in settings.gateway.api_keys:
        parts = item.split(":")
        if len(parts) < 2 or len(parts) > 4 or not parts[0] or len(parts[1]) < 8:
            raise SettingsError(
                f"OMNIUM_GATEWAY_API_KEYS item {parts[0]!r}... is not name:key[:rate[:burst]] "
                "with a key of at least 8 characters."
            )
        try:
            rate = float(parts[2]) if len(parts) > 2 else settings.gateway.key_rate_per_second
            burst = int(parts[3]) if len(parts) > 3 else settings.gateway.key_burst
        except ValueError:
            raise SettingsError(
                f"OMNIUM_GATEWAY_API_KEYS: the rate and burst of {parts[0]!r} must be numbers."
            ) from None
        if rate <= 0 or burst < 1:
            raise SettingsError(
                f"OMNIUM_GATEWAY_API_KEYS: {parts[0]!r} needs rate > 0, burst >= 1."
            )
        digest = hash_key(parts[1])
        clients[digest] = Client(parts[0], f"key:{parts[0]}", rate, burst)
    return clients


class Recent(Generic[_V]):
    """A table of at most `most` entries by name; the one used least recently goes first."""

    __slots__ = ("_entries", "most")

    def __init__(self, most: int) -> None:
        if most < 1:
            raise SettingsError(f"OMNIUM_GATEWAY_RATE_CLIENTS is {most}; it must be at least 1.")
        self.most = most
        self._entries: OrderedDict[str, _V] = OrderedDict()

    def get(self, name: str, make: Callable[[str], _V]) -> _V:
        """The entry named `name`, made by `make(name)` (the oldest forgotten if the table is
        full) when there is none."""
        entries = self._entries
        found = entries.get(name)
        if found is not None:
            entries.move_to_end(name)
            return found
        if len(entries) >= self.most:
            entries.popitem(last=False)
        made = entries[name] = make(name)
        return made

    def peek(self, name: str) -> _V | None:
        """The entry named `name`, if there is one; nothing is made or moved."""
        return self._entries.get(name)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries


class AddressBuckets:
    """One kind of route's bucket per client address: the reads without a key, the console..."""

    def __init__(self, prefix: str, name: str, rate: float, burst: int, most: int) -> None:
        if rate <= 0 or burst < 1:
            raise SettingsError(
                f"The gateway's limit for {name} needs a rate above 0 and a burst of at least 1 "
                f"(it is {rate} a second, burst {burst}); fix its OMNIUM_GATEWAY_* settings."
            )
        self.prefix, self.name, self.rate, self.burst = prefix, name, rate, burst
        self.clients: Recent[Client] = Recent(most)
        self._made = self._make  # bound once: a request makes no new callable

    def client(self, address: str) -> Client:
        return self.clients.get(address, self._made)

    def _make(self, address: str) -> Client:
        return Client(self.name, f"{self.prefix}:{address}", self.rate, self.burst)


@dataclass(slots=True)
class _Lease:
    tokens: int = 0
    until: float = 0.0
    denied_until: float = 0.0
    # Whole tokens the shared bucket held after this worker's last slice, and when.
    left: int = 0
    left_at: float = 0.0
    fetching: asyncio.Future[None] | None = None
    # Below this many tokens the next slice is fetched ahead (a quarter of a slice; 0 when a
    # slice is one token, so small limits stay exact).
    low_water: int = 0
    # Used while Redis is down: this worker's own bucket.
    own_tokens: float = -1.0
    own_at: float = field(default_factory=time.monotonic)


class RateLimiter:
    """take() answers None when a request may go on, or the seconds to wait (Retry-After)."""

    def __init__(self, settings: Settings, redis: aioredis.Redis | None, cache: Cache) -> None:
        self.settings = settings
        self.redis = redis
        self.cache = cache
        self.leases: Recent[_Lease] = Recent(settings.gateway.rate_clients)
        self._take = redis.register_script(_TAKE) if redis is not None else None
        self._prefetches: set[asyncio.Task[bool]] = set()

    def background(self) -> list[asyncio.Task[bool]]:
        """The lease prefetches under way (a stopping worker ends them before Redis)."""
        return list(self._prefetches)

    async def take(self, client: Client) -> float | None:
        # A lease forgotten while its fetch is under way is only replaced: the fetch ends on
        # the old one, and the next request takes a slice for the new one.
        lease = self.leases.get(client.bucket, _new_lease)
        while True:
            now = time.monotonic()
            if lease.tokens > 0 and now < lease.until:
                lease.tokens -= 1
                if (
                    lease.fetching is None
                    and lease.low_water > 0
                    and (lease.tokens < lease.low_water or lease.until - now < LEASE_SECONDS / 4)
                ):
                    # Take the next slice before this one runs out, so no request waits for it.
                    lease.fetching = asyncio.get_running_loop().create_future()
                    task = asyncio.create_task(self._fetch(client, lease), name="limit prefetch")
                    self._prefetches.add(task)
                    task.add_done_callback(self._prefetches.discard)
                return None
            if now < lease.denied_until:
                return lease.denied_until - now
            if not self.cache.redis_up or self._take is None:
                return self._own(client, lease, now)
            if lease.fetching is not None:
                await asyncio.shield(lease.fetching)
                continue
            lease.fetching = asyncio.get_running_loop().create_future()
            if not await self._fetch(client, lease):
                # Redis failed this once: this request is counted here, not retried in a loop.
                return self._own(client, lease, time.monotonic())

    async def _fetch(self, client: Client, lease: _Lease) -> bool:
        """Top the lease up to one slice: a worker never holds more than a slice. Fetched ahead
        because the lease is about to expire, a worker still holding most of its slice asks for
        only what it has spent, so a steady trickle of requests cannot pile slice on slice
        until the shared bucket is empty for every other worker and copy."""
        assert self._take is not None and lease.fetching is not None
        size = max(1, int(client.burst * self.settings.gateway.rate_lease_share))
        held = lease.tokens if time.monotonic() < lease.until else 0
        want = max(1, size - held)
        try:
            granted, retry_ms, left = await self._take(
                keys=[self.cache.prefix + "rate:" + client.bucket],
                args=[client.rate, client.burst, want],
            )
            now = time.monotonic()
            lease.left, lease.left_at = int(left), now
            if int(granted) > 0:
                left = lease.tokens if now < lease.until else 0
                lease.tokens, lease.until = left + int(granted), now + LEASE_SECONDS
                lease.low_water = size // 4
            elif lease.tokens <= 0 or now >= lease.until:
                lease.tokens, lease.denied_until = 0, now + int(retry_ms) / 1000
        except REDIS_ERRORS as exc:
            self.cache.redis_failed(exc)
            return False
        finally:
            lease.fetching.set_result(None)
            lease.fetching = None
        return True

    def quota(self, client: Client) -> tuple[int, int]:
        """What `client` has left and the whole seconds until its bucket is full again, read
        from the state take() left behind (nothing is counted): the shared bucket as its last
        slice found it, refilled since, plus what this worker still holds of its slice. An
        estimate while other workers draw from the same bucket, exact on one worker."""
        lease = self.leases.peek(client.bucket)
        now = time.monotonic()
        if lease is None or now < lease.denied_until:
            left = 0.0
        elif lease.left_at == 0.0 or not self.cache.redis_up or self._take is None:
            # This worker's own bucket (Redis down), refilled since it last counted.
            own = client.burst if lease.own_tokens < 0 else lease.own_tokens
            left = own + (now - lease.own_at) * client.rate
        else:
            held = lease.tokens if now < lease.until else 0
            left = lease.left + (now - lease.left_at) * client.rate + held
        remaining = min(client.burst, math.floor(left))
        return remaining, math.ceil((client.burst - remaining) / client.rate)

    def _own(self, client: Client, lease: _Lease, now: float) -> float | None:
        if lease.own_tokens < 0:
            lease.own_tokens = float(client.burst)
        lease.own_tokens = min(
            float(client.burst), lease.own_tokens + (now - lease.own_at) * client.rate
        )
        lease.own_at = now
        if lease.own_tokens >= 1:
            lease.own_tokens -= 1
            return None
        return (1 - lease.own_tokens) / client.rate


def _new_lease(bucket: str) -> _Lease:
    del bucket
    return _Lease()


def retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))


def quota_headers(client: Client, remaining: int, reset: int) -> dict[str, str]:
    """The IETF RateLimit-Policy and RateLimit fields (draft-ietf-httpapi-ratelimit-headers,
    structured-field form) for one answer drawn from `client`'s bucket."""
    kind = client.policy.partition(";")[0]
    return {"RateLimit-Policy": client.policy, "RateLimit": f"{kind};r={remaining};t={reset}"}
