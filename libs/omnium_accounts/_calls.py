"""The person behind a console's gRPC call, read from the session token the call carries."""

from __future__ import annotations

import hashlib
import time

import asyncpg

from omnium_accounts._sql import QUERIES
from omnium_grpc import Person
from omnium_settings import Settings


class CallSessions:
    """A gRPC server's SessionLookup: the live session's account, or None (unknown, ended,
    account turned off). Answers are kept `OMNIUM_GRPC_SESSION_CACHE_SECONDS`, by the token's
    hash, so a scorer's every tap is not a database read and no token is kept in memory."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings) -> None:
        self.pool = pool
        self.seconds = settings.grpc.session_cache_seconds
        self._known: dict[bytes, tuple[float, Person | None]] = {}

    async def __call__(self, token: str) -> Person | None:
        digest = hashlib.sha256(token.encode()).digest()
        now = time.monotonic()
        hit = self._known.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        row = await self.pool.fetchrow(QUERIES["session_for_call"], digest)
        person = None if row is None else Person(row["id"], row["login"], row["name"], row["role"])
        if self.seconds > 0:
            if len(self._known) > 10_000:
                self._known = {k: v for k, v in self._known.items() if v[0] > now}
            self._known[digest] = (now + self.seconds, person)
        return person
