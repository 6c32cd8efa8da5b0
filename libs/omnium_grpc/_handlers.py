"""Every method a GrpcServer serves is wrapped once, when its servicer is added: its request
bytes are decoded where a bad message can be answered, when tokens are required the call's
token names its caller, whose role must allow the method (a console's call also names its person
by their session, and its actor becomes that person), every call is counted and timed for
/metrics (RED: calls by status code, seconds), and whatever the method raises is answered as
`_errors.answer_failure` says (no servicer maps failures itself).

None of it is a gRPC interceptor: a grpc.aio interceptor runs a chain of coroutines on every
call; a wrapped handler costs one check and, for the metrics, one clock read each side.

Bytes that are not the method's message would otherwise fail inside grpc's own decoding, which
answers UNKNOWN with a Python class name and logs a traceback. Here the decoder hands back a
`_Corrupt` in place of the request, and the method answers INVALID_ARGUMENT in plain words.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias, cast, final

import grpc
from google.protobuf.message import Message
from grpc import aio

from omnium_db import is_outage
from omnium_grpc._callers import SESSION_HEADER, Caller, Callers, set_current_caller
from omnium_grpc._errors import abort_internal, answer_failure
from omnium_grpc._metrics import MethodMetrics

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


# What a guarded method is handed: one decoded request, or an iterator of them when the client
# streams; either way a request that does not decode is a _Corrupt.
Incoming: TypeAlias = "Message | _Corrupt | AsyncIterator[Message | _Corrupt]"


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

    def __init__(self, method: str, callers: Callers | None) -> None:
        self.method = method
        # How answers name it: "ScoringService.Act".
        self.what = method.strip("/").rsplit(".", 1)[-1].replace("/", ".")
        self.callers = callers
        self.metrics = MethodMetrics(method)

    async def check(self, request: Incoming | None, context: aio.ServicerContext) -> None:
        if self.callers is not None:
            caller = self.callers.identify(context.invocation_metadata())
            if not isinstance(caller, Caller):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, caller)
                return
            refusal = caller.refusal(self.method)
            if refusal is not None:
                log.info("%s: refused caller %s (%s)", self.method, caller.name, caller.role.name)
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal)
            if caller.role.people:
                caller = await self._person(caller, self.callers, request, context)
            # Each call runs in its own task, so the method (and only it) sees its caller.
            set_current_caller(caller)
        if type(request) is _Corrupt:
            await self._refuse(request, context)

    async def _person(
        self,
        caller: Caller,
        callers: Callers,
        request: Incoming | None,
        context: aio.ServicerContext,
    ) -> Caller:
        """A console's caller with the person its session names; the request's actor made that
        person. A console never names a person itself: a stolen console token alone acts for
        no one (docs/callers.md)."""
        token = next(
            (v for k, v in context.invocation_metadata() or () if k == SESSION_HEADER), None
        )
        if token:
            text = token.decode() if isinstance(token, bytes) else token
            person = None
            if callers.sessions is not None:
                try:
                    person = await callers.sessions(text)
                except Exception as exc:
                    await self._unread_session(exc, context)
            if person is None:
                log.info("%s: caller %s sent a session that is not live", self.method, caller.name)
                await context.abort(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "the signed-in session this call carries has ended or is not known here. "
                    "Nothing was done: sign in on the console again.",
                )
            assert person is not None
            if person.role not in caller.role.people:
                await context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"{person.name} is signed in as a {person.role}, and {caller.name!r} acts "
                    f"only for {', '.join(sorted(caller.role.people))} accounts. Nothing was "
                    "done: ask an admin for an account with that role.",
                )
            caller = caller.for_person(person)
        refusal = caller.person_refusal(self.method, anonymous_scorers=callers.anonymous_scorers)
        if refusal is not None:
            log.info("%s: refused caller %s: no person signed in", self.method, caller.name)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal)
        if isinstance(request, Message) and "actor" in request.DESCRIPTOR.fields_by_name:
            actor = request.actor  # type: ignore[attr-defined]
            actor.CopyFrom(caller.acting(actor))
        return caller

    async def _unread_session(self, exc: Exception, context: aio.ServicerContext) -> None:
        """The person's session could not be read: UNAVAILABLE in plain words when the database
        did not answer (it passes by itself), INTERNAL with an incident for anything else."""
        if is_outage(exc):
            log.warning("%s: the session could not be read (%r)", self.method, exc)
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                "the signed-in person's session could not be read (the database did not "
                "answer); nothing was done. Try again in a few seconds.",
            )
        await abort_internal(context, f"{self.method}: reading the person's session", exc, log)

    async def _refuse(self, corrupt: _Corrupt, context: aio.ServicerContext) -> None:
        log.info("%s: refused a request that does not decode", self.method)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, corrupt.problem)

    async def requests(self, iterator: AsyncIterator[Message | _Corrupt]) -> AsyncIterator[Message]:
        async for request in iterator:
            if type(request) is _Corrupt:
                raise _CorruptInStream(request)
            yield request

    def unary(self, behaviour: Method, *, streamed: bool) -> Method:
        async def guarded(request: Incoming, context: aio.ServicerContext) -> Message | None:
            start = time.perf_counter()
            failed: BaseException | None = None
            try:
                await self.check(None if streamed else request, context)
                if streamed:
                    request = self.requests(cast("AsyncIterator[Message | _Corrupt]", request))
                try:
                    return await behaviour(request, context)
                except _CorruptInStream as exc:
                    await self._refuse(exc.corrupt, context)
                    return None
                except aio.AbortError:
                    raise
                except Exception as exc:
                    await answer_failure(context, self.what, exc, log)
            except BaseException as exc:
                failed = exc
                raise
            finally:
                self.metrics.done(context, failed, time.perf_counter() - start)

        return guarded

    def streaming(
        self, behaviour: Method | StreamMethod, *, streamed: bool
    ) -> Method | StreamMethod:
        if not inspect.isasyncgenfunction(behaviour):
            # A handler that writes with context.write() and returns.
            return self.unary(cast(Method, behaviour), streamed=streamed)

        async def guarded(
            request: Incoming, context: aio.ServicerContext
        ) -> AsyncIterator[Message]:
            start = time.perf_counter()
            failed: BaseException | None = None
            try:
                await self.check(None if streamed else request, context)
                if streamed:
                    request = self.requests(cast("AsyncIterator[Message | _Corrupt]", request))
                try:
                    async for message in behaviour(request, context):
                        yield message
                except _CorruptInStream as exc:
                    await self._refuse(exc.corrupt, context)
                except aio.AbortError:
                    raise
                except Exception as exc:
                    await answer_failure(context, self.what, exc, log)
            except BaseException as exc:
                failed = exc
                raise
            finally:
                self.metrics.done(context, failed, time.perf_counter() - start)

        return guarded


def guarded(
    method: str, handler: grpc.RpcMethodHandler, callers: Callers | None
) -> grpc.RpcMethodHandler:
    """The same method handler, its requests decoded safely and, with callers, its calls
    refused without a known token (UNAUTHENTICATED) or outside the caller's role
    (PERMISSION_DENIED)."""
    guard = _Guard(method, callers)
    handler = handler._replace(request_deserializer=_decoder(method, handler.request_deserializer))
    if handler.unary_unary is not None:
        return handler._replace(unary_unary=guard.unary(handler.unary_unary, streamed=False))
    if handler.stream_unary is not None:
        return handler._replace(stream_unary=guard.unary(handler.stream_unary, streamed=True))
    if handler.unary_stream is not None:
        return handler._replace(unary_stream=guard.streaming(handler.unary_stream, streamed=False))
    return handler._replace(stream_stream=guard.streaming(handler.stream_stream, streamed=True))


class _GuardedGenericHandler(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(self, inner: grpc.GenericRpcHandler, callers: Callers | None) -> None:
        self._inner = inner
        self._callers = callers

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        return guarded(handler_call_details.method, handler, self._callers)


class GuardedRegistrar:
    """Stands for the server when a servicer is added: its methods are registered guarded.
    Generated `add_..._to_server` functions call these two methods."""

    def __init__(self, server: aio.Server, callers: Callers | None) -> None:
        self._server = server
        self._callers = callers

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(
            tuple(_GuardedGenericHandler(handler, self._callers) for handler in handlers)
        )

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self._server.add_registered_method_handlers(
            service,
            {
                name: guarded(f"/{service}/{name}", handler, self._callers)
                for name, handler in handlers.items()
            },
        )
