"""Accounts, sign-in behind throttles and a bounded pool of password checks, and server-side
sessions that work only on the console they were made on."""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from uuid import UUID

import asyncpg
from redis import asyncio as aioredis

from omnium_accounts._audit import audit
from omnium_accounts._hashing import PasswordChecks, PasswordChecksBusy, password_checks
from omnium_accounts._passwords import DUMMY_HASH, hash_password, needs_rehash, verify_password
from omnium_accounts._sql import QUERIES
from omnium_accounts._throttle import PostgresThrottle, RedisThrottle, Throttle, counts
from omnium_settings import Settings

Role = Literal["admin", "operator", "scorer", "viewer"]
ROLES: tuple[Role, ...] = ("admin", "operator", "scorer", "viewer")
_LOGIN = re.compile(r"^[a-z0-9._@-]{2,64}$")

# Who changes an account: a name to show, and where from (account:<id>, or the command line).
Changer = tuple[str, str | None]
COMMAND_LINE: Changer = ("the command line", "cli")
# Who may sign in on each console (by its screen name); a screen not listed takes every role.
# Admin accounts sign in only on the admin console: the scorer console is public, and a
# session of the most powerful accounts has no business there. Operators score too.
CONSOLE_ROLES: dict[str, tuple[Role, ...]] = {"scorer-console": ("scorer", "operator")}
WRONG = "the login or the password is wrong"


class AccountError(ValueError):
    """An account cannot be made or changed as asked; the message says why."""


