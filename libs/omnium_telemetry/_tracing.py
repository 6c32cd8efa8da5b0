"""Tracer set-up per process: none, console or OTLP, and the interceptors that carry context."""

from __future__ import annotations

from typing import Any

from omnium_settings import Settings
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

_provider: TracerProvider | None = None


def setup_tracing(service_name: str, settings: Settings) -> TracerProvider | None:
    """Install this process's tracer provider. With exporter "none" nothing is traced."""
    global _provider
    if settings.telemetry_exporter == "none":
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    exporter: SpanExporter
    if settings.telemetry_exporter == "console":
        exporter = ConsoleSpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=settings.otlp_endpoint, insecure=True)
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _provider = provider
    return provider


def shutdown_tracing() -> None:
    global _provider
    if _provider is not None:
        _provider.shutdown()
        _provider = None


def grpc_server_interceptors(settings: Settings) -> list[Any]:
    if settings.telemetry_exporter == "none":
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    return [aio_server_interceptor()]  # type: ignore[no-untyped-call]


def grpc_client_interceptors(settings: Settings) -> list[Any]:
    if settings.telemetry_exporter == "none":
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors

    return list(aio_client_interceptors())  # type: ignore[no-untyped-call]


def aiohttp_middlewares(settings: Settings) -> list[Any]:
    if settings.telemetry_exporter == "none":
        return []
    from opentelemetry.instrumentation.aiohttp_server import create_aiohttp_middleware

    return [create_aiohttp_middleware()]
