"""aiohttp glue for signed-in pages: the session cookie and the CSRF check."""

from __future__ import annotations

import hmac

from aiohttp import web

from omnium_accounts._accounts import Accounts, Session
from omnium_settings import Settings

COOKIE = "omnium_session"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"


async def request_session(request: web.Request, accounts: Accounts) -> Session | None:
    return await accounts.session(request.cookies.get(COOKIE))


def set_session_cookie(response: web.StreamResponse, session: Session, settings: Settings) -> None:
    # HttpOnly: page scripts never see it; SameSite=Lax: other sites' forms do not carry it.
    response.set_cookie(
        COOKIE,
        session.token,
        max_age=int(settings.sign_in.session_hours * 3600),
        httponly=True,
        samesite="Lax",
        secure=settings.session_cookie_secure,
        path="/",
    )


def clear_session_cookie(response: web.StreamResponse) -> None:
    response.del_cookie(COOKIE, path="/")


async def csrf_ok(request: web.Request, session: Session) -> bool:
    """True when a state-changing request carries the session's CSRF token (form or header)."""
    sent = request.headers.get(CSRF_HEADER)
    if sent is None and request.content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        form = await request.post()
        value = form.get(CSRF_FIELD)
        sent = value if isinstance(value, str) else None
    return sent is not None and hmac.compare_digest(sent, session.csrf_token)
