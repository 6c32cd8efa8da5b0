"""OpenTelemetry traces across gRPC and aiohttp, with the exporter chosen by a setting."""

from __future__ import annotations

from omnium_telemetry._tracing import (
    aiohttp_middlewares,
    grpc_client_interceptors,
    grpc_server_interceptors,
    setup_tracing,
    shutdown_tracing,
)

__all__ = [
    "aiohttp_middlewares",
    "grpc_client_interceptors",
    "grpc_server_interceptors",
    "setup_tracing",
    "shutdown_tracing",
]
