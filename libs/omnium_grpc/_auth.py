"""Bearer tokens: the server interceptor that checks them and the client one that sends them."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from grpc import aio

# Probes (Kubernetes, load balancers) ask for health without credentials.
_OPEN_PREFIXES = ("/grpc.health.v1.Health/",)


def _unauthenticated(message: str) -> Callable[[Any, aio.ServicerContext], Awaitable[Any]]:
    async def abort(request: Any, context: aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    return abort


def _unauthenticated_stream(message: str) -> Callable[..., Any]:
    async def abort(request: Any, context: aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover - makes this an async generator like the real handler

    return abort


class BearerTokenInterceptor(aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses calls that do not carry `authorization: Bearer <token>` with a known token."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self._tokens = [token.encode() for token in tokens]

    def _allowed(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
        header = next((value for key, value in metadata or () if key == "authorization"), None)
        if header is None:
            return "this call needs 'authorization: Bearer <token>'; no token was sent"
        text = header.decode() if isinstance(header, bytes) else header
        scheme, _, token = text.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return "the authorization header must be 'Bearer <token>'"
        given = token.strip().encode()
        # Compare against every token so the time taken does not say which one nearly matched.
        matched = False
        for known in self._tokens:
            matched |= hmac.compare_digest(given, known)
        return None if matched else "the bearer token is not one this service accepts"

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method or ""
        if method.startswith(_OPEN_PREFIXES):
            return await continuation(handler_call_details)
        problem = self._allowed(handler_call_details.invocation_metadata)
        handler = await continuation(handler_call_details)
        if problem is None or handler is None:
            return handler
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                _unauthenticated(problem),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _unauthenticated_stream(problem),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                _unauthenticated(problem),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return grpc.stream_stream_rpc_method_handler(
            _unauthenticated_stream(problem),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class _TokenMetadata:
    def __init__(self, token: str) -> None:
        self._pair = ("authorization", f"Bearer {token}")

    def add(self, details: Any) -> Any:
        metadata = list(details.metadata or ())
        metadata.append(self._pair)
        return details._replace(metadata=metadata)


class _UnaryUnary(aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self, metadata: _TokenMetadata) -> None:
        self._metadata = metadata

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._metadata.add(details), request)


class _UnaryStream(aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, metadata: _TokenMetadata) -> None:
        self._metadata = metadata

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._metadata.add(details), request)


class _StreamUnary(aio.StreamUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self, metadata: _TokenMetadata) -> None:
        self._metadata = metadata

    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self._metadata.add(details), requests)


class _StreamStream(aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, metadata: _TokenMetadata) -> None:
        self._metadata = metadata

    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self._metadata.add(details), requests)


def token_interceptors(token: str) -> list[Any]:
    """Interceptors that add this process's bearer token to every kind of call.

    grpc.aio files each interceptor under one call kind only, so each kind gets its own.
    """
    metadata = _TokenMetadata(token)
    return [
        _UnaryUnary(metadata),
        _UnaryStream(metadata),
        _StreamUnary(metadata),
        _StreamStream(metadata),
    ]
