"""The scorer console's pages and JSON endpoints, and where the provider push door is mounted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import redis.asyncio as aioredis
from aiohttp import web
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message
from grpc import aio

from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from omnium_accounts import Accounts, SignInBusy, SignInRefused, SignInThrottled, may_sign_in_on
from omnium_accounts.web import (
    CsrfUnreadable,
    add_security_headers,
    clear_session_cookie,
    csrf_ok,
    request_session,
    set_session_cookie,
)
from omnium_grpc import (
    SESSION_HEADER,
    account_actor,
    act_outcome_word,
    actor_message,
    open_channel,
)
from omnium_process import client_address
from omnium_scorer_web._provider_door import ProviderDoor
from omnium_settings import Settings

log = logging.getLogger(__name__)
STATIC = Path(__file__).with_name("static")
SCREEN = "scorer-console"
_STATIC_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".webmanifest": "application/manifest+json",
}
_UNIT = re.compile(r"^[0-9a-fA-F-]{36}$")
STUB = web.AppKey("omnium_scoring_stub", scoring_pb2_grpc.ScoringServiceStub)
CHANNEL = web.AppKey("omnium_scoring_channel", aio.Channel)
THROTTLE_REDIS = web.AppKey("omnium_sign_in_redis", aioredis.Redis)
# A tap's time (client_at, ms since 1970) is taken from 1970 to the end of year 9999.
_LATEST_TAP_MS = 253_402_300_799_999
# What a crafted JSON body can raise while it is read or turned into an action: each is a 400.
_UNREADABLE = (ValueError, TypeError, KeyError, OverflowError, RecursionError)
# The signed-in scorer's session, as call metadata: scoring reads the person from it.
_PERSON: web.RequestKey[tuple[tuple[str, str], ...]] = web.RequestKey("omnium_scorer_person")
# The signed-in scorer's session token, for what is counted per session (watch streams).
_SESSION: web.RequestKey[str] = web.RequestKey("omnium_scorer_session")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _problem(status: int, message: str, **extra: object) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


def _count(text: str, what: str, most: int) -> int:
    """A query's whole number from 0 to `most`; ValueError with a plain reason otherwise."""
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise ValueError(f"{what}, 0 to {most}, not {text[:40]!r}")
    return min(int(text), most)


