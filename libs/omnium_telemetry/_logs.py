"""Log lines for the person on call: JSON lines (one object a line, with the trace and span of
the work that logged) when `OMNIUM_LOG_FORMAT=json`, plain text with the level otherwise; and an
HTTP access log that a setting switches on."""

from __future__ import annotations

import json
import logging
import socket
import sys
import time
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from opentelemetry import trace

from omnium_settings import Settings

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
ACCESS_LOGGER = "omnium.access"
# What an access line carries beside its message, as JSON keys of their own.
ACCESS_FIELDS = ("method", "route", "path", "status", "seconds", "remote")


class JsonLines(logging.Formatter):
    """One JSON object a line: time, level, logger, message, service, copy (the host: a pod's
    name in Kubernetes), pid, the current span's trace_id and span_id (when a trace is being
    kept), the exception's text and an access line's fields."""

    def __init__(self, service: str, copy: str | None = None) -> None:
        super().__init__()
        self.service = service
        self.copy = copy or socket.gethostname()

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "service": self.service,
            "copy": self.copy,
            "pid": record.process,
        }
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            line["trace_id"] = format(span.trace_id, "032x")
            line["span_id"] = format(span.span_id, "016x")
        for field in ACCESS_FIELDS:
            value = record.__dict__.get(field)
            if value is not None:
                line[field] = value
        if record.exc_info:
            record.exc_text = record.exc_text or self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def log_handler(service: str, log_format: str) -> logging.Handler:
    """A handler on stderr writing `log_format` ("json" or "text") lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines(service) if log_format == "json" else _text())
    return handler


def _text() -> logging.Formatter:
    return logging.Formatter(TEXT_FORMAT)


def setup_logging(service: str, settings: Settings) -> None:
    """Route every logger of this process through one handler in the chosen format, at the
    chosen level. Called again (a test, a forked worker) it replaces the handler, never adds."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_omnium", False)]:
        root.removeHandler(old)
    handler = log_handler(service, settings.server.log_format)
    handler._omnium = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(settings.server.log_level)
    # httpx logs a line per request at INFO: noise in a service that reads Scout page by page.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # With our own access log on or off, aiohttp's is never wanted: it has no route, no trace.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def access_log(service: str, settings: Settings) -> list[Middleware]:
    """The middleware of an HTTP server's access log, or none when `OMNIUM_HTTP_ACCESS_LOG` is
    off. Put it inside the tracing middleware, so each line carries its request's trace id.
    It logs the path, never the query string, which may carry a key."""
    if not settings.server.http_access_log:
        return []
    log = logging.getLogger(ACCESS_LOGGER)

    @web.middleware
    async def logged(request: web.Request, handler: Handler) -> web.StreamResponse:
        start = time.perf_counter()
        status = 500
        try:
            answer = await handler(request)
            status = answer.status
            return answer
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            info = request.match_info
            route = info.route.resource if info is not None and info.route is not None else None
            seconds = round(time.perf_counter() - start, 6)
            fields = {
                "method": request.method,
                "route": route.canonical if route is not None else "unmatched",
                "path": request.path,
                "status": status,
                "seconds": seconds,
                "remote": request.remote,
            }
            log.info(
                "%s %s %s %s %.3fs",
                service,
                request.method,
                request.path,
                status,
                seconds,
                extra=fields,
            )

    return [logged]
