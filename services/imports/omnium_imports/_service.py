"""ImportsService over gRPC: integrations with their two-line health, runs, Waiting for you."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

import asyncpg
import grpc
from grpc import aio

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium.common.v1 import actor_pb2
from omnium.imports.v1 import imports_pb2, imports_pb2_grpc
from omnium_grpc import (
    NotNow,
    field_changes,
    held_results_hidden,
    is_id,
    row_outcome_word,
    timestamp,
)
from omnium_imports import _queue, _runs, _send
from omnium_imports._missing import answered
from omnium_imports._scout import ScoutError
from omnium_imports._setup import add_lookups
from omnium_imports._sql import QUERIES
from omnium_imports.mapping import MappingSpecError
from omnium_imports.run import Pipeline
from omnium_settings import Settings

log = logging.getLogger(__name__)
SERVICE_NAME = imports_pb2.DESCRIPTOR.services_by_name["ImportsService"].full_name
_STATES = ("on", "paused", "off")
_REFUSED = ("refused", "not_placed", "problem")
# A run's page lists at most this many rows per section when the caller sets no limit.
_ROWS_PER_SECTION = 5000
# A side's results: what the checker holds until a person approves them.
_RESULT_FIELD = re.compile(r"^sides\[\d+\]\.(score|result|rank|medal)$")


def _shown(entries: list[Any] | None, held: bool) -> list[Any]:
    """A row's logged changes as the caller may see them: without results the checker holds."""
    if not held:
        return entries or []
    return [e for e in entries or () if not _RESULT_FIELD.match(str(e.get("field", "")))]


class RunRow(TypedDict):
    """A run as `runs` and `run` read it (integration_run's columns, and these)."""

    run_id: str
    integration_code: str
    scout_run_id: str
    status: str
    reason: str | None
    build: str | None
    row_count: int | None
    batch_total: int | None
    batch_done: int | None
    outcomes: dict[str, int] | None
    received_at: datetime
    finished_at: datetime | None
    worked_ms: int | None


class CheckFailed(TypedDict):
    """The open run_failed alert: a check that could not read Scout."""

    message: str
    raised_at: datetime


class OpenAlert(TypedDict):
    """An open alert of the integration, as the card reads it."""

    kind: str
    message: str
    raised_at: datetime
    run_id: str | None


class ScoutVerdict(TypedDict):
    """Scout's newest run, as its own checks judged it."""

    scout_status: str
    reason: str | None
    at: datetime


def run_message(row: RunRow) -> imports_pb2.Run:
    finished, received = row["finished_at"], row["received_at"]
    elapsed = int((finished - received) / timedelta(milliseconds=1)) if finished else 0
    # The time it worked, not the time it waited for a person's Start or for its resume.
    worked = row["worked_ms"]
    duration = elapsed if worked is None or not finished else max(0, min(worked, elapsed))
    return imports_pb2.Run(
        id=row["run_id"],
        integration_code=row["integration_code"],
        scout_run_id=row["scout_run_id"],
        status=row["status"],
        reason=row["reason"] or "",
        build=row["build"] or "",
        row_count=row["row_count"] or 0,
        batch_total=row["batch_total"] or 0,
        batch_done=row["batch_done"] or 0,
        outcomes={k: int(v) for k, v in (row["outcomes"] or {}).items()},
        received_at=timestamp(received),
        finished_at=timestamp(finished),
        duration_ms=duration,
        waited_ms=elapsed - duration,
    )


NOT_DUE = "Not due yet"


# Open alerts the omnium line shows when its newest full run looks fine, most urgent first:
# the word it takes then.
_ALERT_WORDS = (
    ("guard", "Stopped by a check"),
    ("batch_failed", "Failing"),
    ("run_failed", "Failing"),
    ("quiet", "Very late"),
)


