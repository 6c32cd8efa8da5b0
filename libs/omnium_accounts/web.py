"""aiohttp glue for signed-in pages: the session cookie, the CSRF check, where a person may be
sent after sign-in, and the security headers both consoles send."""

from __future__ import annotations

import hmac
import re
from urllib.parse import unquote, urlsplit

from aiohttp import web

from omnium_accounts._accounts import Accounts, Session
from omnium_settings import Settings

COOKIE = "omnium_session"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
# The consoles' pages load their scripts and styles from their own origin and run no inline
# script or style; nothing may frame them (clickjacking) or be posted elsewhere from them.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
_CSRF_TOKEN = re.compile(r"^[\x21-\x7e]{1,200}$")
# What a browser drops or reads as a slash in a URL: a tab in "/\t/evil" makes it "//evil".
_NOT_IN_A_PATH = re.compile(r"[\x00-\x20\x7f\\]")


class CsrfUnreadable(ValueError):
    """The request carries a CSRF token that no console could have made (not printable ASCII,
    too long): a crafted request, answered 400."""


async def request_session(
    request: web.Request, accounts: Accounts, *, screen: str | None = None
) -> Session | None:
    """The request's session, if it is live and was made on this console (`screen`)."""
    return await accounts.session(request.cookies.get(COOKIE), screen=screen)


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


def same_token(sent: str, expected: str) -> bool:
    """A constant-time comparison of a token sent against the one expected; CsrfUnreadable for
    a token no console made (compare_digest refuses non-ASCII text with a TypeError)."""
    if not sent:
        return False
    if not _CSRF_TOKEN.match(sent):
        raise CsrfUnreadable("the security token sent is not one this console makes")
    if not _CSRF_TOKEN.match(expected):
        return False  # a cookie set by hand: it matches nothing
    return hmac.compare_digest(sent.encode("ascii"), expected.encode("ascii"))


async def csrf_ok(request: web.Request, session: Session) -> bool:
    """True when a state-changing request carries the session's CSRF token (form or header);
    CsrfUnreadable when what it carries cannot be a token."""
    sent = request.headers.get(CSRF_HEADER)
    if sent is None and request.content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        try:
            form = await request.post()
        except ValueError:
            raise CsrfUnreadable("the form cannot be read") from None
        value = form.get(CSRF_FIELD)
        sent = value if isinstance(value, str) else None
    return sent is not None and same_token(sent, session.csrf_token)


def local_path(value: str | None, *, home: str = "/") -> str:
    """`value` if it is a path on this site, else `home`: where a person goes after sign-in.

    A path starts with one "/" and has no scheme or host, no backslash, no control character
    and no white space, before or after percent-decoding: browsers read "/\\evil", "/\\t/evil"
    and "//evil" as another site."""
    if not value or len(value) > 2000:
        return home
    for form in (value, unquote(value), unquote(unquote(value))):
        parts = urlsplit(form)
        if (
            not form.startswith("/")
            or form.startswith("//")
            or _NOT_IN_A_PATH.search(form)
            or parts.scheme
            or parts.netloc
        ):
            return home
    return value


def add_security_headers(app: web.Application, settings: Settings, *, prefix: str = "/") -> None:
    """Every answer under `prefix` (pages, JSON, files) gets the consoles' security headers."""
    production = settings.server.environment == "production"
    hsts = f"max-age={settings.sign_in.hsts_seconds}"

    async def headers(request: web.Request, response: web.StreamResponse) -> None:
        if not request.path.startswith(prefix):
            return
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["X-Frame-Options"] = "DENY"
        if production:
            response.headers["Strict-Transport-Security"] = hsts

    app.on_response_prepare.append(headers)
