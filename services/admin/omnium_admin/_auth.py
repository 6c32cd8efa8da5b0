"""Sign-in, sign-out, and the middleware that asks for a session, a role and a CSRF token."""

from __future__ import annotations

import asyncio
import math
import secrets
import uuid
from datetime import UTC, datetime
from urllib.parse import quote

from aiohttp import web
from aiohttp.typedefs import Handler

from omnium_accounts import Account, Role, Session, SignInBusy, SignInRefused, SignInThrottled
from omnium_accounts.web import (
    CSRF_FIELD,
    CsrfUnreadable,
    clear_session_cookie,
    csrf_ok,
    local_path,
    request_session,
    same_token,
    set_session_cookie,
)
from omnium_admin._console import console
from omnium_db import pool_answers
from omnium_process import client_address

SESSION: web.RequestKey[Session] = web.RequestKey("session")
# Before sign-in there is no session to hold a CSRF token: the form carries a random value
# that must match this cookie (a forged cross-site form cannot read or set it).
SIGN_IN_COOKIE = "omnium_sign_in"
# The probes: /health (alive) and /readyz (a balancer may send it people) need no sign-in.
PROBES = ("/health", "/readyz")
PUBLIC = ("/sign-in", *PROBES)
SCREEN = "admin"
# Who reads when admin_sign_in_required is off: a viewer, who can act on nothing.
NOBODY = Account(uuid.UUID(int=0), "nobody", "nobody (sign-in is off)", "viewer")


def session_of(request: web.Request) -> Session:
    return request[SESSION]


def _wants_page(request: web.Request) -> bool:
    return request.method in ("GET", "HEAD") and not request.path.startswith("/api/")


def plain_page(
    request: web.Request, status: int, title: str, message: str, *, retry: bool = False
) -> web.Response:
    app = console(request)
    html = app.render(
        "message.html",
        title=title,
        message=message,
        retry=retry,
        session=request.get(SESSION),
        path=request.path_qs,
    )
    return web.Response(text=html, status=status, content_type="text/html")


