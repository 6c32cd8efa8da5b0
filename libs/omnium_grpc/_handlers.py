"""Every method a GrpcServer serves is wrapped once, when its servicer is added: its request
bytes are decoded where a bad message can be answered, and, when tokens are required, the
call's token is checked.

Neither is a gRPC interceptor: a grpc.aio interceptor runs a chain of coroutines on every call;
a wrapped handler costs one check.

Bytes that are not the method's message would otherwise fail inside grpc's own decoding, which
answers UNKNOWN with a Python class name and logs a traceback. Here the decoder hands back a
`_Corrupt` in place of the request, and the method answers INVALID_ARGUMENT in plain words.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import cast, final

import grpc
from google.protobuf.message import Message
from grpc import aio

from omnium_grpc._auth import BearerTokens

log = logging.getLogger(__name__)

# A servicer method as grpc calls it: (request, context), the request an iterator of messages
# when the client streams. grpc has no type stubs here, so only the shape of the answer is known.
Method = Callable[..., Awaitable[Message | None]]
StreamMethod = Callable[..., AsyncIterator[Message]]


@final  # so `type(x) is _Corrupt` tells mypy what x is not, too
@dataclass(frozen=True, slots=True)
class _Corrupt:
    problem: str


class _CorruptInStream(Exception):
    def __init__(self, corrupt: _Corrupt) -> None:
        super().__init__(corrupt.problem)
        self.corrupt = corrupt


def _decoder(
    method: str, decode: Callable[[bytes], Message] | None
) -> Callable[[bytes], Message | _Corrupt] | None:
    if decode is None:
        return None

    def decoded(raw: bytes) -> Message | _Corrupt:
        try:
            return decode(raw)
        except Exception as exc:
            return _Corrupt(
                f"the request to {method} is not a valid message for it ({len(raw)} bytes "
                f"that do not decode: {exc}). Build it from the .proto files in protos/ "
                "and send it as the method's request type."
            )

    return decoded


class _Guard:
    """What every call of one method goes through before the method itself."""

    def __init__(self, method: str, tokens: BearerTokens | None) -> None:
        self.method = method
        self.tokens = tokens

    async def check(self, request: Message | _Corrupt | None, context: aio.ServicerContext) -> None:
        if self.tokens is not None:
            problem = self.tokens.problem(context.invocation_metadata())
            if problem is not None:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, problem)
        if type(request) is _Corrupt:
            await self._refuse(request, context)

    async def _refuse(self, corrupt: _Corrupt, context: aio.ServicerContext) -> None:
        log.info("%s: refused a request that does not decode", self.method)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, corrupt.problem)

    async def requests(self, iterator: AsyncIterator[Message | _Corrupt]) -> AsyncIterator[Message]:
        async for request in iterator:
            if type(request) is _Corrupt:
                raise _CorruptInStream(request)
            yield request

    def unary(self, behaviour: Method, *, streamed: bool) -> Method:
        if streamed:
            return self._unary_streamed(behaviour)

        async def guarded(
            request: Message | _Corrupt, context: aio.ServicerContext
        ) -> Message | None:
            await self.check(request, context)
            try:
                return await behaviour(request, context)
            except _CorruptInStream as exc:
                await self._refuse(exc.corrupt, context)
                return None

        return guarded

    def _unary_streamed(self, behaviour: Method) -> Method:
        async def guarded(
            requests: AsyncIterator[Message | _Corrupt], context: aio.ServicerContext
        ) -> Message | None:
            await self.check(None, context)
            try:
                return await behaviour(self.requests(requests), context)
            except _CorruptInStream as exc:
                await self._refuse(exc.corrupt, context)
                return None

        return guarded

    def streaming(
        self, behaviour: Method | StreamMethod, *, streamed: bool
    ) -> Method | StreamMethod:
        if not inspect.isasyncgenfunction(behaviour):
            # A handler that writes with context.write() and returns.
            return self.unary(cast(Method, behaviour), streamed=streamed)
        if streamed:
            return self._streaming_streamed(behaviour)

        async def guarded(
            request: Message | _Corrupt, context: aio.ServicerContext
        ) -> AsyncIterator[Message]:
            await self.check(request, context)
            try:
                async for message in behaviour(request, context):
                    yield message
            except _CorruptInStream as exc:
                await self._refuse(exc.corrupt, context)

        return guarded

    def _streaming_streamed(self, behaviour: StreamMethod) -> StreamMethod:
        async def guarded(
            requests: AsyncIterator[Message | _Corrupt], context: aio.ServicerContext
        ) -> AsyncIterator[Message]:
            await self.check(None, context)
            try:
                async for message in behaviour(self.requests(requests), context):
                    yield message
            except _CorruptInStream as exc:
                await self._refuse(exc.corrupt, context)

        return guarded


def guarded(
    method: str, handler: grpc.RpcMethodHandler, tokens: BearerTokens | None
) -> grpc.RpcMethodHandler:
    """The same method handler, its requests decoded safely and, with tokens, its calls
    refused without a known token (UNAUTHENTICATED)."""
    guard = _Guard(method, tokens)
    handler = handler._replace(request_deserializer=_decoder(method, handler.request_deserializer))
    if handler.unary_unary is not None:
        return handler._replace(unary_unary=guard.unary(handler.unary_unary, streamed=False))
    if handler.stream_unary is not None:
        return handler._replace(stream_unary=guard.unary(handler.stream_unary, streamed=True))
    if handler.unary_stream is not None:
        return handler._replace(unary_stream=guard.streaming(handler.unary_stream, streamed=False))
    return handler._replace(stream_stream=guard.streaming(handler.stream_stream, streamed=True))


class _GuardedGenericHandler(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(self, inner: grpc.GenericRpcHandler, tokens: BearerTokens | None) -> None:
        self._inner = inner
        self._tokens = tokens

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        return guarded(handler_call_details.method, handler, self._tokens)


class GuardedRegistrar:
    """Stands for the server when a servicer is added: its methods are registered guarded.
    Generated `add_..._to_server` functions call these two methods."""

    def __init__(self, server: aio.Server, tokens: BearerTokens | None) -> None:
        self._server = server
        self._tokens = tokens

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(
            tuple(_GuardedGenericHandler(handler, self._tokens) for handler in handlers)
        )

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self._server.add_registered_method_handlers(
            service,
            {
                name: guarded(f"/{service}/{name}", handler, self._tokens)
                for name, handler in handlers.items()
            },
        )
