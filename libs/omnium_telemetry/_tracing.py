"""Tracer set-up per process: none, console or OTLP, sampled by a ratio; the interceptors and
instrumentation that carry context over calls; and the traceparent a row carries over a hop
that is not a call (the import queue, the outbox, the live stream)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    TraceState,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes, AttributeValue

from omnium_outbound import redacted
from omnium_settings import Settings

if TYPE_CHECKING:
    from grpc import aio


class _Instrumentor(Protocol):
    """OpenTelemetry's instrumentation for one client library, as far as we undo it."""

    def uninstrument(self) -> None: ...


# The process's provider, once set up; None means tracing is off and no interceptor is added.
_provider: TracerProvider | None = None
_global_set = False
_instrumentors: list[_Instrumentor] = []
_w3c = TraceContextTextMapPropagator()
_NO_TRACER = trace.NoOpTracer()
# On a request's span: the middleware has already drawn this request's lot, and it was kept.
_DRAWN = "omnium.sampled_at_the_door"


class _NoRootAtStoreCalls(Sampler):
    """A trace starts at a request, a ring or a change, never at a database or Redis call.

    The pollers (the import queue, delivery's dispatch, the live readers' blocking XREADs) call
    PostgreSQL and Redis every second with no trace around them; each call would otherwise be a
    trace of one span. A call inside a trace is sampled as its parent is (ParentBased).
    """

    def __init__(self, ratio: float) -> None:
        self._ratio = TraceIdRatioBased(ratio)

    def should_sample(
        self,
        parent_context: otel_context.Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if kind == SpanKind.CLIENT and attributes and "db.system" in attributes:
            return SamplingResult(Decision.DROP)
        if kind == SpanKind.CLIENT and attributes and "db.system.name" in attributes:
            return SamplingResult(Decision.DROP)
        if attributes and attributes.get(_DRAWN) is True:
            return SamplingResult(Decision.RECORD_AND_SAMPLE)
        return self._ratio.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"NoRootAtStoreCalls({self._ratio.get_description()})"


def setup_tracing(
    service_name: str, settings: Settings, *, exporter: SpanExporter | None = None
) -> TracerProvider | None:
    """Install this process's tracer provider; `exporter` overrides the setting (for tests)."""
    global _provider
    if exporter is None and settings.telemetry.exporter == "none":
        return None
    provider = TracerProvider(
        resource=Resource.create({"service.name": service_name}),
        sampler=ParentBased(root=_NoRootAtStoreCalls(settings.telemetry.sample_ratio)),
    )
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif settings.telemetry.exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    else:
        # Only a process that sends traces to a collector loads the OTLP exporter (and its gRPC).
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )

        endpoint = settings.telemetry.otlp_endpoint
        # TLS unless the collector is named with http:// (production refuses that but for a
        # collector on this host: omnium_settings' deploy checks).
        otlp = OTLPSpanExporter(endpoint=endpoint, insecure=not endpoint.startswith("https://"))
        provider.add_span_processor(BatchSpanProcessor(otlp))
    global _global_set
    if not _global_set:
        # OpenTelemetry takes a global provider once per process; ours is passed explicitly
        # everywhere, so a process (a test) that sets up again needs no second global one.
        trace.set_tracer_provider(provider)
        _global_set = True
    _provider = provider
    _instrument(provider)
    return provider


def _instrument(provider: TracerProvider) -> None:
    """OpenTelemetry's own instrumentation for the clients every service uses."""
    # Loaded only once tracing is on: each one imports the client it patches (httpx, redis...),
    # which a process with tracing off (the default) may never use.
    from opentelemetry.instrumentation.aiohttp_client import (  # noqa: PLC0415
        AioHttpClientInstrumentor,
    )
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor  # noqa: PLC0415
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor  # noqa: PLC0415
    from opentelemetry.instrumentation.redis import RedisInstrumentor  # noqa: PLC0415

    _uninstrument()
    for instrumentor in (
        AsyncPGInstrumentor(),  # type: ignore[no-untyped-call]
        RedisInstrumentor(),
        AioHttpClientInstrumentor(),
    ):
        instrumentor.instrument(tracer_provider=provider)
        _instrumentors.append(instrumentor)
    httpx_instrumentor = HTTPXClientInstrumentor()
    httpx_instrumentor.instrument(
        tracer_provider=provider,
        request_hook=_url_without_secrets,
        async_request_hook=_async_url_without_secrets,
    )
    _instrumentors.append(httpx_instrumentor)
    # The aiohttp server side is `aiohttp_middlewares` (hand-written: see why there).


# The span attributes OpenTelemetry's httpx instrumentation puts the whole URL in (old and new
# semantic conventions). It redacts a few cloud signature parameters only; a webhook's ?token=
# or a password in the URL would reach the collector.
_URL_ATTRIBUTES = ("http.url", "url.full")


def _url_without_secrets(span: trace.Span, request: object) -> None:
    """An httpx span shows its URL as omnium's logs do: no user, password or query."""
    recorded = getattr(span, "attributes", None) or {}
    shown = redacted(str(getattr(request, "url", "")))
    for name in _URL_ATTRIBUTES:
        if name in recorded:
            span.set_attribute(name, shown)


async def _async_url_without_secrets(span: trace.Span, request: object) -> None:
    _url_without_secrets(span, request)


def _uninstrument() -> None:
    while _instrumentors:
        _instrumentors.pop().uninstrument()


