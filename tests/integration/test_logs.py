"""Log lines as the person on call reads them: JSON lines with the trace of the work that logged,
text with the level in dev, and an HTTP access log only when the setting is on."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from omnium_settings import Settings
from omnium_telemetry import (
    access_log,
    aiohttp_middlewares,
    setup_logging,
    setup_tracing,
    shutdown_tracing,
)
from omnium_telemetry._logs import ACCESS_LOGGER, JsonLines


class Stderr:
    """What setup_logging's handler writes to the process's stderr (pytest's capture of it)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.text = ""

    def getvalue(self) -> str:
        self.text += self.capsys.readouterr().err
        return self.text


@pytest.fixture
def stderr(capsys: pytest.CaptureFixture[str]) -> Iterator[Stderr]:
    """The process's stderr, and the root logger put back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield Stderr(capsys)
    root.handlers[:] = handlers
    root.setLevel(level)


def _lines(out: Stderr) -> list[str]:
    return [line for line in out.getvalue().splitlines() if line]


def test_json_lines_carry_level_logger_service_copy_trace_and_exception(
    stderr: Stderr,
) -> None:
    setup_logging("command", Settings.from_env({"OMNIUM_LOG_FORMAT": "json"}))
    tracer = TracerProvider().get_tracer("test")
    log = logging.getLogger("omnium_command.road")
    with tracer.start_as_current_span("Submit") as span:
        try:
            raise ValueError("the unit is gone")
        except ValueError:
            log.exception("a command failed: %s", "u-1")
    log.warning("outside any trace")
    inside, outside = (json.loads(line) for line in _lines(stderr))
    ids = span.get_span_context()
    assert inside["level"] == "ERROR"
    assert inside["logger"] == "omnium_command.road"
    assert inside["message"] == "a command failed: u-1"
    assert inside["service"] == "command"
    assert inside["copy"]
    assert inside["trace_id"] == format(ids.trace_id, "032x")
    assert inside["span_id"] == format(ids.span_id, "016x")
    assert "ValueError: the unit is gone" in inside["exception"]
    assert outside["level"] == "WARNING"
    assert "trace_id" not in outside and "exception" not in outside


def test_text_lines_carry_the_level_and_the_level_setting_holds(stderr: Stderr) -> None:
    setup_logging("imports", Settings.from_env({"OMNIUM_LOG_LEVEL": "WARNING"}))
    logging.getLogger("omnium_imports.run").info("not shown")
    logging.getLogger("omnium_imports.run").warning("Scout sent 12 rows")
    (line,) = _lines(stderr)
    assert line.endswith(" WARNING omnium_imports.run Scout sent 12 rows")
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


def test_setting_up_twice_keeps_one_handler(stderr: Stderr) -> None:
    settings = Settings.from_env({"OMNIUM_LOG_FORMAT": "json"})
    setup_logging("admin", settings)
    setup_logging("admin", settings)
    logging.getLogger("x").warning("once")
    assert len(_lines(stderr)) == 1


def _app(settings: Settings) -> web.Application:
    async def unit(request: web.Request) -> web.Response:
        if request.match_info["code"] == "missing":
            raise web.HTTPNotFound()
        return web.Response(text="ok")

    app = web.Application(
        middlewares=[*aiohttp_middlewares(settings), *access_log("gateway", settings)]
    )
    app.router.add_get("/v1/units/{code}", unit)
    return app


async def test_the_access_log_is_off_by_default(stderr: Stderr) -> None:
    settings = Settings.from_env({"OMNIUM_LOG_FORMAT": "json"})
    setup_logging("gateway", settings)
    async with TestClient(TestServer(_app(settings))) as http:
        assert (await http.get("/v1/units/SWM")).status == 200
    assert not [line for line in _lines(stderr) if ACCESS_LOGGER in line]


async def test_the_access_log_says_route_status_and_never_the_query(
    stderr: Stderr,
) -> None:
    settings = Settings.from_env({"OMNIUM_LOG_FORMAT": "json", "OMNIUM_HTTP_ACCESS_LOG": "true"})
    setup_logging("gateway", settings)
    async with TestClient(TestServer(_app(settings))) as http:
        assert (await http.get("/v1/units/SWM?api_key=s3cret")).status == 200
        assert (await http.get("/v1/units/missing")).status == 404
    lines = [json.loads(line) for line in _lines(stderr)]
    found = [line for line in lines if line["logger"] == ACCESS_LOGGER]
    assert [(a["path"], a["status"]) for a in found] == [
        ("/v1/units/SWM", 200),
        ("/v1/units/missing", 404),
    ]
    assert {a["route"] for a in found} == {"/v1/units/{code}"}
    assert all(a["method"] == "GET" and a["seconds"] >= 0 for a in found)
    assert "s3cret" not in stderr.getvalue()


async def test_an_access_line_carries_its_request_s_trace(stderr: Stderr) -> None:
    # Tracing on, as in production: the line names the request's own server span.
    settings = Settings.from_env({"OMNIUM_LOG_FORMAT": "json", "OMNIUM_HTTP_ACCESS_LOG": "true"})
    exporter = InMemorySpanExporter()
    setup_tracing("omnium-gateway", settings, exporter=exporter)
    try:
        setup_logging("gateway", settings)
        async with TestClient(TestServer(_app(settings))) as http:
            assert (await http.get("/v1/units/SWM")).status == 200
    finally:
        shutdown_tracing()
    (line,) = [
        json.loads(line) for line in _lines(stderr) if json.loads(line)["logger"] == ACCESS_LOGGER
    ]
    (server,) = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert line["trace_id"] == format(server.context.trace_id, "032x")
    assert line["span_id"] == format(server.context.span_id, "016x")


def test_the_formatter_names_a_given_copy() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hi", None, None)
    assert (
        json.loads(JsonLines("delivery", copy="delivery-7c9f").format(record))["copy"]
        == "delivery-7c9f"
    )