def _plain(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return out


def _match(state: scoring_pb2.MatchState, *, standing: bool = False) -> dict[str, Any]:
    out = _plain(state)
    out["state"] = json.loads(out.pop("state_json", "") or "null")
    for name in ("standing", "undone_since", "standing_after"):
        out.pop(name, None)
    if standing:
        # As the console queues its own actions, and with the seq they are the standing ones of.
        out["standing"] = [
            {
                "seq": a.seq,
                "kind": a.kind,
                "side": a.side or None,
                "fields": json_format.MessageToDict(a.fields),
                "client_at": a.client_at.ToMilliseconds() if a.HasField("client_at") else 0,
            }
            for a in state.standing
        ]
        out["standing_seq"] = state.seq
        # Not 0: `standing` is only what came after standing_after, and undone_since the
        # earlier seqs undone since; the copy of that seq is brought up to date with them.
        out["standing_after"] = state.standing_after
        out["undone_since"] = list(state.undone_since)
    return out


def _side(side: scoring_pb2.SideScore) -> dict[str, Any]:
    return {
        "order": side.order,
        "name": side.name,
        "noc": side.noc,
        "score": side.score,
        "result": side.result,
        "rank": side.rank,
    }


def _answered_match_json(state: scoring_pb2.MatchState) -> str:
    """`_match(state)` as JSON text, for the state an action's answer carries (no buttons, no
    recent actions): built by hand, with the state document passed through as scoring wrote it
    rather than parsed and written again. Anything else goes through `_match`."""
    if state.HasField("sport_actions") or state.recent:
        return json.dumps(_match(state))
    head = {
        "unit_id": state.unit_id,
        "unit_code": state.unit_code,
        "name": state.name,
        "status": state.status,
        "sport": state.sport,
        "seq": state.seq,
        "sides": [_side(s) for s in state.sides],
        "finished": state.finished,
        "winner": state.winner,
        "summary": state.summary,
        "recent": [],
    }
    return f'{json.dumps(head)[:-1]}, "state": {state.state_json or "null"}}}'


def _answer(answer: scoring_pb2.ActAnswer) -> dict[str, Any]:
    out = {
        "client_id": answer.client_id,
        "outcome": act_outcome_word(answer.outcome),
        "reason": answer.reason,
        "seq": answer.seq,
    }
    return out


class _Watchers:
    """Watch streams open on this worker, per signed-in session and per client address. Only
    holders with a stream open are kept, so the maps never outgrow the streams themselves."""

    def __init__(self, settings: Settings) -> None:
        self.per_session = settings.scoring.scorer_watch_per_session
        self.per_address = settings.scoring.scorer_watch_per_address
        self.retry_after = settings.scoring.scorer_watch_retry_after_seconds
        self.sessions: dict[str, int] = {}
        self.addresses: dict[str, int] = {}

    def refusal(self, session: str | None, address: str) -> web.Response | None:
        """A 429 when this session or address already holds its most streams here, else None."""
        if session is not None and 0 < self.per_session <= self.sessions.get(session, 0):
            message = (
                f"this session already watches {self.per_session} matches on this server, "
                "its most (OMNIUM_SCORER_WATCH_PER_SESSION); close a screen or tab that "
                "watches one, or try again after Retry-After seconds"
            )
        elif 0 < self.per_address <= self.addresses.get(address, 0):
            message = (
                f"your address already has {self.per_address} match watches open on this "
                "server, its most (OMNIUM_SCORER_WATCH_PER_ADDRESS); close one, or try again "
                "after Retry-After seconds"
            )
        else:
            return None
        answer = _problem(429, message)
        answer.headers["Retry-After"] = str(self.retry_after)
        return answer

    def hold(self, session: str | None, address: str) -> None:
        if session is not None:
            self.sessions[session] = self.sessions.get(session, 0) + 1
        self.addresses[address] = self.addresses.get(address, 0) + 1

    def release(self, session: str | None, address: str) -> None:
        for counts, key in ((self.sessions, session), (self.addresses, address)):
            if key is None:
                continue
            left = counts.get(key, 0) - 1
            if left > 0:
                counts[key] = left
            else:
                counts.pop(key, None)


class ScorerConsole:
    """The handlers; one per app, holding the settings, accounts and the scoring client."""

    def __init__(self, app: web.Application, settings: Settings, accounts: Accounts) -> None:
        self.app = app
        self.settings = settings
        self.accounts = accounts
        self.deadline = settings.grpc.deadline_seconds
        self.watchers = _Watchers(settings)

    @property
    def scoring(self) -> scoring_pb2_grpc.ScoringServiceStub:
        return self.app[STUB]

    # -- who ------------------------------------------------------------------------------

    async def _actor(
        self, request: web.Request, *, changes: bool
    ) -> tuple[actor_pb2.Actor | None, web.Response | None]:
        session = await request_session(request, self.accounts, screen=SCREEN)
        if session is None:
            if self.settings.scoring.scorer_sign_in_required:
                return None, _problem(401, "sign in first", sign_in=True)
            return actor_message("scorer", "scorer (not signed in)", screen=SCREEN), None
        if not may_sign_in_on(session.account.role, SCREEN):
            return None, _problem(
                403, f"{session.account.name} is a {session.account.role}; scoring needs a scorer"
            )
        if changes:
            try:
                if not await csrf_ok(request, session):
                    return None, _problem(
                        403, "the page is out of date: reload it and sign in again"
                    )
            except CsrfUnreadable as exc:
                return None, _problem(400, f"{exc}: reload the page and try again")
        # Scoring takes the scorer from this session, not from the actor (docs/callers.md).
        request[_PERSON] = ((SESSION_HEADER, session.token),)
        request[_SESSION] = session.token
        return account_actor("scorer", session.account, session.screen or SCREEN), None

    # -- pages ----------------------------------------------------------------------------

    async def page(self, request: web.Request) -> web.StreamResponse:
        return await self._file("index.html", no_cache=True)

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        return await self._file(name, no_cache=name == "sw.js")

    async def _file(self, name: str, *, no_cache: bool = False) -> web.StreamResponse:
        path = STATIC / name
        kind = _STATIC_TYPES.get(path.suffix)
        if "/" in name or kind is None or not path.is_file():
            return _problem(404, f"there is no page {name}")
        response = web.Response(body=path.read_bytes(), content_type=kind, charset="utf-8")
        # The service worker keeps its own copies; the browser's cache must not hide updates.
        response.headers["Cache-Control"] = "no-cache"
        if name == "sw.js":
            response.headers["Service-Worker-Allowed"] = "/score/"
        return response

    async def worker(self, request: web.Request) -> web.StreamResponse:
        # Served from /score/ so it may look after every page under it.
        return await self._file("sw.js")

    async def redirect(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/score/")

    # -- sign-in --------------------------------------------------------------------------

    async def sign_in(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
            login, password = body["login"], body["password"]
        except _UNREADABLE:
            return _problem(400, 'send {"login": ..., "password": ...} as JSON')
        if not isinstance(login, str) or not isinstance(password, str):
            return _problem(400, "the login and the password are each a JSON string")
        address = client_address(request, self.settings)
        try:
            session = await self.accounts.sign_in(login, password, screen=SCREEN, address=address)
        except SignInRefused as exc:
            status = 429 if isinstance(exc, SignInThrottled) else 401
            status = 503 if isinstance(exc, SignInBusy) else status
            response = _problem(status, str(exc))
            if exc.retry_after:
                response.headers["Retry-After"] = str(math.ceil(exc.retry_after))
            return response
        response = web.json_response(
            {
                "name": session.account.name,
                "login": session.account.login,
                "csrf": session.csrf_token,
            }
        )
        set_session_cookie(response, session, self.settings)
        return response

    async def sign_out(self, request: web.Request) -> web.StreamResponse:
        session = await request_session(request, self.accounts, screen=SCREEN)
        if session is not None:
            try:
                if not await csrf_ok(request, session):
                    return _problem(403, "the page is out of date: reload it")
            except CsrfUnreadable as exc:
                return _problem(400, f"{exc}: reload the page and try again")
            await self.accounts.sign_out(session.token)
        response = web.json_response({"signed_out": True})
        clear_session_cookie(response)
        return response

    async def me(self, request: web.Request) -> web.StreamResponse:
        session = await request_session(request, self.accounts, screen=SCREEN)
        if session is None:
            if self.settings.scoring.scorer_sign_in_required:
                return _problem(401, "sign in first", sign_in=True)
            return web.json_response({"name": "scorer (not signed in)", "csrf": ""})
        return web.json_response(
            {
                "name": session.account.name,
                "login": session.account.login,
                "csrf": session.csrf_token,
                "poll_seconds": self.settings.scoring.scorer_console_poll_seconds,
            }
        )

    # -- scoring --------------------------------------------------------------------------

    async def _call(self, what: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await what()
        except aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise web.HTTPNotFound(
                    text=json.dumps({"error": exc.details()}), content_type="application/json"
                ) from None
            # Scoring would not act or read for this scorer (their session, their matches).
            if exc.code() == grpc.StatusCode.PERMISSION_DENIED:
                raise web.HTTPForbidden(
                    text=json.dumps({"error": exc.details()}), content_type="application/json"
                ) from None
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                raise web.HTTPUnauthorized(
                    text=json.dumps({"error": exc.details(), "sign_in": True}),
                    content_type="application/json",
                ) from None
            log.warning("scoring call failed: %s %s", exc.code(), exc.details())
            raise web.HTTPServiceUnavailable(
                text=json.dumps(
                    {"error": "scoring did not answer; nothing was confirmed. It is sent again."}
                ),
                content_type="application/json",
            ) from None

    async def matches(self, request: web.Request) -> web.StreamResponse:
        actor, problem = await self._actor(request, changes=False)
        if problem is not None:
            return problem
        # Scoring lists only the scorer's own matches when assignment is on.
        listing = await self._call(
            lambda: self.scoring.ListMatches(
                scoring_pb2.ListMatchesRequest(
                    event_code=request.query.get("event", ""), actor=actor
                ),
                timeout=self.deadline,
                metadata=request.get(_PERSON, ()),
            )
        )
        body = _plain(listing)
        body["assigned_only"] = self.settings.scoring.scorer_assignment_required
        return web.json_response(body)

    async def state(self, request: web.Request) -> web.StreamResponse:
        _, problem = await self._actor(request, changes=False)
        if problem is not None:
            return problem
        unit_id = request.match_info["unit_id"]
        if not _UNIT.match(unit_id):
            return _problem(404, f"there is no match {unit_id}")
        try:
            recent = _count(
                request.query.get("recent", "0") or "0",
                "recent is how many of the latest actions",
                200,
            )
            after = _count(
                request.query.get("after", "0") or "0",
                "after is the seq of the standing actions you have",
                2**31 - 1,
            )
        except ValueError as exc:
            return _problem(400, str(exc))
        # The console asks for the standing actions when its copy is older than the match.
        standing = request.query.get("standing") == "1"
        state = await self._call(
            lambda: self.scoring.GetMatchState(
                scoring_pb2.GetMatchStateRequest(
                    unit_id=unit_id,
                    recent=recent,
                    standing=standing,
                    standing_after=after,
                ),
                timeout=self.deadline,
                metadata=request.get(_PERSON, ()),
            )
        )
        return web.json_response(_match(state, standing=standing))

    def _action(self, raw: object, unit_id: str | None = None) -> scoring_pb2.Action:
        if not isinstance(raw, dict):
            raise ValueError("each action is an object")
        fields = struct_pb2.Struct()
        given = raw.get("fields") or {}
        if not isinstance(given, dict):
            raise ValueError("fields is an object of name: value")
        # Plain JSON values (from request.json): Struct.update reads them as ParseDict would.
        fields.update(given)
        out = scoring_pb2.Action(
            client_id=str(raw.get("client_id", "")),
            unit_id=str(raw.get("unit_id") or unit_id or ""),
            kind=str(raw.get("kind", "")),
            side=int(raw.get("side") or 0),
            fields=fields,
            undo_seq=int(raw.get("undo_seq") or 0),
        )
        tapped = raw.get("client_at")
        if isinstance(tapped, (int, float)) and not isinstance(tapped, bool):
            if not (math.isfinite(tapped) and 0 <= tapped <= _LATEST_TAP_MS):
                raise ValueError(
                    "client_at is the time of the tap in milliseconds since 1970, "
                    f"0 to {_LATEST_TAP_MS}, not {tapped!r}"
                )
            out.client_at.FromDatetime(datetime.fromtimestamp(tapped / 1000, UTC))
        return out

    async def act(self, request: web.Request) -> web.StreamResponse:
        actor, problem = await self._actor(request, changes=True)
        if problem is not None:
            return problem
        try:
            action = self._action(await request.json(), request.match_info["unit_id"])
        except (*_UNREADABLE, json_format.ParseError) as exc:
            return _problem(400, f"the action cannot be read: {exc}")
        answer = await self._call(
            lambda: self.scoring.Act(
                scoring_pb2.ActRequest(action=action, actor=actor),
                timeout=self.deadline,
                metadata=request.get(_PERSON, ()),
            )
        )
        text = json.dumps(_answer(answer))
        if answer.HasField("state"):
            text = f'{text[:-1]}, "state": {_answered_match_json(answer.state)}}}'
        return web.Response(text=text, content_type="application/json")

    async def sync(self, request: web.Request) -> web.StreamResponse:
        actor, problem = await self._actor(request, changes=True)
        if problem is not None:
            return problem
        try:
            raw = await request.json()
            actions = [self._action(a) for a in raw["actions"]]
        except (*_UNREADABLE, json_format.ParseError) as exc:
            return _problem(400, f"the actions cannot be read: {exc}")
        answer = await self._call(
            lambda: self.scoring.Sync(
                scoring_pb2.SyncRequest(actions=actions, actor=actor),
                timeout=self.deadline * max(1, len(actions)),
                metadata=request.get(_PERSON, ()),
            )
        )
        body: dict[str, Any] = {"answers": [_answer(a) for a in answer.answers]}
        if answer.HasField("state"):
            body["state"] = _match(answer.state)
        return web.json_response(body)

    async def watch(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: the match state each time it changes. Each holds a scoring
        stream and a connection, so one session, and one address, hold only so many."""
        _, problem = await self._actor(request, changes=False)
        if problem is not None:
            return problem
        unit_id = request.match_info["unit_id"]
        if not _UNIT.match(unit_id):
            return _problem(404, f"there is no match {unit_id}")
        session = request.get(_SESSION)
        address = client_address(request, self.settings)
        refusal = self.watchers.refusal(session, address)
        if refusal is not None:
            return refusal
        self.watchers.hold(session, address)
        try:
            return await self._watch(request, unit_id)
        finally:
            self.watchers.release(session, address)

    async def _watch(self, request: web.Request, unit_id: str) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        stream = self.scoring.WatchMatch(
            scoring_pb2.GetMatchStateRequest(unit_id=unit_id), metadata=request.get(_PERSON, ())
        )

        async def pump() -> None:
            async for state in stream:
                data = json.dumps(_match(state), separators=(",", ":"))
                await response.write(f"id: {state.seq}\ndata: {data}\n\n".encode())

        task = asyncio.create_task(pump())
        try:
            # aiohttp does not cancel a handler when its client goes: look every second.
            while not task.done():
                await asyncio.wait([task], timeout=1.0)
                if request.transport is None or request.transport.is_closing():
                    break
        finally:
            task.cancel()
            stream.cancel()
            with contextlib.suppress(asyncio.CancelledError, aio.AioRpcError, ConnectionError):
                await task
        return response


def add_scorer_routes(
    app: web.Application,
    settings: Settings,
    accounts: Accounts,
    *,
    channel: aio.Channel | None = None,
    redis: aioredis.Redis | None = None,
) -> ScorerConsole:
    """Mount /score/ (the console), /score/api/... and /v1/providers/{provider}/messages.

    The scoring channel is opened on the app's start-up (to settings.scoring.address) unless
    one is given, and closed at its clean-up. `redis` holds the provider door's rate limits,
    shared by every copy (without it, each worker limits on its own).
    """
    console = ScorerConsole(app, settings, accounts)
    door = ProviderDoor(settings, redis, lambda: app[STUB], lambda: accounts.pool)

    async def open_scoring(app: web.Application) -> None:
        own = channel or open_channel(settings.scoring.address, settings)
        app[CHANNEL] = own
        app[STUB] = scoring_pb2_grpc.ScoringServiceStub(own)
        if settings.server.redis_url:
            # Failed sign-ins are counted in Redis, one round trip each, where the gateway has
            # it; in PostgreSQL otherwise and while it fails. A client of its own, short
            # timeouts: a Redis that hangs must not hold a sign-in long.
            timeout = settings.gateway.redis_timeout_seconds
            redis = aioredis.Redis.from_url(
                settings.server.redis_url,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                client_name="omnium-sign-in",
                driver_info=None,
            )
            app[THROTTLE_REDIS] = redis
            accounts.throttle_in_redis(redis, settings.gateway.redis_prefix)

    async def close_scoring(app: web.Application) -> None:
        if channel is None and CHANNEL in app:
            await app[CHANNEL].close()
        if THROTTLE_REDIS in app:
            await app[THROTTLE_REDIS].aclose(close_connection_pool=True)

    app.on_startup.append(open_scoring)
    app.on_cleanup.append(close_scoring)
    add_security_headers(app, settings, prefix="/score")
    router = app.router
    router.add_get("/score", console.redirect)
    router.add_get("/score/", console.page)
    router.add_get("/score/sw.js", console.worker)
    router.add_get("/score/static/{name}", console.static)
    router.add_post("/score/api/sign-in", console.sign_in)
    router.add_post("/score/api/sign-out", console.sign_out)
    router.add_get("/score/api/me", console.me)
    router.add_get("/score/api/matches", console.matches)
    router.add_get("/score/api/matches/{unit_id}", console.state)
    router.add_get("/score/api/matches/{unit_id}/watch", console.watch)
    router.add_post("/score/api/matches/{unit_id}/actions", console.act)
    router.add_post("/score/api/sync", console.sync)
    router.add_post("/v1/providers/{provider}/messages", door.message)
    return console
