"""RED metrics per RPC: calls by service, method and status code, and seconds per call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
from grpc import aio
from prometheus_client import Counter, Histogram

HANDLED = Counter(
    "omnium_grpc_server_handled",
    "gRPC calls answered, by service, method and status code.",
    ["grpc_service", "grpc_method", "grpc_code"],
)
SECONDS = Histogram(
    "omnium_grpc_server_handling_seconds",
    "Seconds from a call's start to its answer (a stream: to its end), by service and method.",
    ["grpc_service", "grpc_method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)


# grpc.aio's context.code() answers the C core's number; the names are the StatusCode's.
_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


def _code(context: aio.ServicerContext, failed: BaseException | None) -> str:
    try:
        code = context.code()
    except Exception:  # a context that cannot say: judge by the exception below
        code = None
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if isinstance(code, int) and code in _NAMES and (code != 0 or failed is None):
        return str(_NAMES[code])
    if failed is None:
        return "OK"
    if isinstance(failed, asyncio.CancelledError):
        return "CANCELLED"
    return "UNKNOWN"


class MethodMetrics:
    """One method's children, looked up once when the method is registered."""

    def __init__(self, method: str) -> None:
        service, _, name = method.lstrip("/").rpartition("/")
        self.service, self.name = service, name
        self.observe = SECONDS.labels(service, name).observe
        self.handled: dict[str, Callable[[], None]] = {}

    def done(
        self, context: aio.ServicerContext, failed: BaseException | None, seconds: float
    ) -> None:
        code = _code(context, failed)
        inc = self.handled.get(code)
        if inc is None:
            inc = self.handled[code] = HANDLED.labels(self.service, self.name, code).inc
        inc()
        self.observe(seconds)
