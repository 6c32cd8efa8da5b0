"""Accounts, sign-in with a slow-down after failures, and server-side sessions."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from uuid import UUID

import asyncpg

from omnium_accounts._passwords import DUMMY_HASH, hash_password, needs_rehash, verify_password
from omnium_accounts._sql import QUERIES
from omnium_settings import Settings

Role = Literal["admin", "operator", "scorer", "viewer"]
ROLES: tuple[Role, ...] = ("admin", "operator", "scorer", "viewer")
_LOGIN = re.compile(r"^[a-z0-9._@-]{2,64}$")

# Who changes an account: a name to show, and where from (account:<id>, or the command line).
Changer = tuple[str, str | None]
COMMAND_LINE: Changer = ("the command line", "cli")


class AccountError(ValueError):
    """An account cannot be made or changed as asked; the message says why."""


class SignInRefused(Exception):
    """Sign-in failed. `retry_after` > 0 when the login is slowed down after failures."""

    def __init__(self, message: str, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


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
    slowed_for: float
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
        # Sessions read in the last `cache_seconds`, by token: a console that calls on every tap
        # need not write (the read slides the session's end) and commit each time. A sign-out
        # here drops the copy at once; one elsewhere, or a disabled account, counts within it.
        self._cache_seconds = cache_seconds
        self._cached: dict[str, tuple[float, Session]] = {}
        self._prune_at = 0.0

    def attach(self, pool: asyncpg.Pool) -> None:
        self._bound = pool

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
        hashed = await asyncio.to_thread(hash_password, password)
        async with self._change(login, f"made ({role})", by) as conn:
            try:
                row = await conn.fetchrow(QUERIES["insert_account"], login, name, role, hashed)
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
        hashed = await asyncio.to_thread(hash_password, password)
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
        """One transaction: the change, and the record of who made it."""
        async with self._pool.acquire() as conn, conn.transaction():
            yield conn
            await conn.execute(QUERIES["record_change"], login, change, by[0], by[1])

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
                r["slowed_for"],
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

    async def sign_in(self, login: str, password: str, *, screen: str) -> Session:
        """A new session for the login, or SignInRefused with one message for every mistake."""
        s = self._settings.sign_in
        row = await self._pool.fetchrow(QUERIES["account_for_sign_in"], login.strip().lower())
        wrong = SignInRefused("the login or the password is wrong")
        if row is None or row["disabled"]:
            await asyncio.to_thread(verify_password, password, DUMMY_HASH)
            raise wrong
        if row["locked_for"] > 0:
            raise SignInRefused(
                f"too many failed sign-ins: try again in {_seconds(row['locked_for'])}",
                row["locked_for"],
            )
        if not await asyncio.to_thread(verify_password, password, row["password_hash"]):
            locked_for = await self._pool.fetchval(
                QUERIES["sign_in_failed"],
                row["id"],
                s.free_failures,
                s.lock_seconds,
                s.lock_max_seconds,
            )
            wrong.retry_after = float(locked_for or 0.0)
            raise wrong
        await self._pool.execute(QUERIES["sign_in_passed"], row["id"])
        if needs_rehash(row["password_hash"]):
            # The same password, so the account's other sessions stay: only the hash changes.
            rehashed = await asyncio.to_thread(hash_password, password)
            await self._pool.execute(
                QUERIES["rehash_password"], row["id"], rehashed, row["password_hash"]
            )
        # Sign-ins are few (people, not requests): a good moment to drop sessions long over.
        await self.forget_expired()
        token = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        expires_at = await self._pool.fetchval(
            QUERIES["insert_session"],
            _token_hash(token),
            row["id"],
            csrf,
            screen,
            s.session_hours * 3600.0,
        )
        return Session(token, _account(row), csrf, screen, expires_at)

    async def session(self, token: str | None) -> Session | None:
        """The live session for a cookie's token, or None (unknown, expired, disabled)."""
        if not token:
            return None
        now = time.monotonic()
        if self._cache_seconds > 0:
            hit = self._cached.get(token)
            if hit is not None and hit[0] > now:
                return hit[1]
        row = await self._pool.fetchrow(
            QUERIES["session_by_token"],
            _token_hash(token),
            self._settings.sign_in.session_hours * 3600.0,
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


def _account(row: asyncpg.Record) -> Account:
    return Account(row["id"], row["login"], row["name"], row["role"])


def _seconds(value: float) -> str:
    whole = max(1, round(value))
    return f"{whole} s" if whole < 120 else f"{round(whole / 60)} min"
