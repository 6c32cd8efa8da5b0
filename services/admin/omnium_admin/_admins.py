"""Who may do what: the scorers' matches (operators and admins), accounts (made, changed,
turned off, signed out everywhere) and the media clients' API keys (admins)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from omnium_accounts import ROLES, AccountError, ApiKeys, Assignments, audit
from omnium_admin._auth import a_role, refused_unless, session_of
from omnium_admin._console import console
from omnium_admin._pages import back, page, who
from omnium_process import client_address

log = logging.getLogger(__name__)


# -- Scorers: who scores which match (operators and admins) ---------------------------------


def _operators_only(request: web.Request) -> web.Response | None:
    return refused_unless(
        request,
        "operator",
        "Only for operators",
        "operators and admins give scorers their matches.",
    )


def _assignments(request: web.Request) -> Assignments:
    app = console(request)
    assert app.people is not None
    return Assignments(app.people)


async def scorers_page(
    request: web.Request,
    *,
    status: int = 200,
    error: str = "",
    asked: Mapping[str, str] | None = None,
) -> web.Response:
    if (refused := _operators_only(request)) is not None:
        return refused
    assignments = _assignments(request)
    response = page(
        request,
        "scorers.html",
        assignments=await assignments.overview(),
        refusals=await assignments.refusals(),
        scorers=await assignments.scorers(),
        events=await assignments.events(),
        required=console(request).settings.scoring.scorer_assignment_required,
        error=error,
        asked=asked or {"login": "", "unit": "", "venue": "", "day": "", "event": ""},
        screen="scorers",
    )
    response.set_status(status)
    return response


async def assign_scorer(request: web.Request) -> web.Response:
    if (refused := _operators_only(request)) is not None:
        return refused
    form = await request.post()
    asked = {k: str(form.get(k, "")).strip() for k in ("login", "unit", "venue", "day", "event")}
    try:
        said = await _assignments(request).assign(
            asked["login"],
            unit=asked["unit"],
            venue=asked["venue"],
            day=asked["day"],
            event_code=asked["event"] or None,
            hand_over=form.get("hand_over") == "on",
            by=_changer(request),
        )
    except AccountError as exc:
        return await scorers_page(request, status=400, error=_not_done(exc), asked=asked)
    log.info("admin: %s: %s", who(request), said)
    raise back("/scorers", f"{said}.")


async def unassign_scorer(request: web.Request) -> web.Response:
    if (refused := _operators_only(request)) is not None:
        return refused
    try:
        said = await _assignments(request).remove(
            int(request.match_info["assignment_id"]), by=_changer(request)
        )
    except AccountError as exc:
        return await scorers_page(request, status=400, error=_not_done(exc))
    log.info("admin: %s: %s", who(request), said)
    raise back("/scorers", f"{said}.")


# -- Accounts (admins only) ----------------------------------------------------------------


def _admins_only(request: web.Request) -> web.Response | None:
    return refused_unless(
        request,
        "admin",
        "Only for admins",
        "accounts are made and changed by an admin. "
        "Ask one to make an account, set a new password or sign a lost device out.",
    )


async def accounts_page(
    request: web.Request,
    *,
    status: int = 200,
    error: str = "",
    made: Mapping[str, str] | None = None,
) -> web.Response:
    if (refused := _admins_only(request)) is not None:
        return refused
    response = page(
        request,
        "accounts.html",
        accounts=await console(request).accounts.overview(),
        roles=ROLES,
        me=session_of(request).account.login,
        error=error,
        made=made or {"login": "", "name": "", "role": "scorer"},
        min_length=console(request).settings.sign_in.password_min_length,
        screen="accounts",
    )
    response.set_status(status)
    return response


def _new_password(form: Mapping[str, Any]) -> str:
    password, again = str(form.get("password", "")), str(form.get("again", ""))
    if password != again:
        raise AccountError("the two passwords differ")
    return password


def _not_done(exc: AccountError) -> str:
    text = str(exc)
    return f"Nothing was changed: {text[0].lower()}{text[1:]}."


async def make_account(request: web.Request) -> web.Response:
    if (refused := _admins_only(request)) is not None:
        return refused
    form = await request.post()
    made = {k: str(form.get(k, "")).strip() for k in ("login", "name", "role")}
    try:
        account = await console(request).accounts.create(
            made["login"].lower(),
            made["name"],
            made["role"],
            _new_password(form),
            by=_changer(request),
        )
    except AccountError as exc:
        return await accounts_page(request, status=400, error=_not_done(exc), made=made)
    log.info("admin: %s made the %s account %s", who(request), account.role, account.login)
    raise back("/accounts", f"Made the {account.role} account {account.login}.")


def _changer(request: web.Request) -> tuple[str, str]:
    """Who changes an account from here, for its record: the signed-in person."""
    account = session_of(request).account
    return account.name, f"account:{account.id}"


async def change_account(request: web.Request) -> web.Response:
    """A new password, a role, off or on, or every session ended, for one account."""
    if (refused := _admins_only(request)) is not None:
        return refused
    login, action = request.match_info["login"], request.match_info["action"]
    session = session_of(request)
    accounts = console(request).accounts
    by = _changer(request)
    form = await request.post()
    try:
        if login == session.account.login and action in ("off", "role"):
            raise AccountError(
                "you cannot turn off or change the role of your own account; ask another admin"
            )
        if action == "password":
            ended = await accounts.set_password(
                login, _new_password(form), keep_token=session.token or None, by=by
            )
            said = f"Set a new password for {login}; {_sessions(ended)} ended."
        elif action == "role":
            role = str(form.get("role", ""))
            await accounts.set_role(login, role, by=by)
            said = f"{login} is now {a_role(role)}."
        elif action == "off":
            ended = await accounts.set_disabled(login, True, by=by)
            said = f"Turned {login} off: it cannot sign in; {_sessions(ended)} ended."
        elif action == "on":
            await accounts.set_disabled(login, False, by=by)
            said = f"Turned {login} on: it can sign in again."
        else:
            ended = await accounts.sign_out_everywhere(
                login, keep_token=session.token or None, by=by
            )
            said = f"Signed {login} out everywhere: {_sessions(ended)} ended."
    except AccountError as exc:
        return await accounts_page(request, status=400, error=_not_done(exc))
    log.info("admin: %s: %s", who(request), said)
    raise back("/accounts", said)


# -- API keys (admins only) ----------------------------------------------------------------


def _api_keys(request: web.Request) -> ApiKeys:
    app = console(request)
    assert app.people is not None
    return ApiKeys(app.people)


async def keys_page(
    request: web.Request,
    *,
    status: int = 200,
    error: str = "",
    made: Mapping[str, str] | None = None,
    new_key: tuple[str, str] | None = None,
) -> web.Response:
    if (refused := _admins_only(request)) is not None:
        return refused
    settings = console(request).settings
    response = page(
        request,
        "keys.html",
        keys=await _api_keys(request).every(),
        error=error,
        made=made or {"name": "", "rate": "", "burst": ""},
        new_key=new_key,
        defaults=(settings.gateway.key_rate_per_second, settings.gateway.key_burst),
        reload_seconds=settings.gateway.keys_reload_seconds,
        screen="keys",
    )
    response.set_status(status)
    # The one answer that carries a new key is kept by no cache.
    response.headers["Cache-Control"] = "no-store"
    return response


def _number(form: Mapping[str, Any], field: str, kind: type[float] | type[int], what: str) -> Any:
    text = str(form.get(field, "")).strip()
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        raise AccountError(f"{what} {text!r} is not a number") from None


async def make_key(request: web.Request) -> web.Response:
    """A new key, shown on this answer only (never in a link, never again)."""
    if (refused := _admins_only(request)) is not None:
        return refused
    form = await request.post()
    made = {k: str(form.get(k, "")).strip() for k in ("name", "rate", "burst")}
    try:
        view, key = await _api_keys(request).create(
            made["name"].lower(),
            rate_per_second=_number(form, "rate", float, "the rate"),
            burst=_number(form, "burst", int, "the burst"),
            by=who(request),
        )
    except AccountError as exc:
        return await keys_page(request, status=400, error=_not_done(exc), made=made)
    log.info("admin: %s made the API key %s", who(request), view.name)
    _audit_key(request, view.name, "made")
    return await keys_page(request, new_key=(view.name, key))


async def change_key(request: web.Request) -> web.Response:
    if (refused := _admins_only(request)) is not None:
        return refused
    name, off = request.match_info["name"], request.match_info["action"] == "off"
    try:
        await _api_keys(request).set_disabled(name, off)
    except AccountError as exc:
        return await keys_page(request, status=400, error=_not_done(exc))
    seconds = console(request).settings.gateway.keys_reload_seconds
    said = (
        f"Turned the key {name} off: the gateway refuses it within {seconds:g} s."
        if off
        else f"Turned the key {name} on: the gateway lets it in within {seconds:g} s."
    )
    log.info("admin: %s: %s", who(request), said)
    _audit_key(request, name, "turned off" if off else "turned on")
    raise back("/keys", said)


def _audit_key(request: web.Request, name: str, change: str) -> None:
    """An API key made, turned off (revoked) or on: its name and who, never the key."""
    account = session_of(request).account
    audit(
        "api_key_change",
        key_name=name,
        change=change,
        by=account.name,
        by_source=f"account:{account.id}",
        address=client_address(request, console(request).settings),
    )


def _sessions(n: int) -> str:
    return "1 session" if n == 1 else f"{n} sessions"


def add_routes(app: web.Application) -> None:
    app.router.add_get("/scorers", scorers_page)
    app.router.add_post("/scorers", assign_scorer)
    app.router.add_post(r"/scorers/{assignment_id:\d+}/remove", unassign_scorer)
    app.router.add_get("/accounts", accounts_page)
    app.router.add_post("/accounts", make_account)
    app.router.add_post(r"/accounts/{login}/{action:password|role|off|on|sign-out}", change_account)
    app.router.add_get("/keys", keys_page)
    app.router.add_post("/keys", make_key)
    app.router.add_post(r"/keys/{name}/{action:off|on}", change_key)