@web.middleware
async def signed_in(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every page and action needs a live session: pages redirect, everything else is 401."""
    if request.path in PUBLIC or request.path.startswith("/static/"):
        return await handler(request)
    app = console(request)
    session = await request_session(request, app.accounts, screen=SCREEN)
    if session is None and not app.settings.admin.sign_in_required and _wants_page(request):
        session = Session("", NOBODY, "", SCREEN, datetime.now(UTC))
    if session is None:
        if _wants_page(request):
            raise web.HTTPSeeOther(f"/sign-in?next={quote(request.path_qs, safe='')}")
        return web.json_response(
            {"error": "sign in first: this needs a signed-in account"}, status=401
        )
    request[SESSION] = session
    if session.account.role == "scorer":
        return plain_page(
            request,
            403,
            "Not for scorer accounts",
            "Scorer accounts have no access to the operators' console. Use the scorer console, "
            "or ask an admin for an operator account.",
        )
    if request.method not in ("GET", "HEAD"):
        try:
            fresh = await csrf_ok(request, session)
        except CsrfUnreadable as exc:
            return plain_page(
                request,
                400,
                "This form cannot be read",
                f"Nothing was done: {exc}. Go back, reload the page and try again.",
            )
        if not fresh:
            return plain_page(
                request,
                403,
                "This form has expired",
                "The form did not carry this session's security token, so nothing was done. "
                "Go back, reload the page and try again.",
            )
    return await handler(request)


def refused_unless(request: web.Request, role: Role, title: str, why: str) -> web.Response | None:
    """None when the signed-in account may act as `role` (admins may everything); else a 403
    page that names the account's role and says `why`."""
    account = session_of(request).account
    if account.may(role):
        return None
    return plain_page(request, 403, title, f"Your account is {a_role(account.role)}: {why}")


def a_role(role: str) -> str:
    """ "a reader", "an operator": a role with its article, for sentences."""
    return ("an " if role[:1] in ("a", "e", "i", "o", "u") else "a ") + role


def may_act(request: web.Request) -> web.Response | None:
    """None when the account may act on integrations, runs, waiting and units; else a 403."""
    return refused_unless(
        request,
        "operator",
        "Not allowed",
        "it can read every screen but not act. Ask an admin for an operator account.",
    )


async def sign_in_page(request: web.Request) -> web.Response:
    return _sign_in_form(request, status=200, error="", login="")


def _sign_in_form(
    request: web.Request, *, status: int, error: str, login: str, retry_after: float = 0.0
) -> web.Response:
    app = console(request)
    # One token per browser until sign-in, so two open sign-in tabs both work.
    token = request.cookies.get(SIGN_IN_COOKIE) or secrets.token_urlsafe(24)
    html = app.render(
        "sign_in.html",
        error=error,
        login=login,
        retry_after=retry_after,
        # Only our own paths: never send a person on to another site after sign-in.
        next=local_path(request.query.get("next")),
        csrf_field=CSRF_FIELD,
        csrf_token=token,
        session=None,
        path="/sign-in",
    )
    response = web.Response(text=html, status=status, content_type="text/html")
    if retry_after > 0:
        response.headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    response.set_cookie(
        SIGN_IN_COOKIE,
        token,
        max_age=3600,
        httponly=True,
        samesite="Strict",
        secure=app.settings.session_cookie_secure,
        path="/sign-in",
    )
    return response


async def sign_in(request: web.Request) -> web.Response:
    app = console(request)
    unreadable = "This sign-in form cannot be read: nothing was sent. Reload the page and sign in."
    try:
        form = await request.post()
    except ValueError:
        return _sign_in_form(request, status=400, error=unreadable, login="")
    sent, expected = form.get(CSRF_FIELD), request.cookies.get(SIGN_IN_COOKIE)
    try:
        fresh = isinstance(sent, str) and bool(expected) and same_token(sent, expected or "")
    except CsrfUnreadable:
        return _sign_in_form(request, status=400, error=unreadable, login="")
    if not fresh:
        return _sign_in_form(
            request,
            status=403,
            error="This sign-in form has expired: nothing was sent. Please sign in again.",
            login="",
        )
    login = form.get("login", "")
    password = form.get("password", "")
    if not isinstance(login, str) or not isinstance(password, str):
        return _sign_in_form(request, status=400, error=unreadable, login="")
    login = login.strip()
    if not login or not password:
        return _sign_in_form(
            request, status=400, error="Give your login and your password.", login=login
        )
    try:
        session = await app.accounts.sign_in(
            login, password, screen=SCREEN, address=client_address(request, app.settings)
        )
    except SignInRefused as exc:
        error = str(exc)
        status = 429 if isinstance(exc, SignInThrottled) else 401
        status = 503 if isinstance(exc, SignInBusy) else status
        return _sign_in_form(
            request,
            status=status,
            error=error[0].upper() + error[1:] + ".",
            login=login,
            retry_after=exc.retry_after,
        )
    next_value = form.get("next", "")
    target = local_path(next_value if isinstance(next_value, str) else "")
    if session.account.role == "scorer":
        target = "/"  # the middleware answers with the plain 403 page
    response = web.HTTPSeeOther(target)
    set_session_cookie(response, session, app.settings)
    response.del_cookie(SIGN_IN_COOKIE, path="/sign-in")
    raise response


async def sign_out(request: web.Request) -> web.Response:
    session = session_of(request)
    if session.token:
        await console(request).accounts.sign_out(session.token)
    response = web.HTTPSeeOther("/sign-in")
    clear_session_cookie(response)
    raise response


async def health(request: web.Request) -> web.Response:
    """Alive: the process answers. A balancer asks /readyz."""
    return web.Response(text="ok\n")


async def ready(request: web.Request) -> web.Response:
    """Whether a balancer may send people here: not once the copy is stopping (503)."""
    app = console(request)
    if app.stopping.is_set():
        return web.json_response(
            {
                "ready": False,
                "stopping": True,
                "reason": "this copy is stopping; the other copies take the console",
            },
            status=503,
        )
    # Sign-in and sessions are on the people pool, the screens on the reader pool: both count.
    # Every copy shares the one database, so its outage leaves the copy ready: out of the
    # balancer, a person would get a bare 503 rather than the console's own words.
    pools = [pool for pool in (app.people, app.reader) if pool is not None]
    answers = await asyncio.gather(*(pool_answers(pool) for pool in pools))
    if len(pools) < 2 or not all(answers):
        return web.json_response(
            {
                "ready": True,
                "database": "down",
                "reason": "PostgreSQL did not answer within 1 s: sign-in and pages say so "
                "until it does",
            }
        )
    return web.json_response({"ready": True, "database": "ok"})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/sign-in", sign_in_page)
    app.router.add_post("/sign-in", sign_in)
    app.router.add_post("/sign-out", sign_out)
    app.router.add_get("/health", health)
    app.router.add_get("/readyz", ready)
