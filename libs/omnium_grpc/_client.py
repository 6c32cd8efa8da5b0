"""Channels to other omnium services, carrying this process's token and message limits."""

from __future__ import annotations

from pathlib import Path

import grpc
from grpc import aio

from omnium_grpc._auth import TokenChannel
from omnium_grpc._targets import grpc_target, service_config_json
from omnium_settings import Settings
from omnium_telemetry import grpc_client_interceptors


def channel_options(settings: Settings) -> list[tuple[str, int | str]]:
    return [
        ("grpc.max_send_message_length", settings.grpc.max_message_bytes),
        ("grpc.max_receive_message_length", settings.grpc.max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
    ]


def balancing_options(settings: Settings) -> list[tuple[str, int | str]]:
    """round_robin over the target's copies, UNAVAILABLE tried again on another copy."""
    return [
        ("grpc.service_config", service_config_json(settings)),
        # Ours is the only service config: no DNS TXT look-ups can replace it.
        ("grpc.service_config_disable_resolution", 1),
        # gRPC keeps a request for a try again only up to this size (256 KiB by default);
        # an import batch may be as large as a message.
        ("grpc.per_rpc_retry_buffer_size", settings.grpc.max_message_bytes),
        # A copy that was gone is tried again within this, not after gRPC's default backoff
        # (1 s growing to 120 s): a rolling release stops the other copy seconds after this one
        # is back, and a channel still backing off from it would then have no copy at all.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", int(settings.grpc.reconnect_max_seconds * 1000)),
    ]


def open_channel(address: str, settings: Settings, token: str | None = None) -> aio.Channel:
    """A channel to one of our services, TLS when OMNIUM_GRPC_TLS_CA_FILE is set (and then
    with this process's certificate when client auth is on), plain otherwise.

    `address` may name several copies (see `grpc_target`); calls are spread over them.
    """
    interceptors: list[aio.ClientInterceptor] = list(grpc_client_interceptors(settings))
    options = [*channel_options(settings), *balancing_options(settings)]
    credentials = channel_credentials(settings)
    if credentials is None:
        channel = aio.insecure_channel(
            grpc_target(address), options=options, interceptors=interceptors or None
        )
    else:
        if settings.grpc.tls_server_name:
            options.append(("grpc.ssl_target_name_override", settings.grpc.tls_server_name))
        channel = aio.secure_channel(
            grpc_target(address), credentials, options=options, interceptors=interceptors or None
        )
    token = token if token is not None else settings.grpc.token
    return TokenChannel(channel, token) if token else channel


def channel_credentials(settings: Settings) -> grpc.ChannelCredentials | None:
    """TLS credentials for channels: the CA bundle to trust, and with client auth this
    process's own certificate and key. None without a CA bundle: plain channels."""
    if not settings.grpc.tls_ca_file:
        return None
    key = cert = None
    if settings.grpc.tls_client_auth and settings.grpc.tls_cert_file and settings.grpc.tls_key_file:
        key = Path(settings.grpc.tls_key_file).read_bytes()
        cert = Path(settings.grpc.tls_cert_file).read_bytes()
    return grpc.ssl_channel_credentials(
        root_certificates=Path(settings.grpc.tls_ca_file).read_bytes(),
        private_key=key,
        certificate_chain=cert,
    )
