"""gRPC servers and channels the omnium way (auth, health, reflection, limits, clean shutdown),
and the contract's messages built one way for every service."""

from __future__ import annotations

from omnium_grpc._auth import TokenChannel
from omnium_grpc._callers import (
    PEOPLE,
    ROLES,
    SESSION_HEADER,
    Caller,
    Callers,
    Person,
    Role,
    SessionLookup,
    current_caller,
    held_results_hidden,
)
from omnium_grpc._client import open_channel
from omnium_grpc._errors import NotNow, Refused, Unavailable, answer_failure
from omnium_grpc._messages import (
    ACTOR_KIND_NAMES,
    ROW_OUTCOMES,
    SignedIn,
    account_actor,
    act_outcome_word,
    actor_as_sent,
    actor_message,
    canonical_id,
    command_message,
    field_changes,
    is_canonical_id,
    is_id,
    json_value,
    payload_struct,
    row_outcome_word,
    source_actor,
    timestamp,
    timestamp_now,
)
from omnium_grpc._server import GrpcServer
from omnium_grpc._targets import RETRIED_METHODS, grpc_target, service_config

__all__ = [
    "ACTOR_KIND_NAMES",
    "PEOPLE",
    "RETRIED_METHODS",
    "ROLES",
    "ROW_OUTCOMES",
    "SESSION_HEADER",
    "Caller",
    "Callers",
    "GrpcServer",
    "NotNow",
    "Person",
    "Refused",
    "Role",
    "SessionLookup",
    "SignedIn",
    "TokenChannel",
    "Unavailable",
    "account_actor",
    "act_outcome_word",
    "actor_as_sent",
    "actor_message",
    "answer_failure",
    "canonical_id",
    "command_message",
    "current_caller",
    "field_changes",
    "grpc_target",
    "held_results_hidden",
    "is_canonical_id",
    "is_id",
    "json_value",
    "open_channel",
    "payload_struct",
    "row_outcome_word",
    "service_config",
    "source_actor",
    "timestamp",
    "timestamp_now",
]
