"""Log lines that carry the trace (text or JSON, an HTTP access log behind a setting), and
OpenTelemetry traces across gRPC, HTTP, PostgreSQL, Redis and the hops between services that are
not calls, with the exporter and the sample ratio chosen by settings."""

from __future__ import annotations

from omnium_telemetry._logs import JsonLines, access_log, setup_logging
from omnium_telemetry._tracing import (
    aiohttp_middlewares,
    continued_span,
    current_traceparent,
    grpc_client_interceptors,
    grpc_server_interceptors,
    setup_tracing,
    shutdown_tracing,
    tracer,
    tracing_on,
)

__all__ = [
    "JsonLines",
    "access_log",
    "aiohttp_middlewares",
    "continued_span",
    "current_traceparent",
    "grpc_client_interceptors",
    "grpc_server_interceptors",
    "setup_logging",
    "setup_tracing",
    "shutdown_tracing",
    "tracer",
    "tracing_on",
]
