"""The operators' screens: integrations, runs, Waiting for you and units; their JSON and actions."""

from __future__ import annotations

import logging
import re
import uuid
from datetime import UTC, datetime, tzinfo
from typing import Any

from aiohttp import web

from omnium.command.v1 import command_pb2
from omnium.common.v1 import actor_pb2
from omnium.delivery.v1 import delivery_pb2
from omnium.imports.v1 import imports_pb2
from omnium_admin import _names, _present
from omnium_admin._auth import may_act, plain_page, session_of
from omnium_admin._console import console
from omnium_admin._pages import back, deadline, page, who, zone
from omnium_admin._sql import QUERIES
from omnium_admin._times import local, shown
from omnium_db import UNIT_STATUSES
from omnium_grpc import SESSION_HEADER, account_actor, command_message, is_id

log = logging.getLogger(__name__)
UNIT_FIELDS = ("name", "phase", "start_at", "venue", "status")
# A side's fields a person can set by hand, and so pin: unpinned as "sides[2].result".
SIDE_FIELDS = ("competitor_id", "score", "result", "rank", "medal")
_SIDE_PIN = re.compile(r"^sides\[([1-9][0-9]{0,3})\]\.([a-z_]+)$")
# A held row's question names what is missing: "... we have no such competitor. Add it, or
# map SC-T-KOR3 to one we have." (omnium_imports.mapping); the form starts from it.
_HELD = re.compile(r"we have no such (competitor|unit)\. Add it, or map (\S+) to one we have")

# The unit picker lists this many; it says how many more a narrower search would show.
PICKER_CHOICES = 12

__all__ = ["add_routes"]


# -- Integrations --------------------------------------------------------------------------


async def _cards(request: web.Request) -> list[dict[str, Any]]:
    answer = await console(request).imports.ListIntegrations(
        imports_pb2.ListIntegrationsRequest(), timeout=deadline(request)
    )
    return [_present.card(i, zone(request)) for i in answer.integrations]


async def integrations_page(request: web.Request) -> web.Response:
    return page(request, "integrations.html", cards=await _cards(request), screen="integrations")


async def integrations_json(request: web.Request) -> web.Response:
    return web.json_response({"integrations": await _cards(request)})


