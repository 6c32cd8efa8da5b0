"""gRPC servers and channels the omnium way: auth, health, reflection, limits, clean shutdown."""

from __future__ import annotations

from omnium_grpc._auth import TokenChannel
from omnium_grpc._callers import (
    PEOPLE,
    ROLES,
    Caller,
    Callers,
    Role,
    current_caller,
)
from omnium_grpc._changes import field_changes, json_value
from omnium_grpc._client import open_channel
from omnium_grpc._errors import abort_internal
from omnium_grpc._server import GrpcServer
from omnium_grpc._targets import RETRIED_METHODS, grpc_target, service_config

__all__ = [
    "PEOPLE",
    "RETRIED_METHODS",
    "ROLES",
    "Caller",
    "Callers",
    "GrpcServer",
    "Role",
    "TokenChannel",
    "abort_internal",
    "current_caller",
    "field_changes",
    "grpc_target",
    "json_value",
    "open_channel",
    "service_config",
]
