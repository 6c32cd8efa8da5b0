"""Channels to other omnium services, carrying this process's token and message limits."""

from __future__ import annotations

from typing import Any

from grpc import aio

from omnium_grpc._auth import TokenChannel
from omnium_settings import Settings
from omnium_telemetry import grpc_client_interceptors


def channel_options(settings: Settings) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_send_message_length", settings.grpc_max_message_bytes),
        ("grpc.max_receive_message_length", settings.grpc_max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
    ]


def open_channel(address: str, settings: Settings, token: str | None = None) -> aio.Channel:
    """An insecure (loopback or service mesh) channel; TLS deployments terminate in the mesh."""
    interceptors: list[Any] = list(grpc_client_interceptors(settings))
    channel = aio.insecure_channel(
        address, options=channel_options(settings), interceptors=interceptors or None
    )
    token = token if token is not None else settings.grpc_token
    return TokenChannel(channel, token) if token else channel