async def set_state(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    code = request.match_info["code"]
    state = {"pause": "paused", "resume": "on", "off": "off"}[request.match_info["action"]]
    answer = await console(request).imports.SetIntegrationState(
        imports_pb2.SetIntegrationStateRequest(
            integration_code=code, state=state, actor=_actor(request, "admin:integrations")
        ),
        timeout=deadline(request),
        metadata=_person(request),
    )
    raise back("/integrations", f"{code}: {answer.message}")


async def run_now(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    code = request.match_info["code"]
    answer = await console(request).imports.RunNow(
        imports_pb2.RunNowRequest(integration_code=code),
        timeout=deadline(request),
        metadata=_person(request),
    )
    raise back("/integrations", f"{code}: {answer.message}")


# -- Runs ----------------------------------------------------------------------------------


async def _runs(request: web.Request, code: str, limit: int) -> list[dict[str, Any]]:
    answer = await console(request).imports.ListRuns(
        imports_pb2.ListRunsRequest(integration_code=code, limit=limit),
        timeout=deadline(request),
    )
    return [_present.run(r, zone(request)) for r in answer.runs]


async def runs_page(request: web.Request) -> web.Response:
    settings = console(request).settings
    cards = await _cards(request)
    codes = [c["code"] for c in cards]
    asked = request.query.get("integration", "")
    code = asked or _busiest(cards)
    chosen = next((c for c in cards if c["code"] == code), None)
    if codes and chosen is None:
        return plain_page(request, 404, "Not found", f"There is no integration {code!r}.")
    limit = max(settings.admin.runs_shown, settings.admin.chart_runs)
    runs = await _runs(request, code, min(limit, 200)) if chosen else []
    return page(
        request,
        "runs.html",
        cards=cards,
        chosen=chosen,
        runs=runs[: settings.admin.runs_shown],
        chart=_present.chart(runs[: settings.admin.chart_runs]),
        picked=not asked and chosen is not None,
        screen="runs",
    )


def _busiest(cards: list[dict[str, Any]]) -> str:
    """The integration the Runs screen opens on: the one whose newest run read rows most
    recently; the first one when no run read any."""
    with_rows = [c for c in cards if c["last_run"] and c["last_run"]["rows"]]
    if with_rows:
        return str(max(with_rows, key=lambda c: c["last_run"]["received_at"])["code"])
    return str(cards[0]["code"]) if cards else ""


async def runs_json(request: web.Request) -> web.Response:
    code = request.query.get("integration", "")
    runs = await _runs(request, code, console(request).settings.admin.runs_shown)
    return web.json_response({"runs": runs})


async def _detail(request: web.Request) -> imports_pb2.RunDetail:
    run_id = request.match_info["run_id"]
    if not is_id(run_id):
        missing = plain_page(request, 404, "Not found", f"{run_id!r} is not a run id.")
        raise web.HTTPNotFound(text=missing.text, content_type="text/html") from None
    app = console(request)
    detail: imports_pb2.RunDetail = await app.imports.GetRun(
        imports_pb2.GetRunRequest(run_id=run_id, rows_per_section=app.settings.admin.rows_shown),
        timeout=deadline(request),
    )
    return detail


async def run_page(request: web.Request) -> web.Response:
    detail = await _detail(request)
    app = console(request)
    limit = app.settings.admin.rows_shown
    run = _present.run(detail.run, zone(request))
    sections = {
        name: _present.rows(entries, limit)
        for name, entries in (
            ("changed", detail.changed),
            ("kept", detail.kept_by_hand),
            ("held", detail.held),
            ("refused", detail.refused),
        )
    }
    every = [r for rows in sections.values() for r in rows]
    assert app.reader is not None
    by_key, by_id = await _names.units_for(
        app.reader,
        run["integration"],
        [r["key"] for r in every],
        [r["unit_id"] for r in every if is_id(r["unit_id"])],
    )
    for rows in sections.values():
        _names.name_rows(rows, by_key, by_id)
    return page(
        request,
        "run.html",
        run=run,
        **sections,
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
    return web.json_response({"run": _present.run(detail.run, zone(request))})


async def start_run(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    run_id = request.match_info["run_id"]
    form = await request.post()
    to = _local(form.get("back"), f"/runs/{run_id}")
    # Start is on the integrations, runs and waiting screens: record the one it was pressed on.
    page = to.strip("/").split("/")[0].split("?")[0]
    screen = f"admin:{page}" if page in ("integrations", "waiting") else "admin:runs"
    answer = await console(request).imports.StartRun(
        imports_pb2.StartRunRequest(run_id=run_id, actor=_actor(request, screen)),
        timeout=deadline(request),
        metadata=_person(request),
    )
    raise back(to, answer.message)


def _person(request: web.Request) -> tuple[tuple[str, str], ...]:
    """The signed-in person's session, as call metadata: the services read who acts from it."""
    return ((SESSION_HEADER, session_of(request).token),)


def _actor(request: web.Request, screen: str) -> actor_pb2.Actor:
    """The signed-in person, on the screen the button was on."""
    return account_actor("person", session_of(request).account, screen)


def _local(value: object, default: str) -> str:
    if isinstance(value, str) and value.startswith("/") and not value.startswith("//"):
        return value
    return default


# -- Waiting for you -----------------------------------------------------------------------


async def waiting_page(
    request: web.Request,
    *,
    status: int = 200,
    error: str = "",
    asked: dict[str, str] | None = None,
) -> web.Response:
    app = console(request)
    answer = await app.imports.ListWaiting(
        imports_pb2.ListWaitingRequest(), timeout=deadline(request)
    )
    items = []
    for w in answer.items:
        held = _HELD.search(w.question) if w.kind == "held" else None
        items.append(
            {
                "id": w.id,
                "integration": w.integration_code,
                "kind": w.kind,
                # What confirming a missing key does: a unit is cancelled, a medal row (a
                # medal withdrawn after a protest) is removed from the table.
                "medal_row": w.target == "medal_row",
                "key": w.subject_key,
                "question": w.question,
                "run_id": w.run_id,
                "ago": shown(_present.when(w.created_at), zone(request), relative=True),
                # Only a question about Scout's id is answered by a lookup; the others (a NOC
                # we do not know, say) say themselves what to do.
                "lookup": held is not None,
                "lookup_kind": held.group(1) if held else "competitor",
                "external_id": held.group(2) if held else "",
            }
        )
    assert app.reader is not None
    await _names.name_items(app.reader, items)
    groups = {
        kind: [i for i in items if i["kind"] == kind] for kind in ("held", "guard", "missing")
    }
    response = page(
        request,
        "waiting.html",
        groups=groups,
        total=len(items),
        error=error,
        asked=asked or {},
        screen="waiting",
    )
    response.set_status(status)
    return response


async def add_lookup(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    form = await request.post()
    asked = {
        k: str(form.get(k, "")).strip() for k in ("item", "integration", "kind", "external_id")
    }
    asked["ours"] = ours = str(form.get("ours", "")).strip()
    integration, kind, external_id = asked["integration"], asked["kind"], asked["external_id"]
    if kind not in ("competitor", "unit") or not external_id or not ours:
        error = "Nothing was added: give Scout's id and ours (our code or id) to add a lookup."
        return await waiting_page(request, status=400, error=error, asked=asked)
    reader = console(request).reader
    assert reader is not None
    found = await reader.fetch(QUERIES["lookup_target"], kind, ours)
    if len(found) != 1:
        error = (
            f"Nothing was added: we have no {kind} with the code or id {ours!r}. "
            f"Check the spelling, or add the {kind} first (see “No such {kind}?” below)."
        )
        return await waiting_page(request, status=400, error=error, asked=asked)
    answer = await console(request).imports.AddLookup(
        imports_pb2.AddLookupRequest(
            integration_code=integration,
            kind=kind,
            external_id=external_id,
            our_id=found[0]["id"],
            by=who(request),
        ),
        timeout=deadline(request),
        metadata=_person(request),
    )
    raise back("/waiting", f"{answer.message} ({found[0]['name']})")


async def resolve_missing(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    cancel = request.match_info["action"] == "cancel"
    answer = await console(request).imports.ResolveMissing(
        imports_pb2.ResolveMissingRequest(
            item_id=int(request.match_info["item_id"]),
            cancel=cancel,
            actor=_actor(request, "admin:waiting"),
        ),
        timeout=deadline(request),
        metadata=_person(request),
    )
    raise back("/waiting", answer.message)


# -- Units ---------------------------------------------------------------------------------


async def _find_units(request: web.Request, limit: int) -> tuple[str, list[dict[str, Any]], int]:
    """A search's words, the units that match all of them (at most `limit`), and how many
    match in all."""
    app = console(request)
    assert app.reader is not None
    query = " ".join(request.query.get("q", "").split())[:100]
    found = await app.reader.fetch(QUERIES["find_units"], query.split(), limit)
    units = [{**u, "teams": " v ".join(s for s in u["sides"] if s)} for u in found]
    return query, units, (found[0]["found"] if found else 0)


async def units_page(request: web.Request) -> web.Response:
    query, units, total = await _find_units(request, console(request).settings.admin.units_found)
    return page(request, "units.html", query=query, units=units, total=total, screen="units")


async def units_json(request: web.Request) -> web.Response:
    """The unit picker's choices: each unit's code and a line a person recognises it by."""
    _, units, total = await _find_units(request, PICKER_CHOICES)
    where = zone(request)
    choices = [
        {
            "code": u["code"],
            "label": " · ".join(
                part
                for part in (
                    u["name"],
                    u["discipline_name"],
                    u["teams"],
                    local(u["start_at"], where) if u["start_at"] else "",
                )
                if part
            ),
        }
        for u in units
    ]
    return web.json_response({"units": choices, "found": total})


async def unit_page(request: web.Request) -> web.Response:
    app = console(request)
    assert app.reader is not None
    unit_id = request.match_info["unit_id"]
    if not is_id(unit_id):
        return plain_page(request, 404, "Not found", f"{unit_id!r} is not a unit id.")
    unit = await app.reader.fetchrow(QUERIES["unit"], unit_id)
    if unit is None:
        return plain_page(request, 404, "Not found", f"There is no unit {unit_id}.")
    sides = await app.reader.fetch(QUERIES["unit_sides"], unit_id)
    history = await app.reader.fetch(QUERIES["unit_history"], unit_id)
    values = {f: _field_text(unit[f], zone(request)) for f in UNIT_FIELDS}
    # Every pin, the unit's and its sides', by the name the unpin command takes.
    pins = [*unit["pinned"]] + [
        f"sides[{side['sort_order']}].{name}" for side in sides for name in side["pinned"]
    ]
    return page(
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


def _field_text(value: Any, where: tzinfo) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        # The event's own clock, its offset written out, so a person edits the time they read.
        return value.astimezone(where).isoformat()
    return str(value)


async def _submit(
    request: web.Request, command_id: str, code: str, unit_id: str, payload: dict[str, Any]
) -> command_pb2.Answer:
    actor = account_actor("person", session_of(request).account, "admin:unit-edit")
    answer: command_pb2.Answer = await console(request).command.Submit(
        command_message(command_id, code, payload, actor, unit_id=unit_id),
        timeout=deadline(request),
        metadata=_person(request),
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
        raise back(f"/units/{unit_id}", "Nothing changed, so nothing was sent.")
    command_id = _local_id(form.get("command_id"))
    answer = await _submit(request, command_id, "units.set_fields", unit_id, {"fields": fields})
    raise back(
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
        raise back(f"/units/{unit_id}", f"{name!r} is not a field that can be unpinned.")
    answer = await _submit(
        request, _local_id(form.get("command_id")), "units.unpin", unit_id, {"fields": [name]}
    )
    raise back(
        f"/units/{unit_id}",
        _said(answer, f"Unpinned {name}: the next import may set it again."),
    )


def _local_id(value: object) -> str:
    # The form carries its own command id, so sending it twice is one change, not two.
    if isinstance(value, str) and re.fullmatch(r"admin:[0-9a-f-]{36}(-[0-9]{1,3})?", value):
        return value
    return f"admin:{uuid.uuid4()}"


# -- Delivery ------------------------------------------------------------------------------


async def _delivery_clients(request: web.Request) -> list[dict[str, Any]]:
    answer = await console(request).delivery.ListClients(
        delivery_pb2.ListClientsRequest(), timeout=deadline(request)
    )
    wanted = console(request).settings.delivery.promise_share
    return [_present.delivery_client(c, zone(request), wanted) for c in answer.clients]


async def delivery_page(request: web.Request) -> web.Response:
    clients = await _delivery_clients(request)
    return page(request, "delivery.html", clients=clients, screen="delivery")


async def delivery_json(request: web.Request) -> web.Response:
    return web.json_response({"clients": await _delivery_clients(request)})


async def resend(request: web.Request) -> web.Response:
    if (refused := may_act(request)) is not None:
        return refused
    code = request.match_info["code"]
    answer = await console(request).delivery.Resend(
        delivery_pb2.ResendRequest(client_code=code), timeout=deadline(request)
    )
    feeds = "1 feed" if answer.feeds == 1 else f"{answer.feeds} feeds"
    raise back("/delivery", f"{code}: {feeds} will be sent again, even where nothing changed.")


async def rotate_secret(request: web.Request) -> web.Response:
    """A new webhook secret, shown once on the page this answers (never in a URL or a log)."""
    if (refused := may_act(request)) is not None:
        return refused
    code = request.match_info["code"]
    answer = await console(request).delivery.RotateWebhookSecret(
        delivery_pb2.RotateWebhookSecretRequest(client_code=code),
        timeout=deadline(request),
        metadata=_person(request),
    )
    rotated = {
        "code": code,
        "secret": answer.secret,
        "until": answer.previous_expires_at.ToDatetime(tzinfo=UTC),
    }
    clients = await _delivery_clients(request)
    answer_page = page(
        request, "delivery.html", clients=clients, screen="delivery", rotated=rotated
    )
    answer_page.headers["Cache-Control"] = "no-store"
    return answer_page


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
    r.add_get("/api/units", units_json)
    r.add_get("/units/{unit_id}", unit_page)
    r.add_post("/units/{unit_id}/fields", set_fields)
    r.add_post("/units/{unit_id}/unpin", unpin)
    r.add_get("/delivery", delivery_page)
    r.add_get("/api/delivery", delivery_json)
    r.add_post("/delivery/{code}/resend", resend)
    r.add_post("/delivery/{code}/rotate-secret", rotate_secret)
