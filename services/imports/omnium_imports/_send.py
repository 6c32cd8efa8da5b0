"""What a run sends to the command service: its batches, each tried again on its own, and the
cancel of a unit Scout stopped listing, when the integration says so."""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium.common.v1 import actor_pb2
from omnium_grpc import command_message, source_actor
from omnium_imports._metrics import BATCH_RETRIES, BATCHES
from omnium_imports._runs import Integration
from omnium_settings import Settings

log = logging.getLogger(__name__)

# Answers of the command service that pass by themselves (a restart, a failover, a full
# queue): the batch is sent again until batch_retry_seconds are over.
_PASSING_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)


async def batch(
    command: command_pb2_grpc.CommandServiceStub,
    settings: Settings,
    integration: Integration,
    run_id: str,
    batch_no: int,
    rows: list[command_pb2.BatchRow],
    *,
    dry_run: bool = False,
) -> tuple[command_pb2.BatchAnswer | None, str]:
    """One batch, tried again on its own (growing waits) while the answer is try again."""
    message = command_pb2.ImportBatch(
        command_id=f"{run_id}:{batch_no}",
        integration_code=integration.code,
        run_id=run_id,
        batch_no=batch_no,
        event_code=integration.event_code,
        rows=rows,
        create_units=integration.creates_units,
        dry_run=dry_run,
        actor=source_actor("integration", integration.code, "imports"),
    )
    # Tried again for as long as a failover takes: a batch command id is its run and number,
    # so a batch saved before a lost answer answers duplicate and nothing is written twice.
    started = time.monotonic()
    deadline = started + settings.imports.batch_retry_seconds
    wait = settings.imports.batch_retry_first_seconds
    problem = ""
    tries = 0
    while True:
        tries += 1
        try:
            answer: command_pb2.BatchAnswer = await command.ApplyImportBatch(
                message, timeout=settings.grpc.deadline_seconds
            )
        except grpc.aio.AioRpcError as exc:
            problem = f"the command service answered {exc.code().name}: {exc.details()}"
            if exc.code() not in _PASSING_CODES:
                break
        else:
            if answer.outcome in (command_pb2.OUTCOME_ACCEPTED, command_pb2.OUTCOME_DUPLICATE):
                BATCHES.labels("saved").inc()
                return answer, ""
            if answer.outcome == command_pb2.OUTCOME_REFUSED:
                BATCHES.labels("not_saved").inc()
                return None, f"refused: {answer.reason}"
            problem = answer.reason or "try again"
        if time.monotonic() + wait > deadline:
            break
        log.info("run %s batch %s: %s; trying again in %.1f s", run_id, batch_no, problem, wait)
        BATCH_RETRIES.inc()
        await asyncio.sleep(wait)
        wait = min(wait * 2, settings.imports.batch_retry_max_seconds)
    BATCHES.labels("not_saved").inc()
    return None, f"{problem} ({tries} tries in {time.monotonic() - started:.0f} s)"


def withdrawal(
    command_id: str,
    integration: Integration,
    subject_id: str,
    medal_ref: str | None,
    actor: actor_pb2.Actor,
) -> command_pb2.Command:
    """The command that takes a missing key's record away: a unit's cancel, or a medal row's
    withdrawal (a medal taken back after a protest), by the same road a person's edit takes."""
    if integration.target == "medal_row":
        return command_message(
            command_id,
            "medals.withdraw_row",
            {},
            actor,
            subject=command_pb2.Subject(
                kind="medal_row", code=medal_ref or "", event_code=integration.event_code
            ),
        )
    return command_message(
        command_id, "results.set_status", {"status": "CANCELLED"}, actor, unit_id=subject_id
    )


async def withdraw(
    command: command_pb2_grpc.CommandServiceStub,
    settings: Settings,
    integration: Integration,
    key: str,
    subject_id: str,
    medal_ref: str | None = None,
) -> str:
    """auto_cancel_missing: the same command a person would send, never a direct write, tried
    again like a batch while the answer is "try again". Answers what went wrong, or ""."""
    message = withdrawal(
        f"{integration.code}:missing:{key}",
        integration,
        subject_id,
        medal_ref,
        source_actor("integration", integration.code, "imports:missing"),
    )
    _, problem = await submit(command, settings, message)
    log.info("missing %s: %s answered %s", key, message.code, problem or "accepted")
    return problem


async def submit(
    command: command_pb2_grpc.CommandServiceStub,
    settings: Settings,
    message: command_pb2.Command,
) -> tuple[command_pb2.Answer | None, str]:
    """One command, tried again (growing waits, batch_retry_seconds in all) while the command
    service is away or says try again; its command id makes a repeat answer duplicate."""
    started = time.monotonic()
    deadline = started + settings.imports.batch_retry_seconds
    wait = settings.imports.batch_retry_first_seconds
    tries = 0
    while True:
        tries += 1
        try:
            answer: command_pb2.Answer = await command.Submit(
                message, timeout=settings.grpc.deadline_seconds
            )
        except grpc.aio.AioRpcError as exc:
            problem = f"the command service answered {exc.code().name}: {exc.details()}"
            if exc.code() not in _PASSING_CODES:
                return None, problem
        else:
            if answer.outcome in (command_pb2.OUTCOME_ACCEPTED, command_pb2.OUTCOME_DUPLICATE):
                return answer, ""
            if answer.outcome == command_pb2.OUTCOME_REFUSED:
                return answer, f"refused: {answer.reason}"
            problem = answer.reason or "try again"
        if time.monotonic() + wait > deadline:
            return None, f"{problem} ({tries} tries in {time.monotonic() - started:.0f} s)"
        await asyncio.sleep(wait)
        wait = min(wait * 2, settings.imports.batch_retry_max_seconds)