class SignInRefused(Exception):
    """Sign-in failed: the same message for an unknown login, a wrong password, an account
    turned off and an account not for this console."""

    def __init__(self, message: str = WRONG, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SignInThrottled(SignInRefused):
    """Too many failed sign-ins from this address, on this login or from this address on this
    login: refused before any password check, for `retry_after` seconds (HTTP 429)."""


class SignInBusy(SignInRefused):
    """Every password check of the process is taken: try again after `retry_after` (HTTP 503)."""


@dataclass(frozen=True, slots=True)
class Account:
    id: UUID
    login: str
    name: str
    role: Role

    def may(self, *roles: Role) -> bool:
        """Admins may do everything; others only what their role is listed for."""
        return self.role == "admin" or self.role in roles


@dataclass(frozen=True, slots=True)
class AccountView:
    """One account as the admins' screen shows it."""

    id: UUID
    login: str
    name: str
    role: Role
    disabled: bool
    created_at: datetime
    sessions: int
    last_seen_at: datetime | None
    last_change: str | None
    last_change_by: str | None
    last_change_at: datetime | None


@dataclass(frozen=True, slots=True)
class Session:
    token: str
    account: Account
    csrf_token: str
    screen: str
    expires_at: datetime


def may_sign_in_on(role: str, screen: str) -> bool:
    allowed = CONSOLE_ROLES.get(screen)
    return allowed is None or role in allowed


def _token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def check_password_rules(password: str, settings: Settings) -> None:
    if len(password) < settings.sign_in.password_min_length:
        raise AccountError(
            "the password is too short: use at least "
            f"{settings.sign_in.password_min_length} characters"
        )


class AccountsUnavailable(RuntimeError):
    """Accounts were made before their database pool (a server starting up)."""


class Accounts:
    """Every account and session operation; one per process, over the people pool.

    A server that mounts its routes before it connects passes `pool=None` and `attach`es the
    pool at start-up.
    """

    def __init__(
        self, pool: asyncpg.Pool | None, settings: Settings, *, cache_seconds: float = 0.0
    ) -> None:
        self._bound = pool
        self._settings = settings
        self.checks: PasswordChecks = password_checks(settings)
        self._throttle: Throttle | None = None
        # Sessions read in the last `cache_seconds`, by token: a console that calls on every tap
        # need not write (the read slides the session's end) and commit each time. A sign-out
        # here drops the copy at once; one elsewhere, or a disabled account, counts within it.
        self._cache_seconds = cache_seconds
        self._cached: dict[str, tuple[float, Session]] = {}
        self._prune_at = 0.0

    def attach(self, pool: asyncpg.Pool) -> None:
        self._bound = pool

    def throttle_in_redis(self, redis: aioredis.Redis, prefix: str) -> None:
        """Count sign-in failures in Redis (PostgreSQL while Redis fails)."""
        fallback: Callable[[], Throttle] = lambda: PostgresThrottle(self._pool)  # noqa: E731
        self._throttle = RedisThrottle(
            redis, prefix, fallback, retry_seconds=self._settings.gateway.redis_retry_seconds
        )

    @property
    def throttle(self) -> Throttle:
        return self._throttle or PostgresThrottle(self._pool)

    @property
    def pool(self) -> asyncpg.Pool:
        """The people pool, or AccountsUnavailable before start-up attached it."""
        return self._pool

    @property
    def _pool(self) -> asyncpg.Pool:
        if self._bound is None:
            raise AccountsUnavailable("sign-in is not available yet: the database is not connected")
        return self._bound

    async def create(
        self, login: str, name: str, role: str, password: str, *, by: Changer = COMMAND_LINE
    ) -> Account:
        if not _LOGIN.match(login):
            raise AccountError(
                f"the login {login!r} is not allowed: use 2 to 64 of a-z, 0-9 and . _ @ -"
            )
        if role not in ROLES:
            raise AccountError(f"the role {role!r} is unknown: use one of {', '.join(ROLES)}")
        if not name.strip():
            raise AccountError("the name is empty: give the person's name")
        check_password_rules(password, self._settings)
        hashed = await self.checks.run(hash_password, password, wait=True)
        async with self._change(login, f"made ({role})", by) as conn:
            try:
                row = await conn.fetchrow(
                    *QUERIES.bind(
                        "insert_account", login=login, name=name, role=role, password_hash=hashed
                    )
                )
            except asyncpg.UniqueViolationError:
                raise AccountError(f"an account with the login {login!r} exists already") from None
        assert row is not None
        return _account(row)

    async def set_password(
        self,
        login: str,
        password: str,
        *,
        keep_token: str | None = None,
        by: Changer = COMMAND_LINE,
    ) -> int:
        """A new password; it lifts a slow-down and ends the account's sessions (but the one
        whose token is `keep_token`: a person changing their own). Returns how many ended."""
        check_password_rules(password, self._settings)
        hashed = await self.checks.run(hash_password, password, wait=True)
        async with self._change(login, "new password", by) as conn:
            if await conn.fetchval(QUERIES["set_password"], login, hashed) is None:
                raise AccountError(f"there is no account with the login {login!r}")
            return await self._end_sessions(conn, login, keep_token)

    async def set_role(self, login: str, role: str, *, by: Changer = COMMAND_LINE) -> None:
        if role not in ROLES:
            raise AccountError(f"the role {role!r} is unknown: use one of {', '.join(ROLES)}")
        async with self._change(login, f"role {role}", by) as conn:
            account = await self._existing(conn, login, lock_admins=True)
            if account["role"] == "admin" and role != "admin":
                await self._not_last_admin(conn, login, "made a " + role)
            await conn.fetchval(QUERIES["set_role"], login, role)

    async def set_disabled(self, login: str, disabled: bool, *, by: Changer = COMMAND_LINE) -> int:
        """Turn the account off (it cannot sign in; its sessions end at once) or on again.
        Returns how many sessions ended."""
        async with self._change(login, "off" if disabled else "on", by) as conn:
            account = await self._existing(conn, login, lock_admins=True)
            if disabled and account["role"] == "admin" and not account["disabled"]:
                await self._not_last_admin(conn, login, "turned off")
            await conn.fetchval(QUERIES["set_disabled"], login, disabled)
            return await self._end_sessions(conn, login, None) if disabled else 0

    async def sign_out_everywhere(
        self, login: str, *, keep_token: str | None = None, by: Changer = COMMAND_LINE
    ) -> int:
        """End every session of the login (a lost phone, a shift over); returns how many."""
        async with self._change(login, "signed out everywhere", by) as conn:
            await self._existing(conn, login)
            return await self._end_sessions(conn, login, keep_token)

    @contextlib.asynccontextmanager
    async def _change(
        self, login: str, change: str, by: Changer
    ) -> AsyncIterator[asyncpg.Connection]:
        """One transaction: the change, and the record of who made it; once it is saved, the
        same as an audit event."""
        async with self._pool.acquire() as conn:
            async with conn.transaction():
                yield conn
                await conn.execute(
                    *QUERIES.bind(
                        "record_change", login=login, change=change, by_name=by[0], by_source=by[1]
                    )
                )
            audit("account_change", login=login, change=change, by=by[0], by_source=by[1])

    async def _end_sessions(
        self, conn: asyncpg.Connection, login: str, keep_token: str | None
    ) -> int:
        keep = _token_hash(keep_token) if keep_token else None
        ended = await conn.fetch(QUERIES["delete_sessions_of"], login, keep)
        self._cached = {
            token: hit
            for token, hit in self._cached.items()
            if hit[1].account.login != login or token == keep_token
        }
        return len(ended)

    async def overview(self) -> list[AccountView]:
        rows = await self._pool.fetch(QUERIES["accounts_overview"])
        return [
            AccountView(
                r["id"],
                r["login"],
                r["name"],
                r["role"],
                r["disabled"],
                r["created_at"],
                r["sessions"],
                r["last_seen_at"],
                r["last_change"],
                r["last_change_by"],
                r["last_change_at"],
            )
            for r in rows
        ]

    async def _existing(
        self, conn: asyncpg.Connection, login: str, *, lock_admins: bool = False
    ) -> asyncpg.Record:
        """The account's row, or AccountError. With lock_admins, the admins' rows are locked
        first, for a change that the last-admin check must see alone."""
        if lock_admins:
            await conn.fetch(QUERIES["lock_admins"])
        row = await conn.fetchrow(QUERIES["account_by_login"], login)
        if row is None:
            raise AccountError(f"there is no account with the login {login!r}")
        return row

    async def _not_last_admin(self, conn: asyncpg.Connection, login: str, change: str) -> None:
        if await conn.fetchval(QUERIES["other_admins"], login) == 0:
            raise AccountError(
                f"{login!r} is the only admin who can sign in, so it cannot be {change}: "
                "make another admin first"
            )

    async def sign_in(self, login: str, password: str, *, screen: str, address: str) -> Session:
        """A new session on the console `screen` for a person at `address` (the client
        address, never a proxy's), or SignInRefused: WRONG for every mistake, SignInThrottled
        past a throttle, SignInBusy when every password check is taken.

        Throttles are taken before anything is hashed; an unknown login, an account turned off
        and an account not for this console cost one check against a dummy hash, like a wrong
        password, so neither the answer nor its time says which logins exist."""
        s = self._settings.sign_in
        login = login.strip().lower()
        shown = login[:80]
        throttle = self.throttle
        taken = counts(self._settings, address, login)
        try:
            # A place among the password checks first: past the pool's size an attempt costs
            # nothing more (no throttle count, no database read, no hash), so a flood of
            # sign-ins is answered busy as cheaply as it can be.
            with self.checks.place():
                wait = await throttle.take(taken)
                if wait > 0:
                    _audit_sign_in(shown, screen, address, "throttled", retry_after=round(wait))
                    raise SignInThrottled(
                        f"too many failed sign-ins: try again in {_seconds(wait)}", wait
                    )
                row = (
                    await self._pool.fetchrow(QUERIES["account_for_sign_in"], login)
                    if _LOGIN.match(login)
                    else None
                )
                if row is None:
                    reason = "unknown login"
                elif row["disabled"]:
                    reason = "account turned off"
                elif not may_sign_in_on(row["role"], screen):
                    reason = f"{row['role']} account not for this console"
                else:
                    reason = ""
                stored = DUMMY_HASH if reason or row is None else row["password_hash"]
                good = await self.checks.check(verify_password, password, stored)
        except PasswordChecksBusy:
            _audit_sign_in(shown, screen, address, "busy")
            raise SignInBusy(
                "too many people are signing in at this moment: try again in "
                f"{_seconds(s.busy_retry_seconds)}",
                s.busy_retry_seconds,
            ) from None
        if reason or not good or row is None:
            _audit_sign_in(shown, screen, address, "refused", reason=reason or "wrong password")
            raise SignInRefused(WRONG)
        await throttle.give_back(taken)
        if needs_rehash(row["password_hash"]):
            # The same password, so the account's other sessions stay: only the hash changes.
            rehashed = await self.checks.run(hash_password, password, wait=True)
            await self._pool.execute(
                *QUERIES.bind(
                    "rehash_password",
                    id=row["id"],
                    password_hash=rehashed,
                    checked_hash=row["password_hash"],
                )
            )
        # Sign-ins are few (people, not requests): a good moment to drop what is long over.
        await self.forget_expired()
        token = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        expires_at = await self._pool.fetchval(
            *QUERIES.bind(
                "insert_session",
                token_hash=_token_hash(token),
                account_id=row["id"],
                csrf_token=csrf,
                screen=screen,
                seconds=s.session_hours * 3600.0,
            )
        )
        _audit_sign_in(row["login"], screen, address, "signed_in", role=row["role"])
        return Session(token, _account(row), csrf, screen, expires_at)

    async def session(self, token: str | None, *, screen: str | None = None) -> Session | None:
        """The live session for a cookie's token, or None (unknown, expired, disabled, or made
        on another console than `screen`; None: any console, for tools and tests)."""
        if not token:
            return None
        now = time.monotonic()
        if self._cache_seconds > 0:
            hit = self._cached.get(token)
            if hit is not None and hit[0] > now:
                return hit[1] if screen is None or hit[1].screen == screen else None
        row = await self._pool.fetchrow(
            *QUERIES.bind(
                "session_by_token",
                token_hash=_token_hash(token),
                seconds=self._settings.sign_in.session_hours * 3600.0,
                screen=screen,
            )
        )
        if row is None:
            self._cached.pop(token, None)
            return None
        session = Session(token, _account(row), row["csrf_token"], row["screen"], row["expires_at"])
        if self._cache_seconds > 0:
            if now >= self._prune_at:
                # Nothing outlives its window: the copies are the sessions used in the last one.
                self._cached = {t: hit for t, hit in self._cached.items() if hit[0] > now}
                self._prune_at = now + self._cache_seconds
            self._cached[token] = (now + self._cache_seconds, session)
        return session

    async def sign_out(self, token: str) -> None:
        self._cached.pop(token, None)
        await self._pool.execute(QUERIES["delete_session"], _token_hash(token))

    async def forget_expired(self) -> None:
        await self._pool.execute(QUERIES["delete_expired_sessions"])
        await self._pool.execute(QUERIES["throttle_forget"])


def _audit_sign_in(login: str, console: str, address: str, outcome: str, **more: str | int) -> None:
    audit("sign_in", login=login, console=console, address=address, outcome=outcome, **more)


def _account(row: asyncpg.Record) -> Account:
    return Account(row["id"], row["login"], row["name"], row["role"])


def _seconds(value: float) -> str:
    whole = max(1, math.ceil(value))
    if whole < 120:
        return f"{whole} s"
    minutes, seconds = divmod(whole, 60)
    return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