def omnium_health(
    state: str,
    check_seconds: int,
    last: RunRow | None,
    now: datetime,
    check_failed: CheckFailed | None = None,
    added_at: datetime | None = None,
    *,
    alerts: Sequence[OpenAlert] = (),
    waiting: int = 0,
    late_intervals: int = 3,
) -> imports_pb2.Health:
    """Our side of the card. Nothing is green unless our newest full run is good and on time,
    no alert about us is open and nothing waits for a person.

    `last` is the newest full run: page runs come many times an hour and say nothing of the
    whole site. `check_failed` is the open run_failed alert: a check that could not read Scout
    at all records no run, but the card must still say Failing until a run is done again.
    `added_at`: an integration with no run yet is late only once its first check interval
    since it was added is over; before that its first run is not due yet.
    """
    if state == "off":
        return imports_pb2.Health(word="Off", ok=False, detail="the integration is off")
    if state == "paused":
        return imports_pb2.Health(word="Paused", ok=False, detail="paused by an operator")
    if check_failed is not None and (
        last is None or check_failed["raised_at"] >= last["received_at"]
    ):
        return imports_pb2.Health(
            word="Failing",
            ok=False,
            detail=check_failed["message"],
            at=timestamp(check_failed["raised_at"]),
        )
    if last is None:
        if added_at is not None and (now - added_at).total_seconds() <= check_seconds:
            return imports_pb2.Health(
                word=NOT_DUE,
                ok=False,
                detail=f"no run yet; the first is due within {check_seconds} s of being added",
            )
        return imports_pb2.Health(word="Late", ok=False, detail="no run yet")
    health = _last_run_health(last, check_seconds, now, late_intervals)
    return _still_open(health, alerts, waiting) if health.ok else health


def _still_open(
    health: imports_pb2.Health, alerts: Sequence[OpenAlert], waiting: int
) -> imports_pb2.Health:
    """A good last run is not green while an alert about us is open or an item waits."""
    by_kind = {a["kind"]: a for a in alerts}
    for kind, word in _ALERT_WORDS:
        if kind in by_kind:
            alert = by_kind[kind]
            return imports_pb2.Health(
                word=word, ok=False, detail=alert["message"], at=timestamp(alert["raised_at"])
            )
    if waiting:
        return imports_pb2.Health(
            word="Waiting for you",
            ok=False,
            detail=f"{waiting} waiting for you: see Waiting for you",
            at=health.at,
        )
    return health


def _last_run_health(
    last: RunRow, check_seconds: int, now: datetime, late_intervals: int
) -> imports_pb2.Health:
    """The card from our last run: how it ended, and how long ago it came."""
    at = timestamp(last["received_at"])
    if last["status"] == "paused_by_guard":
        return imports_pb2.Health(
            word="Stopped by a check", ok=False, detail=last["reason"] or "", at=at
        )
    if last["status"] in ("failed", "partly_done"):
        return imports_pb2.Health(word="Failing", ok=False, detail=last["reason"] or "", at=at)
    if last["status"] in ("received", "applying"):
        return imports_pb2.Health(word="Running", ok=True, detail="", at=at)
    age = (now - last["received_at"]).total_seconds()
    if age <= check_seconds:
        return imports_pb2.Health(word="On time", ok=True, detail="", at=at)
    if age <= late_intervals * check_seconds:
        return imports_pb2.Health(
            word="Late", ok=False, detail=f"last run {int(age // 60)} min ago", at=at
        )
    return imports_pb2.Health(
        word="Very late", ok=False, detail=f"last run {int(age // 60)} min ago", at=at
    )


def scout_health(
    verdict: ScoutVerdict | None, alerts: Sequence[OpenAlert] = ()
) -> imports_pb2.Health:
    """Scout's side of the card: its newest run passed its own checks, no alert says its runs
    keep failing them (it clears after passing full runs, not one page run), and Scout
    answers: a check that could not read Scout at all (its 500s, say) is not "Passed"."""
    unread = next((a for a in alerts if a["kind"] == "run_failed" and not a["run_id"]), None)
    if unread is not None and (verdict is None or unread["raised_at"] >= verdict["at"]):
        return imports_pb2.Health(
            word="Not answering",
            ok=False,
            detail=unread["message"],
            at=timestamp(unread["raised_at"]),
        )
    failing = next((a for a in alerts if a["kind"] == "scout_failed"), None)
    if failing is not None:
        return imports_pb2.Health(
            word="Failed its checks",
            ok=False,
            detail=failing["message"],
            at=timestamp(failing["raised_at"]),
        )
    if verdict is None:
        return imports_pb2.Health(word="No run yet", ok=False)
    if verdict["scout_status"] == "failed":
        return imports_pb2.Health(
            word="Failed its checks",
            ok=False,
            detail=verdict["reason"] or "",
            at=timestamp(verdict["at"]),
        )
    return imports_pb2.Health(word="Passed", ok=True, at=timestamp(verdict["at"]))


