"""The CommandService gRPC servicer: turns calls into road requests and answers."""

from __future__ import annotations

import logging

import asyncpg
import grpc
from google.protobuf import json_format, struct_pb2
from grpc import aio

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium_command._road import Road
from omnium_command._sql import QUERIES
from omnium_grpc import (
    PEOPLE,
    actor_message,
    current_caller,
    field_changes,
    held_results_hidden,
    is_id,
    timestamp,
)
from omnium_settings import Settings

log = logging.getLogger(__name__)


class CommandService(command_pb2_grpc.CommandServiceServicer):
    def __init__(self, settings: Settings, road: Road, reader: asyncpg.Pool) -> None:
        self.settings = settings
        self.road = road
        self.reader = reader

    async def Submit(
        self, request: command_pb2.Command, context: aio.ServicerContext
    ) -> command_pb2.Answer:
        caller = current_caller()
        if caller is not None:
            refusal = caller.code_refusal(request.code)
            if refusal is not None:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal)
            # A caller that may not name this sender is recorded as itself.
            request.actor.CopyFrom(caller.recorded(request.actor))
        if request.actor.kind in PEOPLE and not request.actor.screen:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"actor.screen is empty: a person's command says which screen or app it came "
                f"from, e.g. 'admin:unit-edit'. Nothing from {request.command_id!r} "
                "was written; send it again with the screen.",
            )
        return await self.road.submit(request)

    async def ApplyImportBatch(
        self, request: command_pb2.ImportBatch, context: aio.ServicerContext
    ) -> command_pb2.BatchAnswer:
        caller = current_caller()
        if caller is not None:
            request.actor.CopyFrom(caller.recorded(request.actor))
        return await self.road.apply_batch(request)

    async def GetTimeline(
        self, request: command_pb2.GetTimelineRequest, context: aio.ServicerContext
    ) -> command_pb2.GetTimelineResponse:
        limit = request.limit or 50
        if not 1 <= limit <= 500:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "limit must be 1 to 500")
        subject = request.subject
        before = request.before_id or None
        # Another team's reader or feed never sees a result the checker holds:
        # the items that carry one are left out until a person approves it.
        hidden = held_results_hidden()
        held = [d.upper() for d in self.settings.delivery.checker_disciplines]
        async with self.reader.acquire() as conn:
            if subject.kind == "event":
                code = subject.event_code or subject.code
                rows = await conn.fetch(
                    *QUERIES.bind(
                        "timeline_for_event",
                        event_code=code,
                        before=before,
                        limit=limit,
                        hidden=hidden,
                        held=held,
                    )
                )
            else:
                subject_id = subject.id
                if not subject_id and subject.kind == "unit" and subject.code:
                    subject_id = await conn.fetchval(
                        QUERIES["unit_id_by_code"], subject.event_code, subject.code
                    )
                    if subject_id is None:
                        await context.abort(
                            grpc.StatusCode.NOT_FOUND,
                            f"there is no unit {subject.code} in {subject.event_code}",
                        )
                if not is_id(subject_id or ""):
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "subject.id must be an id (a UUID), or give a unit's code and event_code",
                    )
                rows = await conn.fetch(
                    *QUERIES.bind(
                        "timeline_for_subject",
                        kind=subject.kind,
                        subject_id=subject_id,
                        before=before,
                        limit=limit,
                        hidden=hidden,
                        held=held,
                    )
                )
        return command_pb2.GetTimelineResponse(items=[_item(row) for row in rows])


def _item(row: asyncpg.Record) -> command_pb2.TimelineItem:
    payload = struct_pb2.Struct()
    json_format.ParseDict(row["payload"], payload)
    return command_pb2.TimelineItem(
        id=row["id"],
        command_id=row["command_id"],
        code=row["code"],
        actor=actor_message(
            row["actor_kind"],
            row["actor_name"],
            source_code=row["source_code"] or "",
            screen=row["screen"] or "",
        ),
        payload=payload,
        diff=field_changes(row["diff"]),
        occurred_at=timestamp(row["occurred_at"]),
        subject_kind=row["subject_kind"],
        subject_id=row["subject_id"] or "",
    )
