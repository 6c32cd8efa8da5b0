"""Traces cross gRPC (client to command service) and aiohttp, in one trace."""

from __future__ import annotations

from collections.abc import Iterator

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.instrumentation.utils import suppress_http_instrumentation
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from omnium.command.v1 import command_pb2
from omnium_settings import Settings
from omnium_telemetry import (
    aiohttp_middlewares,
    continued_span,
    current_traceparent,
    setup_tracing,
    shutdown_tracing,
    tracer,
)
from tests.support.command import running_command
from tests.support.games import make_games


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    setup_tracing("omnium-test", Settings.from_env({}), exporter=exporter)
    try:
        yield exporter
    finally:
        shutdown_tracing()


async def test_a_grpc_call_is_one_trace_from_client_to_server(
    database_url: str, db: asyncpg.Connection, spans: InMemorySpanExporter
) -> None:
    games = await make_games(db, units=1)
    async with running_command(database_url) as client:
        answer = await client.submit(
            command_id="traced",
            code="results.set_status",
            unit_id=games.units[0],
            payload={"status": "RUNNING"},
        )
    assert answer.outcome == command_pb2.OUTCOME_ACCEPTED
    submit = [s for s in spans.get_finished_spans() if s.name.endswith("CommandService/Submit")]
    server = next(s for s in submit if s.kind == SpanKind.SERVER)
    caller = next(s for s in submit if s.kind == SpanKind.CLIENT)
    assert server.context.trace_id == caller.context.trace_id
    assert server.parent is not None and server.parent.span_id == caller.context.span_id


async def test_aiohttp_requests_are_traced(spans: InMemorySpanExporter) -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hi")

    app = web.Application(middlewares=aiohttp_middlewares(Settings.from_env({})))
    app.router.add_get("/hello", hello)
    async with TestClient(TestServer(app)) as http:
        response = await http.get("/hello")
        assert response.status == 200
    served = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert served and served[0].attributes is not None
    assert "/hello" in str(served[0].name) + str(dict(served[0].attributes))


@pytest.fixture
def spans_at_none() -> Iterator[InMemorySpanExporter]:
    """Tracing on with a ratio of 0: no new trace is kept, a caller's sampled one still is."""
    exporter = InMemorySpanExporter()
    setup_tracing(
        "omnium-test", Settings.from_env({}, telemetry_sample_ratio=0.0), exporter=exporter
    )
    try:
        yield exporter
    finally:
        shutdown_tracing()


def _app_that_calls_on() -> web.Application:
    """A handler that starts a span of its own, as a gRPC or httpx call inside it would."""

    async def hello(request: web.Request) -> web.Response:
        with tracer("test").start_as_current_span("inner call", kind=SpanKind.CLIENT):
            pass
        return web.Response(text="hi")

    settings = Settings.from_env({}, telemetry_sample_ratio=0.0)
    app = web.Application(middlewares=aiohttp_middlewares(settings))
    app.router.add_get("/hello", hello)
    return app


async def test_a_request_not_kept_starts_no_trace_and_nothing_under_it_does(
    spans_at_none: InMemorySpanExporter,
) -> None:
    # The requests come as from wrk or a browser: this process's own client instrumentation,
    # which would start a trace and send its traceparent, is kept out of them.
    async with TestClient(TestServer(_app_that_calls_on())) as http:
        with suppress_http_instrumentation():
            for _ in range(20):
                assert (await http.get("/hello")).status == 200
    assert spans_at_none.get_finished_spans() == ()


async def test_a_caller_s_sampled_trace_is_continued_whatever_the_ratio(
    spans_at_none: InMemorySpanExporter,
) -> None:
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    headers = {"traceparent": f"00-{trace_id}-{parent_id}-01"}
    async with TestClient(TestServer(_app_that_calls_on())) as http:
        with suppress_http_instrumentation():
            response = await http.get("/hello", headers=headers)
        assert response.status == 200
    finished = {s.name: s for s in spans_at_none.get_finished_spans()}
    server, inner = finished["GET /hello"], finished["inner call"]
    assert server.context is not None and inner.context is not None
    assert f"{server.context.trace_id:032x}" == trace_id
    assert server.parent is not None and f"{server.parent.span_id:016x}" == parent_id
    assert inner.parent is not None and inner.parent.span_id == server.context.span_id
    assert server.attributes is not None and "omnium.sampled_at_the_door" not in server.attributes


async def test_a_share_of_new_requests_is_kept(spans: InMemorySpanExporter) -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hi")

    app = web.Application(
        middlewares=aiohttp_middlewares(Settings.from_env({}, telemetry_sample_ratio=0.5))
    )
    app.router.add_get("/hello", hello)
    async with TestClient(TestServer(app)) as http:
        with suppress_http_instrumentation():
            for _ in range(400):
                assert (await http.get("/hello")).status == 200
    kept = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    # Binomial(400, 0.5): 200 give or take 10; outside 120..280 is eight deviations away.
    assert 120 <= len(kept) <= 280
    assert len({s.context.trace_id for s in kept if s.context is not None}) == len(kept)


async def test_work_for_many_changes_continues_the_first_trace_and_links_the_others(
    spans: InMemorySpanExporter,
) -> None:
    spans_of = tracer("test")
    stored: list[str | None] = []
    for name in ("change-1", "change-2", "change-1-again"):
        with spans_of.start_as_current_span(name):
            stored.append(current_traceparent())
    stored[2] = stored[0]  # two rows of one command carry the same traceparent
    with continued_span("delivery.send", [None, *stored]):
        pass
    by_name = {s.name: s for s in spans.get_finished_spans()}
    send, first, second = by_name["delivery.send"], by_name["change-1"], by_name["change-2"]
    assert send.context is not None and first.context is not None and second.context is not None
    assert send.context.trace_id == first.context.trace_id
    assert send.parent is not None and send.parent.span_id == first.context.span_id
    assert [link.context.span_id for link in send.links] == [second.context.span_id]


async def test_nothing_is_stored_or_continued_while_tracing_is_off() -> None:
    assert current_traceparent() is None
    with continued_span("delivery.send", ["00-" + "1" * 32 + "-" + "2" * 16 + "-01"]) as span:
        assert not span.get_span_context().is_valid
