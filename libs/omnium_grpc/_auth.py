"""The channel that sends a bearer token (the server side is _callers and _handlers).

The channel adds the header to each call's own metadata rather than through an interceptor,
which would run a chain of coroutines on every call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grpc
from grpc import aio

Metadata = Sequence[tuple[str, str | bytes]]


class _WithToken:
    """A channel's multi-callable that adds the token to each call's metadata."""

    __slots__ = ("_call", "_pair")

    # grpc has no type stubs here: the multi-callable and the call it makes are grpc's own.
    def __init__(self, call: Callable[..., object], pair: tuple[str, str]) -> None:
        self._call = call
        self._pair = pair

    def __call__(
        self, request: object = None, *, metadata: Metadata | None = None, **kw: object
    ) -> object:
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

    def unary_unary(self, *args: object, **kwargs: object) -> _WithToken:
        return _WithToken(self._channel.unary_unary(*args, **kwargs), self._pair)

    def unary_stream(self, *args: object, **kwargs: object) -> _WithToken:
        return _WithToken(self._channel.unary_stream(*args, **kwargs), self._pair)

    def stream_unary(self, *args: object, **kwargs: object) -> _WithToken:
        return _WithToken(self._channel.stream_unary(*args, **kwargs), self._pair)

    def stream_stream(self, *args: object, **kwargs: object) -> _WithToken:
        return _WithToken(self._channel.stream_stream(*args, **kwargs), self._pair)