def shutdown_tracing() -> None:
    """Flush and stop: spans still queued go out before the process ends."""
    global _provider
    _uninstrument()
    if _provider is not None:
        _provider.shutdown()
        _provider = None


def tracing_on() -> bool:
    return _provider is not None


def tracer(name: str) -> trace.Tracer:
    """The process's tracer for `name`; a no-op one while tracing is off."""
    return _provider.get_tracer(name) if _provider is not None else _NO_TRACER


def grpc_server_interceptors(settings: Settings) -> list[aio.ServerInterceptor]:
    del settings  # tracing is on when set up, whatever the call site's settings
    if _provider is None:
        return []
    # Loaded only once tracing is on, as the clients' instrumentation is (_instrument).
    from opentelemetry.instrumentation.grpc import aio_server_interceptor  # noqa: PLC0415

    return [aio_server_interceptor(tracer_provider=_provider)]  # type: ignore[no-untyped-call]


def grpc_client_interceptors(settings: Settings) -> list[aio.ClientInterceptor]:
    del settings
    if _provider is None:
        return []
    # Loaded only once tracing is on, as the clients' instrumentation is (_instrument).
    from opentelemetry.instrumentation.grpc import aio_client_interceptors  # noqa: PLC0415

    return list(aio_client_interceptors(tracer_provider=_provider))  # type: ignore[no-untyped-call]


def aiohttp_middlewares(settings: Settings) -> list[Middleware]:
    """A server span per request, continuing the caller's trace (W3C traceparent).

    Hand-written, not opentelemetry-instrumentation-aiohttp-server's middleware: that one
    builds every request's attributes (URL, headers, client) and records its metrics before
    the sampler is asked, and costs about 200-380 microseconds of CPU per request even when
    the request is not sampled (measured against an 8-line handler on this machine: 125 us
    off, 320-500 us on at a 1 % ratio). That is more than the gateway's whole answer from its
    memory cache. This one draws a new trace's lot first: a request that is not kept gets no
    span at all (the SDK's span costs about 15 us even when it records nothing), only a parent
    that says "not sampled", so nothing the handler calls starts a trace of its own. A kept
    request, or one that brings a traceparent, gets a span with its attributes.
    """
    if _provider is None:
        return []
    spans = _provider.get_tracer("omnium.aiohttp")
    extract = _w3c.extract
    ratio = settings.telemetry.sample_ratio

    @web.middleware
    async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
        answer: web.StreamResponse
        brought = "traceparent" in request.headers
        if not brought and random.random() >= ratio:
            token = otel_context.attach(trace.set_span_in_context(_not_sampled()))
            try:
                answer = await handler(request)
            finally:
                otel_context.detach(token)
            return answer
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else request.path
        with spans.start_as_current_span(
            f"{request.method} {route}",
            context=extract(request.headers) if brought else otel_context.Context(),
            kind=SpanKind.SERVER,
            attributes=None if brought else {_DRAWN: True},
        ) as span:
            if not span.is_recording():
                answer = await handler(request)
                return answer
            span.set_attributes(
                {"http.request.method": request.method, "url.path": request.path,
                 "http.route": route}
            )  # fmt: skip
            try:
                answer = await handler(request)
            except web.HTTPException as exc:
                span.set_attribute("http.response.status_code", exc.status)
                raise
            span.set_attribute("http.response.status_code", answer.status)
            return answer

    return [traced]


def _not_sampled() -> NonRecordingSpan:
    """A parent for work whose trace was not kept: its children are dropped (ParentBased)."""
    return NonRecordingSpan(
        SpanContext(
            trace_id=random.getrandbits(128),
            span_id=random.getrandbits(64),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.DEFAULT),
        )
    )


# -- Hops that are not calls --------------------------------------------------------------------
# A queue row, an outbox row or a Redis Stream entry has no headers for an instrumentation to
# fill: the writer stores the W3C traceparent of its current span in a text column (or field),
# and the reader continues that trace from it.


def current_traceparent() -> str | None:
    """The current span's W3C traceparent, to store beside what this work writes; None when no
    span is current (tracing off). Cheap: one string, no allocation when tracing is off."""
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    carrier: dict[str, str] = {}
    _w3c.inject(carrier)
    return carrier.get("traceparent")


def _span_context(traceparent: str | None) -> trace.SpanContext | None:
    if not traceparent:
        return None
    found = trace.get_current_span(_w3c.extract({"traceparent": traceparent})).get_span_context()
    return found if found.is_valid else None


@contextlib.contextmanager
def continued_span(
    name: str,
    traceparents: Iterable[str | None],
    *,
    kind: SpanKind = SpanKind.CONSUMER,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> Iterator[trace.Span]:
    """A span that continues the trace of the first stored traceparent, linked to the others
    (work that serves many changes at once belongs to one trace and points at the rest). With
    none stored it is a new trace, sampled by the ratio; with tracing off it does nothing."""
    if _provider is None:
        yield trace.INVALID_SPAN
        return
    found = [c for c in map(_span_context, traceparents) if c is not None]
    parent = (
        trace.set_span_in_context(trace.NonRecordingSpan(found[0]))
        if found
        else otel_context.Context()
    )
    # One link per other span (a SpanContext is not hashable: its trace state is a dict).
    others = {(c.trace_id, c.span_id): c for c in found[1:]}
    if found:
        others.pop((found[0].trace_id, found[0].span_id), None)
    links = [Link(c) for c in others.values()]
    with _provider.get_tracer("omnium").start_as_current_span(
        name, context=parent, kind=kind, links=links, attributes=dict(attributes or {})
    ) as span:
        yield span
