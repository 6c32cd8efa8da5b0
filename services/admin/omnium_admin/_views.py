"""The screens: integrations, runs, Waiting for you, units, accounts, API keys; JSON, actions."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import grpc
from aiohttp import web
from aiohttp.typedefs import Handler
from google.protobuf import json_format, struct_pb2
from grpc import aio

from omnium.command.v1 import command_pb2
from omnium.common.v1 import actor_pb2
from omnium.delivery.v1 import delivery_pb2
from omnium.imports.v1 import imports_pb2
from omnium_accounts import ROLES, AccountError, ApiKeys
from omnium_admin import _present
from omnium_admin._auth import console, may_act, plain_page, session_of
from omnium_admin._sql import QUERIES
from omnium_db import DATABASE_ERRORS, UNIT_STATUSES

log = logging.getLogger(__name__)
UNIT_FIELDS = ("name", "phase", "start_at", "venue", "status")
# A side's fields a person can set by hand, and so pin: unpinned as "sides[2].result".
SIDE_FIELDS = ("competitor_id", "score", "result", "rank", "medal")
_SIDE_PIN = re.compile(r"^sides\[([1-9][0-9]{0,3})\]\.([a-z_]+)$")
# A held row's question names what is missing: "... we have no such competitor. Add it, or
# map SC-T-KOR3 to one we have." (omnium_imports.mapping); the form starts from it.
_HELD = re.compile(r"we have no such (competitor|unit)\. Add it, or map (\S+) to one we have")

__all__ = ["add_routes", "plain_errors"]


@web.middleware
async def plain_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A service that cannot answer is 'failed to read' with Try again, never a traceback."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except aio.AioRpcError as exc:
        code, details = exc.code(), exc.details() or ""
        if code == grpc.StatusCode.NOT_FOUND:
            status, title, message = 404, "Not found", details
        elif code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
            status, title, message = 400, "Not done", details
        else:
            log.warning("admin: %s %s: %s %s", request.method, request.path, code, details)
            status, title, message = (
                503,
                "Failed to read",
                "The imports, command or delivery service did not answer "
                f"({code.name.lower().replace('_', ' ')}). Nothing was changed.",
            )
        return _error(request, status, title, message)
    except DATABASE_ERRORS as exc:
        log.warning("admin: %s %s: %s", request.method, request.path, exc)
        return _error(
            request, 503, "Failed to read", "The database did not answer. Nothing was changed."
        )


def _error(request: web.Request, status: int, title: str, message: str) -> web.Response:
    if request.path.startswith("/api/"):
        return web.json_response({"error": f"{title}: {message}"}, status=status)
    return plain_page(request, status, title, message, retry=status == 503)


def _page(request: web.Request, name: str, **context: Any) -> web.Response:
    session = session_of(request)
    html = console(request).render(
        name,
        session=session,
        may_act=session.account.may("operator"),
        path=request.path_qs,
        said=request.query.get("said", ""),
        **context,
    )
    return web.Response(text=html, content_type="text/html")


def _back(to: str, said: str) -> web.HTTPSeeOther:
    joiner = "&" if "?" in to else "?"
    return web.HTTPSeeOther(f"{to}{joiner}{urlencode({'said': said})}")


def _deadline(request: web.Request) -> float:
    return console(request).settings.grpc_deadline_seconds


def _who(request: web.Request) -> str:
    return session_of(request).account.name


# -- Integrations --------------------------------------------------------------------------


async def _cards(request: web.Request) -> list[dict[str, Any]]:
    answer = await console(request).imports.ListIntegrations(
        imports_pb2.ListIntegrationsRequest(), timeout=_deadline(request)
    )
    return [_present.card(i) for i in answer.integrations]


async def integrations_page(request: web.Request) -> web.Response:
    return _page(request, "integrations.html", cards=await _cards(request), screen="integrations")


async def integrations_json(request: web.Request) -> web.Response:
    return web.json_response({"integrations": await _cards(request)})


async def set_state(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    code = request.match_info["code"]
    state = {"pause": "paused", "resume": "on", "off": "off"}[request.match_info["action"]]
    answer = await console(request).imports.SetIntegrationState(
        imports_pb2.SetIntegrationStateRequest(
            integration_code=code, state=state, by=_who(request)
        ),
        timeout=_deadline(request),
    )
    raise _back("/integrations", f"{code}: {answer.message}")


async def run_now(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    code = request.match_info["code"]
    answer = await console(request).imports.RunNow(
        imports_pb2.RunNowRequest(integration_code=code), timeout=_deadline(request)
    )
    raise _back("/integrations", f"{code}: {answer.message}")


# -- Runs ----------------------------------------------------------------------------------


async def _runs(request: web.Request, code: str, limit: int) -> list[dict[str, Any]]:
    answer = await console(request).imports.ListRuns(
        imports_pb2.ListRunsRequest(integration_code=code, limit=limit),
        timeout=_deadline(request),
    )
    return [_present.run(r) for r in answer.runs]


async def runs_page(request: web.Request) -> web.Response:
    settings = console(request).settings
    cards = await _cards(request)
    codes = [c["code"] for c in cards]
    code = request.query.get("integration") or (codes[0] if codes else "")
    chosen = next((c for c in cards if c["code"] == code), None)
    if codes and chosen is None:
        return plain_page(request, 404, "Not found", f"There is no integration {code!r}.")
    limit = max(settings.admin_runs_shown, settings.admin_chart_runs)
    runs = await _runs(request, code, min(limit, 200)) if chosen else []
    return _page(
        request,
        "runs.html",
        cards=cards,
        chosen=chosen,
        runs=runs[: settings.admin_runs_shown],
        chart=_present.chart(runs[: settings.admin_chart_runs]),
        screen="runs",
    )


async def runs_json(request: web.Request) -> web.Response:
    code = request.query.get("integration", "")
    runs = await _runs(request, code, console(request).settings.admin_runs_shown)
    return web.json_response({"runs": runs})


async def _detail(request: web.Request) -> imports_pb2.RunDetail:
    run_id = request.match_info["run_id"]
    try:
        uuid.UUID(run_id)
    except ValueError:
        page = plain_page(request, 404, "Not found", f"{run_id!r} is not a run id.")
        raise web.HTTPNotFound(text=page.text, content_type="text/html") from None
    app = console(request)
    detail: imports_pb2.RunDetail = await app.imports.GetRun(
        imports_pb2.GetRunRequest(run_id=run_id, rows_per_section=app.settings.admin_rows_shown),
        timeout=_deadline(request),
    )
    return detail


async def run_page(request: web.Request) -> web.Response:
    detail = await _detail(request)
    limit = console(request).settings.admin_rows_shown
    run = _present.run(detail.run)
    return _page(
        request,
        "run.html",
        run=run,
        changed=_present.rows(detail.changed, limit),
        kept=_present.rows(detail.kept_by_hand, limit),
        held=_present.rows(detail.held, limit),
        refused=_present.rows(detail.refused, limit),
        counts={
            "changed": detail.changed_total,
            "kept": detail.kept_by_hand_total,
            "held": detail.held_total,
            "refused": detail.refused_total,
        },
        limit=limit,
        screen="runs",
    )


async def run_json(request: web.Request) -> web.Response:
    detail = await _detail(request)
    return web.json_response({"run": _present.run(detail.run)})


async def start_run(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    run_id = request.match_info["run_id"]
    answer = await console(request).imports.StartRun(
        imports_pb2.StartRunRequest(run_id=run_id, by=_who(request)), timeout=_deadline(request)
    )
    form = await request.post()
    raise _back(_local(form.get("back"), f"/runs/{run_id}"), answer.message)


def _local(value: object, default: str) -> str:
    if isinstance(value, str) and value.startswith("/") and not value.startswith("//"):
        return value
    return default


# -- Waiting for you -----------------------------------------------------------------------


async def waiting_page(request: web.Request) -> web.Response:
    answer = await console(request).imports.ListWaiting(
        imports_pb2.ListWaitingRequest(), timeout=_deadline(request)
    )
    items = []
    for w in answer.items:
        held = _HELD.search(w.question) if w.kind == "held" else None
        items.append(
            {
                "id": w.id,
                "integration": w.integration_code,
                "kind": w.kind,
                "key": w.subject_key,
                "question": w.question,
                "run_id": w.run_id,
                "ago": _present.ago(_present.when(w.created_at)),
                # Only a question about Scout's id is answered by a lookup; the others (a NOC
                # we do not know, say) say themselves what to do.
                "lookup": held is not None,
                "lookup_kind": held.group(1) if held else "competitor",
                "external_id": held.group(2) if held else "",
            }
        )
    groups = {
        kind: [i for i in items if i["kind"] == kind] for kind in ("held", "guard", "missing")
    }
    return _page(request, "waiting.html", groups=groups, total=len(items), screen="waiting")


async def add_lookup(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    form = await request.post()
    integration = str(form.get("integration", ""))
    kind = str(form.get("kind", ""))
    external_id = str(form.get("external_id", "")).strip()
    ours = str(form.get("ours", "")).strip()
    if kind not in ("competitor", "unit") or not external_id or not ours:
        raise _back("/waiting", "Give Scout's id and ours (a code or an id) to add a lookup.")
    reader = console(request).reader
    assert reader is not None
    found = await reader.fetch(QUERIES["lookup_target"], kind, ours)
    if len(found) != 1:
        raise _back(
            "/waiting",
            f"We have no {kind} {ours!r}: add it first, or give its exact code or id.",
        )
    answer = await console(request).imports.AddLookup(
        imports_pb2.AddLookupRequest(
            integration_code=integration,
            kind=kind,
            external_id=external_id,
            our_id=found[0]["id"],
            by=_who(request),
        ),
        timeout=_deadline(request),
    )
    raise _back("/waiting", f"{answer.message} ({found[0]['name']})")


async def resolve_missing(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    account = session_of(request).account
    cancel = request.match_info["action"] == "cancel"
    answer = await console(request).imports.ResolveMissing(
        imports_pb2.ResolveMissingRequest(
            item_id=int(request.match_info["item_id"]),
            cancel=cancel,
            by=account.name,
            source_code=f"account:{account.id}",
            screen="admin:waiting",
        ),
        timeout=_deadline(request),
    )
    raise _back("/waiting", answer.message)


# -- Units ---------------------------------------------------------------------------------


async def units_page(request: web.Request) -> web.Response:
    app = console(request)
    assert app.reader is not None
    query = request.query.get("q", "").strip()[:100]
    units = await app.reader.fetch(QUERIES["find_units"], query, app.settings.admin_units_found)
    return _page(request, "units.html", query=query, units=units, screen="units")


async def unit_page(request: web.Request) -> web.Response:
    app = console(request)
    assert app.reader is not None
    unit_id = request.match_info["unit_id"]
    try:
        uuid.UUID(unit_id)
    except ValueError:
        return plain_page(request, 404, "Not found", f"{unit_id!r} is not a unit id.")
    unit = await app.reader.fetchrow(QUERIES["unit"], unit_id)
    if unit is None:
        return plain_page(request, 404, "Not found", f"There is no unit {unit_id}.")
    sides = await app.reader.fetch(QUERIES["unit_sides"], unit_id)
    history = await app.reader.fetch(QUERIES["unit_history"], unit_id)
    values = {f: _field_text(unit[f]) for f in UNIT_FIELDS}
    # Every pin, the unit's and its sides', by the name the unpin command takes.
    pins = [*unit["pinned"]] + [
        f"sides[{side['sort_order']}].{name}" for side in sides for name in side["pinned"]
    ]
    return _page(
        request,
        "unit.html",
        unit=unit,
        values=values,
        fields=UNIT_FIELDS,
        statuses=UNIT_STATUSES,
        sides=sides,
        pins=pins,
        history=history,
        command_id=f"admin:{uuid.uuid4()}",
        screen="units",
    )


def _field_text(value: Any) -> str:
    if value is None:
        return ""
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def _actor(request: web.Request, screen: str) -> actor_pb2.Actor:
    account = session_of(request).account
    return actor_pb2.Actor(
        kind=actor_pb2.Actor.KIND_PERSON,
        name=account.name,
        source_code=f"account:{account.id}",
        screen=screen,
    )


async def _submit(
    request: web.Request, command_id: str, code: str, unit_id: str, payload: dict[str, Any]
) -> command_pb2.Answer:
    struct = struct_pb2.Struct()
    json_format.ParseDict(payload, struct)
    answer: command_pb2.Answer = await console(request).command.Submit(
        command_pb2.Command(
            command_id=command_id,
            code=code,
            subject=command_pb2.Subject(kind="unit", id=unit_id),
            payload=struct,
            actor=_actor(request, "admin:unit-edit"),
        ),
        timeout=_deadline(request),
    )
    return answer


def _said(answer: command_pb2.Answer, done: str) -> str:
    if answer.outcome in (command_pb2.OUTCOME_ACCEPTED, command_pb2.OUTCOME_DUPLICATE):
        return done
    return f"Not saved: {answer.reason}"


async def set_fields(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    unit_id = request.match_info["unit_id"]
    form = await request.post()
    fields: dict[str, Any] = {}
    for name in UNIT_FIELDS:
        new, old = form.get(name), form.get(f"was_{name}")
        if isinstance(new, str) and new.strip() != (old if isinstance(old, str) else ""):
            fields[name] = new.strip() or None
    if not fields:
        raise _back(f"/units/{unit_id}", "Nothing changed, so nothing was sent.")
    command_id = _local_id(form.get("command_id"))
    answer = await _submit(request, command_id, "units.set_fields", unit_id, {"fields": fields})
    raise _back(
        f"/units/{unit_id}",
        _said(answer, f"Saved and pinned: {', '.join(sorted(fields))}. Imports will keep it."),
    )


async def unpin(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    unit_id = request.match_info["unit_id"]
    form = await request.post()
    name = str(form.get("field", ""))
    side = _SIDE_PIN.match(name)
    if name not in UNIT_FIELDS and not (side and side[2] in SIDE_FIELDS):
        raise _back(f"/units/{unit_id}", f"{name!r} is not a field that can be unpinned.")
    answer = await _submit(
        request, _local_id(form.get("command_id")), "units.unpin", unit_id, {"fields": [name]}
    )
    raise _back(
        f"/units/{unit_id}",
        _said(answer, f"Unpinned {name}: the next import may set it again."),
    )


def _local_id(value: object) -> str:
    # The form carries its own command id, so sending it twice is one change, not two.
    if isinstance(value, str) and re.fullmatch(r"admin:[0-9a-f-]{36}(-[0-9]{1,3})?", value):
        return value
    return f"admin:{uuid.uuid4()}"


# -- Accounts (admins only) ----------------------------------------------------------------


def _admins_only(request: web.Request) -> web.Response | None:
    account = session_of(request).account
    if account.role == "admin":
        return None
    return plain_page(
        request,
        403,
        "Only for admins",
        f"Your account is {_a(account.role)}: accounts are made and changed by an admin. "
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
    response = _page(
        request,
        "accounts.html",
        accounts=await console(request).accounts.overview(),
        roles=ROLES,
        me=session_of(request).account.login,
        error=error,
        made=made or {"login": "", "name": "", "role": "scorer"},
        min_length=console(request).settings.password_min_length,
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
    log.info("admin: %s made the %s account %s", _who(request), account.role, account.login)
    raise _back("/accounts", f"Made the {account.role} account {account.login}.")


def _changer(request: web.Request) -> tuple[str, str]:
    """Who changes an account from here, for its record: the signed-in person."""
    account = session_of(request).account
    return account.name, f"account:{account.id}"


def _a(role: str) -> str:
    return ("an " if role[:1] in ("a", "e", "i", "o", "u") else "a ") + role


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
            said = f"{login} is now {_a(role)}."
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
    log.info("admin: %s: %s", _who(request), said)
    raise _back("/accounts", said)


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
    response = _page(
        request,
        "keys.html",
        keys=await _api_keys(request).every(),
        error=error,
        made=made or {"name": "", "rate": "", "burst": ""},
        new_key=new_key,
        defaults=(settings.gateway_key_rate_per_second, settings.gateway_key_burst),
        reload_seconds=settings.gateway_keys_reload_seconds,
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
            by=_who(request),
        )
    except AccountError as exc:
        return await keys_page(request, status=400, error=_not_done(exc), made=made)
    log.info("admin: %s made the API key %s", _who(request), view.name)
    return await keys_page(request, new_key=(view.name, key))


async def change_key(request: web.Request) -> web.Response:
    if (refused := _admins_only(request)) is not None:
        return refused
    name, off = request.match_info["name"], request.match_info["action"] == "off"
    try:
        await _api_keys(request).set_disabled(name, off)
    except AccountError as exc:
        return await keys_page(request, status=400, error=_not_done(exc))
    seconds = console(request).settings.gateway_keys_reload_seconds
    said = (
        f"Turned the key {name} off: the gateway refuses it within {seconds:g} s."
        if off
        else f"Turned the key {name} on: the gateway lets it in within {seconds:g} s."
    )
    log.info("admin: %s: %s", _who(request), said)
    raise _back("/keys", said)


def _sessions(n: int) -> str:
    return "1 session" if n == 1 else f"{n} sessions"


# -- Delivery ------------------------------------------------------------------------------


async def _delivery_clients(request: web.Request) -> list[dict[str, Any]]:
    answer = await console(request).delivery.ListClients(
        delivery_pb2.ListClientsRequest(), timeout=_deadline(request)
    )
    return [_present.delivery_client(c) for c in answer.clients]


async def delivery_page(request: web.Request) -> web.Response:
    clients = await _delivery_clients(request)
    return _page(request, "delivery.html", clients=clients, screen="delivery")


async def delivery_json(request: web.Request) -> web.Response:
    return web.json_response({"clients": await _delivery_clients(request)})


async def resend(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    code = request.match_info["code"]
    answer = await console(request).delivery.Resend(
        delivery_pb2.ResendRequest(client_code=code), timeout=_deadline(request)
    )
    feeds = "1 feed" if answer.feeds == 1 else f"{answer.feeds} feeds"
    raise _back("/delivery", f"{code}: {feeds} will be sent again, even where nothing changed.")


async def home(request: web.Request) -> web.Response:
    raise web.HTTPSeeOther("/integrations")


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/", home)
    r.add_get("/integrations", integrations_page)
    r.add_get("/api/integrations", integrations_json)
    r.add_post(r"/integrations/{code}/{action:pause|resume|off}", set_state)
    r.add_post("/integrations/{code}/run-now", run_now)
    r.add_get("/runs", runs_page)
    r.add_get("/api/runs", runs_json)
    r.add_get("/runs/{run_id}", run_page)
    r.add_get("/api/runs/{run_id}", run_json)
    r.add_post("/runs/{run_id}/start", start_run)
    r.add_get("/waiting", waiting_page)
    r.add_post("/waiting/lookup", add_lookup)
    r.add_post(r"/waiting/{item_id:\d+}/{action:cancel|dismiss}", resolve_missing)
    r.add_get("/units", units_page)
    r.add_get("/units/{unit_id}", unit_page)
    r.add_post("/units/{unit_id}/fields", set_fields)
    r.add_post("/units/{unit_id}/unpin", unpin)
    r.add_get("/delivery", delivery_page)
    r.add_get("/api/delivery", delivery_json)
    r.add_post("/delivery/{code}/resend", resend)
    r.add_get("/accounts", accounts_page)
    r.add_post("/accounts", make_account)
    r.add_post(r"/accounts/{login}/{action:password|role|off|on|sign-out}", change_account)
    r.add_get("/keys", keys_page)
    r.add_post("/keys", make_key)
    r.add_post(r"/keys/{name}/{action:off|on}", change_key)
