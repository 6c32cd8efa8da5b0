"""The floor under the command road: a bare gRPC unary echo, in a process of its own.

`python -m bench.grpc_echo --port P --answer-bytes N` serves one method,
`/omnium.bench.Echo/Echo`, that takes any request's bytes and answers N bytes, with nothing
between the wire and the handler: no interceptors, no auth, no decoding. bench-command sends it
the very bytes of each import batch it sends the command service, over a channel opened the
same way (`open_channel`, the same options and token), so the time an echo takes is what any
gRPC call of that size costs on this machine: the road cannot go under it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Sequence

import grpc
from grpc import aio

from omnium_grpc._client import channel_options
from omnium_settings import Settings

METHOD = "/omnium.bench.Echo/Echo"


def _identity(data: bytes) -> bytes:
    return data


async def serve(port: int, answer_bytes: int) -> None:
    answer = b"\x00" * answer_bytes

    async def echo(_request: bytes, _context: aio.ServicerContext[bytes, bytes]) -> bytes:
        return answer

    handler = grpc.method_handlers_generic_handler(
        "omnium.bench.Echo",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(
                echo, request_deserializer=_identity, response_serializer=_identity
            )
        },
    )
    server = aio.server(options=channel_options(Settings.from_env({})))
    server.add_generic_rpc_handlers([handler])
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"echo listening on {port}", flush=True)
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    await stopping.wait()
    await server.stop(grace=1)


def echo_call(channel: aio.Channel) -> aio.UnaryUnaryMultiCallable[bytes, bytes]:
    """The echo method on a channel: bytes in, bytes out."""
    return channel.unary_unary(
        METHOD, request_serializer=_identity, response_deserializer=_identity
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.grpc_echo", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--answer-bytes", type=int, default=300)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.port, args.answer_bytes))


if __name__ == "__main__":
    main()
