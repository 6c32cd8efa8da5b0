"""gRPC servers and channels the omnium way: auth, health, reflection, limits, clean shutdown."""

from __future__ import annotations

from omnium_grpc._auth import BearerTokenInterceptor, TokenClientInterceptor
from omnium_grpc._client import open_channel
from omnium_grpc._server import GrpcServer, wait_for_signal

__all__ = [
    "BearerTokenInterceptor",
    "GrpcServer",
    "TokenClientInterceptor",
    "open_channel",
    "wait_for_signal",
]
