"""Bearer tokens: the server side that checks them and the channel that sends them.

Neither is a gRPC interceptor. A grpc.aio interceptor runs a chain of coroutines on every call,
on both sides; here the server wraps each method's handler once, when the servicer is added, and
the channel adds the header to each call's own metadata. Same checks, less work per call.
"""

from __future__ import annotations

import hmac
import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc
from grpc import aio

Metadata = Sequence[tuple[str, str | bytes]]


class BearerTokens:
    """The tokens a server accepts in `authorization: Bearer <token>`."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self._tokens = [token.encode() for token in tokens]

    def problem(self, metadata: Metadata | None) -> str | None:
        """None when the call carries a known token, else what is wrong with it."""
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

    def check(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """The same method handler, refusing calls without a known token (UNAUTHENTICATED)."""
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=self._unary(handler.unary_unary))
        if handler.stream_unary is not None:
            return handler._replace(stream_unary=self._unary(handler.stream_unary))
        if handler.unary_stream is not None:
            return handler._replace(unary_stream=self._streaming(handler.unary_stream))
        return handler._replace(stream_stream=self._streaming(handler.stream_stream))

    def _unary(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def checked(request: Any, context: aio.ServicerContext) -> Any:
            problem = self.problem(context.invocation_metadata())
            if problem is not None:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, problem)
            return await behaviour(request, context)

        return checked

    def _streaming(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        if not inspect.isasyncgenfunction(behaviour):
            # A handler that writes with context.write() and returns.
            return self._unary(behaviour)

        async def checked(request: Any, context: aio.ServicerContext) -> AsyncIterator[Any]:
            problem = self.problem(context.invocation_metadata())
            if problem is not None:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, problem)
            async for message in behaviour(request, context):
                yield message

        return checked


class _CheckedGenericHandler(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(self, inner: grpc.GenericRpcHandler, tokens: BearerTokens) -> None:
        self._inner = inner
        self._tokens = tokens

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = self._inner.service(handler_call_details)
        return None if handler is None else self._tokens.check(handler)


class CheckedRegistrar:
    """Stands for the server when a servicer is added: its methods are registered wrapped in
    the token check. Generated `add_..._to_server` functions call these two methods."""

    def __init__(self, server: aio.Server, tokens: BearerTokens) -> None:
        self._server = server
        self._tokens = tokens

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(
            tuple(_CheckedGenericHandler(handler, self._tokens) for handler in handlers)
        )

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self._server.add_registered_method_handlers(
            service, {name: self._tokens.check(handler) for name, handler in handlers.items()}
        )


class _WithToken:
    """A channel's multi-callable that adds the token to each call's metadata."""

    __slots__ = ("_call", "_pair")

    def __init__(self, call: Any, pair: tuple[str, str]) -> None:
        self._call = call
        self._pair = pair

    def __call__(self, request: Any = None, *, metadata: Metadata | None = None, **kw: Any) -> Any:
        return self._call(
            request, metadata=(*metadata, self._pair) if metadata else (self._pair,), **kw
        )


class TokenChannel(aio.Channel):  # type: ignore[misc]
    """A grpc.aio channel whose every call carries `authorization: Bearer <token>`."""

    def __init__(self, channel: aio.Channel, token: str) -> None:
        self._channel = channel
        self._pair = ("authorization", f"Bearer {token}")

    async def __aenter__(self) -> TokenChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._channel.close()

    async def close(self, grace: float | None = None) -> None:
        await self._channel.close(grace)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self._channel.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self._channel.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self._channel.channel_ready()

    def unary_unary(self, *args: Any, **kwargs: Any) -> Any:
        return _WithToken(self._channel.unary_unary(*args, **kwargs), self._pair)

    def unary_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _WithToken(self._channel.unary_stream(*args, **kwargs), self._pair)

    def stream_unary(self, *args: Any, **kwargs: Any) -> Any:
        return _WithToken(self._channel.stream_unary(*args, **kwargs), self._pair)

    def stream_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _WithToken(self._channel.stream_stream(*args, **kwargs), self._pair)
