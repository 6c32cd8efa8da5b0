"""Whatever a method raises is answered one way, by the guard every GrpcServer wraps its methods
in (`omnium_grpc._errors`): refusals with their own words, outages as UNAVAILABLE in plain
words, anything else INTERNAL with an incident and never the exception's text.

A real grpc.aio server on a free port, with the real guard (`GuardedRegistrar`, no callers),
serving a test service whose methods raise what each case names."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import asyncpg
import grpc
import pytest
from grpc import aio

from omnium_devstack import free_port
from omnium_grpc import NotNow, Refused, Unavailable
from omnium_grpc._handlers import GuardedRegistrar

SECRET = "relation secret_payroll does not exist at db-3.internal"


def _identity(data: bytes) -> bytes:
    return data


def _downstream_away() -> aio.AioRpcError:
    return aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, aio.Metadata(), aio.Metadata(), details="connect failed"
    )


FAILURES: dict[str, Callable[[], BaseException]] = {
    "Bug": lambda: ValueError(SECRET),
    "Refused": lambda: Refused("limit must be 1 to 500; send it again with a limit in range"),
    "NotNow": lambda: NotNow("the run is still going; wait for it to end, then ask again"),
    "Away": lambda: Unavailable("Scout did not answer; ask again in a minute"),
    "DatabaseAway": lambda: ConnectionRefusedError(111, SECRET),
    "DatabaseStarting": lambda: asyncpg.CannotConnectNowError(SECRET),
    "DownstreamAway": _downstream_away,
}


@pytest.fixture
async def channel() -> AsyncIterator[aio.Channel]:
    def failing(name: str) -> grpc.RpcMethodHandler:
        async def method(_request: bytes, _context: aio.ServicerContext) -> bytes:
            raise FAILURES[name]()

        return grpc.unary_unary_rpc_method_handler(
            method, request_deserializer=_identity, response_serializer=_identity
        )

    async def stream(_request: bytes, _context: aio.ServicerContext) -> AsyncIterator[bytes]:
        yield b"first"
        raise ValueError(SECRET)

    handlers = {name: failing(name) for name in FAILURES}
    handlers["Stream"] = grpc.unary_stream_rpc_method_handler(
        stream, request_deserializer=_identity, response_serializer=_identity
    )
    server = aio.server()
    GuardedRegistrar(server, None).add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("omnium.test.Failing", handlers)]
    )
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        async with aio.insecure_channel(f"127.0.0.1:{port}") as opened:
            yield opened
    finally:
        await server.stop(grace=None)


async def _call(channel: aio.Channel, name: str) -> aio.AioRpcError:
    call = channel.unary_unary(
        f"/omnium.test.Failing/{name}",
        request_serializer=_identity,
        response_deserializer=_identity,
    )
    with pytest.raises(aio.AioRpcError) as caught:
        await call(b"", timeout=10)
    return caught.value


async def test_a_bug_is_internal_with_an_incident_and_none_of_its_text(
    channel: aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    error = await _call(channel, "Bug")
    details = error.details() or ""
    assert error.code() == grpc.StatusCode.INTERNAL
    assert "Failing.Bug failed on our side and nothing was confirmed" in details
    assert "incident" in details and "secret_payroll" not in details
    # The traceback and the text stay in our log, under the same incident.
    incident = details.split("incident ", 1)[1].split(" ", 1)[0]
    assert any(incident in r.getMessage() and r.exc_info for r in caplog.records)


@pytest.mark.parametrize(
    ("name", "code", "said"),
    [
        ("Refused", grpc.StatusCode.INVALID_ARGUMENT, "limit must be 1 to 500"),
        ("NotNow", grpc.StatusCode.FAILED_PRECONDITION, "the run is still going"),
        ("Away", grpc.StatusCode.UNAVAILABLE, "Scout did not answer"),
        ("DatabaseAway", grpc.StatusCode.UNAVAILABLE, "the database did not answer"),
        ("DatabaseStarting", grpc.StatusCode.UNAVAILABLE, "the database did not answer"),
        ("DownstreamAway", grpc.StatusCode.UNAVAILABLE, "a service it needs did not answer"),
    ],
)
async def test_foreseen_failures_get_their_code_and_plain_words(
    channel: aio.Channel, name: str, code: grpc.StatusCode, said: str
) -> None:
    error = await _call(channel, name)
    assert error.code() == code
    details = error.details() or ""
    assert said in details
    assert "secret_payroll" not in details and "incident" not in details


async def test_a_stream_that_fails_midway_ends_internal(channel: aio.Channel) -> None:
    call = channel.unary_stream(
        "/omnium.test.Failing/Stream",
        request_serializer=_identity,
        response_deserializer=_identity,
    )
    stream = call(b"", timeout=10)
    assert await stream.read() == b"first"
    with pytest.raises(aio.AioRpcError) as caught:
        await asyncio.wait_for(stream.read(), 10)
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert "secret_payroll" not in (caught.value.details() or "")
