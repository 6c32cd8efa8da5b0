"""Start a real command service on an ephemeral port and talk to it over gRPC."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from grpc import aio

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium.common.v1 import actor_pb2
from omnium_command import CommandApp
from omnium_grpc import actor_message, command_message, open_channel
from omnium_outbound import LOOPBACK
from omnium_settings import Settings

# The tests' own processes and clients: one caller with the role of omnium's back-end services,
# and a second token of it (a rotation under way).
TOKEN = "test-token-1"
NEXT_TOKEN = "test-token-2"
# One caller of each other role, for the tests of what each may do.
ADMIN_TOKEN = "test-token-admin-console"
GATEWAY_TOKEN = "test-token-gateway"
FEED_TOKEN = "test-token-results-feed"
STATS_TOKEN = "test-token-stats-team"
CALLERS = (
    f"omnium-tests:service:{TOKEN}",
    f"omnium-tests:service:{NEXT_TOKEN}",
    f"admin-console:operator-console:{ADMIN_TOKEN}",
    f"gateway:scorer-console:{GATEWAY_TOKEN}",
    f"results-feed:provider:{FEED_TOKEN}",
    f"stats-team:reader:{STATS_TOKEN}",
)
#: OMNIUM_GRPC_CALLERS for a test's subprocesses.
CALLERS_ENV = ",".join(CALLERS)


@dataclass(slots=True)
class CommandClient:
    app: CommandApp
    port: int
    channel: aio.Channel
    stub: command_pb2_grpc.CommandServiceStub
    settings: Settings

    async def submit(self, **kwargs: Any) -> command_pb2.Answer:
        answer: command_pb2.Answer = await self.stub.Submit(command(**kwargs), timeout=30)
        return answer

    async def batch(self, batch: command_pb2.ImportBatch) -> command_pb2.BatchAnswer:
        answer: command_pb2.BatchAnswer = await self.stub.ApplyImportBatch(batch, timeout=60)
        return answer


def settings_for(database_url: str, **overrides: Any) -> Settings:
    overrides.setdefault("grpc_callers", CALLERS)
    overrides.setdefault("grpc_token", TOKEN)
    overrides.setdefault("environment", "development")
    # The tests' receivers and Scout simulator listen on loopback.
    overrides.setdefault("outbound_allowed_networks", LOOPBACK)
    return Settings.from_env({}, database_url=database_url, **overrides)


@asynccontextmanager
async def running_command(database_url: str, **overrides: Any) -> AsyncIterator[CommandClient]:
    settings = settings_for(database_url, **overrides)
    app = CommandApp(settings)
    port = await app.start(0)
    channel = open_channel(f"127.0.0.1:{port}", settings)
    try:
        yield CommandClient(
            app, port, channel, command_pb2_grpc.CommandServiceStub(channel), settings
        )
    finally:
        await channel.close()
        await app.stop(grace=1)


def person(name: str = "Aiko Tanaka", screen: str = "admin:unit-edit") -> actor_pb2.Actor:
    return actor_message("person", name, source_code="account:7", screen=screen)


def command(
    command_id: str,
    code: str,
    payload: dict[str, Any],
    *,
    unit_id: str = "",
    kind: str = "unit",
    code_ref: str = "",
    event_code: str = "",
    actor: actor_pb2.Actor | None = None,
) -> command_pb2.Command:
    subject = command_pb2.Subject(kind=kind, id=unit_id, code=code_ref, event_code=event_code)
    return command_message(command_id, code, payload, actor or person(), subject=subject)


def unit_row(
    position: int,
    unit_id: str,
    *,
    key: str | None = None,
    hash_: bytes | None = None,
    sides: list[dict[str, Any]] | None = None,
    **fields: Any,
) -> command_pb2.BatchRow:
    values = command_pb2.UnitValues(**fields)
    for side in sides or []:
        values.sides.append(command_pb2.SideValues(**side))
    return command_pb2.BatchRow(
        position=position,
        key=key or f"key-{unit_id}",
        hash=hash_ or f"hash-{position}-{sorted(fields.items())}".encode()[:32],
        subject=command_pb2.Subject(kind="unit", id=unit_id),
        unit=values,
    )


def import_batch(
    run_id: str,
    batch_no: int,
    rows: list[command_pb2.BatchRow],
    *,
    integration: str = "scout-fbl",
    event_code: str = "AG2026",
) -> command_pb2.ImportBatch:
    return command_pb2.ImportBatch(
        command_id=f"{run_id}:{batch_no}",
        integration_code=integration,
        run_id=run_id,
        batch_no=batch_no,
        event_code=event_code,
        rows=rows,
    )