class ImportsService(imports_pb2_grpc.ImportsServiceServicer):
    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        pipeline: Pipeline,
        command: command_pb2_grpc.CommandServiceStub,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.pipeline = pipeline
        self.command = command

    async def ListIntegrations(
        self, request: imports_pb2.ListIntegrationsRequest, context: aio.ServicerContext
    ) -> imports_pb2.ListIntegrationsResponse:
        now = datetime.now(UTC)
        out = []
        async with self.pool.acquire() as conn:
            for row in await conn.fetch(QUERIES["integrations"]):
                last = await conn.fetchrow(QUERIES["newest_run"], row["id"])
                last_full = await conn.fetchrow(QUERIES["newest_full_run"], row["id"])
                paused = await conn.fetchrow(QUERIES["newest_paused_run"], row["id"])
                verdict = await conn.fetchrow(QUERIES["newest_scout_verdict"], row["id"])
                alerts = await conn.fetch(QUERIES["open_alerts"], row["id"])
                out.append(
                    imports_pb2.Integration(
                        id=row["id"],
                        code=row["code"],
                        name=row["name"],
                        state=row["state"],
                        target=row["target"],
                        scout=scout_health(verdict, alerts),
                        omnium=omnium_health(
                            row["state"],
                            row["check_seconds"],
                            last_full,
                            now,
                            _check_failed(alerts),
                            added_at=row["created_at"],
                            alerts=alerts,
                            waiting=row["waiting"],
                            late_intervals=row["quiet_intervals"]
                            or self.settings.imports.alert_quiet_intervals,
                        ),
                        open_alerts=[
                            imports_pb2.Alert(
                                id=a["id"],
                                kind=a["kind"],
                                message=a["message"],
                                raised_at=timestamp(a["raised_at"]),
                            )
                            for a in alerts
                        ],
                        last_run=run_message(last) if last else None,
                        last_full_run=run_message(last_full) if last_full else None,
                        paused_run=run_message(paused) if paused else None,
                        waiting=row["waiting"],
                    )
                )
        return imports_pb2.ListIntegrationsResponse(integrations=out)

    async def ListRuns(
        self, request: imports_pb2.ListRunsRequest, context: aio.ServicerContext
    ) -> imports_pb2.ListRunsResponse:
        limit = request.limit or 20
        if not 1 <= limit <= 200:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "limit must be 1 to 200")
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(QUERIES["runs"], request.integration_code, limit)
        return imports_pb2.ListRunsResponse(runs=[run_message(r) for r in rows])

    async def GetRun(
        self, request: imports_pb2.GetRunRequest, context: aio.ServicerContext
    ) -> imports_pb2.RunDetail:
        await self._uuid(request.run_id, "run_id", context)
        if request.rows_per_section < 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "rows_per_section must be 0 (the most) or more"
            )
        async with self.pool.acquire() as conn:
            run = await conn.fetchrow(QUERIES["run"], request.run_id)
            if run is None:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"there is no run {request.run_id}")
            limit = request.rows_per_section or _ROWS_PER_SECTION
            # Another team's reader sees a row without the results the checker holds.
            held = [d.upper() for d in self.settings.delivery.checker_disciplines]
            rows = await conn.fetch(
                *QUERIES.bind(
                    "run_rows",
                    run_id=request.run_id,
                    per_section=limit,
                    hide_held=held_results_hidden(),
                    held_disciplines=held,
                )
            )
            totals = await conn.fetchrow(QUERIES["run_row_totals"], request.run_id)
        detail = imports_pb2.RunDetail(
            run=run_message(run),
            changed_total=totals["changed"],
            kept_by_hand_total=totals["kept_by_hand"],
            held_total=totals["held"],
            refused_total=totals["refused"],
        )
        for row in rows:
            entry = imports_pb2.RowEntry(
                position=row["position"],
                key=row["subject_key"],
                outcome=row["outcome"],
                reason=row["reason"] or "",
                changes=field_changes(_shown(row["diff"], row["held"])),
                kept_by_hand=field_changes(_shown(row["kept_by_hand"], row["held"])),
            )
            # The query gives each section at most `limit` rows; a row may be in two.
            if row["outcome"] == "accepted" and len(detail.changed) < limit:
                detail.changed.append(entry)
            if row["kept_by_hand"] and len(detail.kept_by_hand) < limit:
                detail.kept_by_hand.append(entry)
            if row["outcome"] == "held" and len(detail.held) < limit:
                detail.held.append(entry)
            if row["outcome"] in _REFUSED and len(detail.refused) < limit:
                detail.refused.append(entry)
        return detail

    async def ListWaiting(
        self, request: imports_pb2.ListWaitingRequest, context: aio.ServicerContext
    ) -> imports_pb2.ListWaitingResponse:
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(QUERIES["waiting"], request.integration_code)
        return imports_pb2.ListWaitingResponse(
            items=[
                imports_pb2.WaitingItem(
                    id=r["id"],
                    integration_code=r["integration_code"],
                    kind=r["kind"],
                    target=r["target"],
                    subject_key=r["subject_key"],
                    question=r["question"],
                    run_id=r["run_id"] or "",
                    created_at=timestamp(r["created_at"]),
                )
                for r in rows
            ]
        )

    async def StartRun(
        self, request: imports_pb2.StartRunRequest, context: aio.ServicerContext
    ) -> imports_pb2.ActionAnswer:
        await self._uuid(request.run_id, "run_id", context)
        person = await _acting_person(request.actor, "StartRun", "starting the run", context)
        async with self.pool.acquire() as conn:
            run = await conn.fetchrow(QUERIES["run"], request.run_id)
            if run is None:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"there is no run {request.run_id}")
            if run["status"] != "paused_by_guard":
                return imports_pb2.ActionAnswer(
                    done=False, message=f"run {request.run_id} is {run['status']}, not paused"
                )
            async with conn.transaction():
                job = await _queue.enqueue_start(conn, request.run_id)
                # Running from the moment it is started, not "Paused by a check" (with Start)
                # until a worker takes it up: the person sees their Start was taken.
                await conn.execute(QUERIES["mark_started"], request.run_id, person.name)
        log.info("run %s started past its guards by %s", request.run_id, _said(person))
        return imports_pb2.ActionAnswer(
            done=True, message=f"run started: it writes now, past its check (job {job})"
        )

    async def AddLookup(
        self, request: imports_pb2.AddLookupRequest, context: aio.ServicerContext
    ) -> imports_pb2.ActionAnswer:
        if request.kind not in ("competitor", "unit"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "kind must be competitor or unit")
        await self._uuid(request.our_id, "our_id", context)
        if not request.external_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "external_id is empty")
        async with self.pool.acquire() as conn:
            integration_id = await _integration_id(conn, request.integration_code, context)
            await add_lookups(
                conn, integration_id, request.kind, {request.external_id: request.our_id}
            )
        return imports_pb2.ActionAnswer(
            done=True,
            message=f"{request.external_id} is now {request.our_id}; held rows naming it go "
            "through on the next run",
        )

    async def ResolveMissing(
        self, request: imports_pb2.ResolveMissingRequest, context: aio.ServicerContext
    ) -> imports_pb2.ActionAnswer:
        what = "withdrawing the record" if request.cancel else "dismissing the missing key"
        person = await _acting_person(request.actor, "ResolveMissing", what, context)
        async with self.pool.acquire() as conn:
            item = await conn.fetchrow(QUERIES["review_item"], request.item_id)
            integration = await _runs.integration(conn, item["integration_id"]) if item else None
        if item is None or item["kind"] != "missing" or item["status"] != "open":
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"there is no open missing-key item {request.item_id}"
            )
        if request.cancel:
            if not item["subject_id"] or integration is None:
                return imports_pb2.ActionAnswer(
                    done=False,
                    message="the key names no record of ours, so there is nothing to cancel: "
                    "dismiss it instead",
                )
            # A unit is cancelled; a medal row (a medal withdrawn after a protest) is taken out
            # of the table by its own command.
            answer = await self.command.Submit(
                _send.withdrawal(
                    f"missing:{item['id']}:cancel",
                    integration,
                    item["subject_id"],
                    item["medal_ref"],
                    person,
                ),
                timeout=self.settings.grpc.deadline_seconds,
            )
            if answer.outcome not in (command_pb2.OUTCOME_ACCEPTED, command_pb2.OUTCOME_DUPLICATE):
                return imports_pb2.ActionAnswer(done=False, message=answer.reason)
        async with self.pool.acquire() as conn, conn.transaction():
            # The answer stays answered: the key is not counted or asked about again until a
            # run lists it and it goes missing once more.
            await answered(
                conn,
                item["integration_id"],
                item["subject_key"],
                "done" if request.cancel else "dismissed",
                person.name,
            )
        log.info("missing-key item %s %s by %s", request.item_id, what, _said(person))
        withdrawn = "removed" if integration and integration.target == "medal_row" else "cancelled"
        return imports_pb2.ActionAnswer(
            done=True, message=withdrawn if request.cancel else "dismissed"
        )

    async def SetIntegrationState(
        self, request: imports_pb2.SetIntegrationStateRequest, context: aio.ServicerContext
    ) -> imports_pb2.ActionAnswer:
        if request.state not in _STATES:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"state must be one of {', '.join(_STATES)}"
            )
        person = await _acting_person(
            request.actor,
            "SetIntegrationState",
            f"setting the integration {request.state}",
            context,
        )
        async with self.pool.acquire() as conn:
            found = await conn.fetchval(
                QUERIES["set_state"], request.integration_code, request.state
            )
        if found is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"there is no integration {request.integration_code}"
            )
        log.info(
            "integration %s set %s by %s", request.integration_code, request.state, _said(person)
        )
        return imports_pb2.ActionAnswer(done=True, message=f"now {request.state}")

    async def RunNow(
        self, request: imports_pb2.RunNowRequest, context: aio.ServicerContext
    ) -> imports_pb2.ActionAnswer:
        async with self.pool.acquire() as conn:
            integration_id = await _integration_id(conn, request.integration_code, context)
            job = await _queue.enqueue_check(conn, integration_id, "operator")
        if job is None:
            return imports_pb2.ActionAnswer(done=False, message="a check is already queued")
        return imports_pb2.ActionAnswer(done=True, message=f"queued as job {job}")

    async def DryRun(
        self, request: imports_pb2.DryRunRequest, context: aio.ServicerContext
    ) -> imports_pb2.DryRunAnswer:
        async with self.pool.acquire() as conn:
            integration_id = await _integration_id(conn, request.integration_code, context)
        try:
            rows, outcomes = await self.pipeline.dry_run(integration_id, request.scout_run_id)
        except (ScoutError, MappingSpecError) as exc:
            # Scout unreadable or its run unusable, a mapping that does not apply: their
            # messages are written for the operator. Anything else is answered by the guard.
            raise NotNow(f"the dry run could not be made: {exc}") from exc
        return imports_pb2.DryRunAnswer(
            rows=[
                imports_pb2.RowEntry(
                    position=r.position,
                    key=r.key,
                    outcome=row_outcome_word(r.outcome),
                    reason=r.reason,
                    changes=r.changes,
                )
                for r in rows
            ],
            outcomes=outcomes,
        )

    async def _uuid(self, value: str, name: str, context: aio.ServicerContext) -> None:
        if not is_id(value):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{name} is not an id (a UUID)")


