"""gRPC servers and channels the omnium way: auth, health, reflection, limits, clean shutdown."""

from __future__ import annotations

from omnium_grpc._auth import BearerTokens, TokenChannel
from omnium_grpc._changes import field_changes, json_value
from omnium_grpc._client import open_channel
from omnium_grpc._errors import abort_internal
from omnium_grpc._server import GrpcServer
from omnium_grpc._targets import RETRIED_METHODS, grpc_target, service_config

__all__ = [
    "RETRIED_METHODS",
    "BearerTokens",
    "GrpcServer",
    "TokenChannel",
    "abort_internal",
    "field_changes",
    "grpc_target",
    "json_value",
    "open_channel",
    "service_config",
]
