"""People signed in, as the consoles sign them in: an account and a live session, whose token
a console sends with its gRPC calls (omnium-session) so the services know who acts."""

from __future__ import annotations

import hashlib
import secrets
import uuid

import asyncpg

# omnium_grpc.SESSION_HEADER, written out: what the consoles send is the contract under test.
SESSION_HEADER = "omnium-session"


async def signed_in(
    conn: asyncpg.Connection, name: str, role: str, account_id: str | None = None
) -> str:
    """A session token for this person (their account made when missing)."""
    account_id = account_id or str(uuid.uuid4())
    await conn.execute(
        "INSERT INTO account (id, login, name, role, password_hash) "
        "VALUES ($1, $2, $3, $4, 'not a hash: no sign-in') ON CONFLICT (id) DO NOTHING",
        account_id,
        f"{role}-{account_id[-6:]}",
        name,
        role,
    )
    token = secrets.token_urlsafe(32)
    await conn.execute(
        "INSERT INTO account_session (token_hash, account_id, csrf_token, screen, expires_at) "
        "VALUES ($1, $2, 'csrf', 'tests', now() + interval '1 hour')",
        hashlib.sha256(token.encode()).digest(),
        account_id,
    )
    return token


def session_metadata(token: str) -> tuple[tuple[str, str], ...]:
    return ((SESSION_HEADER, token),)