async def _acting_person(
    actor: actor_pb2.Actor, method: str, what: str, context: aio.ServicerContext
) -> actor_pb2.Actor:
    """The person an operator's action is recorded for, or the call ends INVALID_ARGUMENT:
    these actions are a person's, never an anonymous "operator"."""
    person = actor_pb2.Actor()
    person.CopyFrom(actor)
    if person.kind == actor_pb2.Actor.KIND_UNSPECIFIED:
        person.kind = actor_pb2.Actor.KIND_PERSON
    problem = None
    if person.kind != actor_pb2.Actor.KIND_PERSON:
        problem = f"actor.kind is {actor_pb2.Actor.Kind.Name(person.kind)}, not a person"
    elif not person.name:
        problem = "actor.name is empty"
    elif not person.screen:
        problem = "actor.screen is empty"
    if problem is not None:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{method} is a person's action and records who did it and from which screen, "
            f"but {problem}. Send the signed-in person in actor (name, "
            f"source_code 'account:<id>', screen); `by` alone is no longer taken. Nothing was "
            f"done ({what}).",
        )
    return person


def _said(person: actor_pb2.Actor) -> str:
    return f"{person.name} ({person.source_code or 'no account'}, {person.screen})"


def _check_failed(alerts: list[asyncpg.Record]) -> asyncpg.Record | None:
    return next((a for a in alerts if a["kind"] == "run_failed"), None)


async def _integration_id(conn: asyncpg.Connection, code: str, context: aio.ServicerContext) -> str:
    """Our id of the integration with that code, or the call ends NOT_FOUND, plainly."""
    found: str | None = await conn.fetchval(QUERIES["integration_id_by_code"], code)
    if found is None:
        await context.abort(grpc.StatusCode.NOT_FOUND, f"there is no integration {code!r}")
    assert found is not None
    return found
