"""OpenTelemetry traces across gRPC, HTTP, PostgreSQL, Redis and the hops between services that
are not calls, with the exporter and the sample ratio chosen by settings."""

from __future__ import annotations

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
    "aiohttp_middlewares",
    "continued_span",
    "current_traceparent",
    "grpc_client_interceptors",
    "grpc_server_interceptors",
    "setup_tracing",
    "shutdown_tracing",
    "tracer",
    "tracing_on",
]
