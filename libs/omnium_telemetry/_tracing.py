"""Tracer set-up per process: none, console or OTLP, and the interceptors that carry context."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import SpanKind

from omnium_settings import Settings

if TYPE_CHECKING:
    from grpc import aio

# The process's provider, once set up; None means tracing is off and no interceptor is added.
_provider: TracerProvider | None = None


def setup_tracing(
    service_name: str, settings: Settings, *, exporter: SpanExporter | None = None
) -> TracerProvider | None:
    """Install this process's tracer provider; `exporter` overrides the setting (for tests)."""
    global _provider
    if exporter is None and settings.telemetry_exporter == "none":
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif settings.telemetry_exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        otlp = OTLPSpanExporter(endpoint=settings.otlp_endpoint, insecure=True)
        provider.add_span_processor(BatchSpanProcessor(otlp))
    if _provider is None:
        trace.set_tracer_provider(provider)
    _provider = provider
    return provider


def shutdown_tracing() -> None:
    """Flush and stop: spans still queued go out before the process ends."""
    global _provider
    if _provider is not None:
        _provider.shutdown()
        _provider = None


def grpc_server_interceptors(settings: Settings) -> list[aio.ServerInterceptor]:
    del settings  # tracing is on when set up, whatever the call site's settings
    if _provider is None:
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    return [aio_server_interceptor(tracer_provider=_provider)]  # type: ignore[no-untyped-call]


def grpc_client_interceptors(settings: Settings) -> list[aio.ClientInterceptor]:
    del settings
    if _provider is None:
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors

    return list(aio_client_interceptors(tracer_provider=_provider))  # type: ignore[no-untyped-call]


def aiohttp_middlewares(settings: Settings) -> list[Middleware]:
    """A server span per request, continuing the caller's trace (W3C traceparent).

    opentelemetry-instrumentation-aiohttp-server's middleware only works after its
    instrumentor has patched aiohttp globally and set its module state, tied to the global
    provider; this small middleware uses the process's provider directly instead.
    """
    del settings
    if _provider is None:
        return []
    tracer = _provider.get_tracer("omnium.aiohttp")

    @web.middleware
    async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else request.path
        with tracer.start_as_current_span(
            f"{request.method} {route}",
            context=propagate.extract(request.headers),
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": request.method,
                "url.path": request.path,
                "http.route": route,
            },
        ) as span:
            try:
                response: web.StreamResponse = await handler(request)
            except web.HTTPException as exc:
                span.set_attribute("http.response.status_code", exc.status)
                raise
            span.set_attribute("http.response.status_code", response.status)
            return response

    return [traced]
