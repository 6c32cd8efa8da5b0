"""Address settings become gRPC targets; the service config names real, idempotent methods."""

from __future__ import annotations

import json

import pytest
from grpc_health.v1 import health_pb2

from omnium.command.v1 import command_pb2
from omnium.delivery.v1 import delivery_pb2
from omnium.imports.v1 import imports_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_grpc import RETRIED_METHODS, grpc_target, service_config
from omnium_grpc._client import balancing_options
from omnium_settings import Settings, SettingsError


@pytest.mark.parametrize(
    ("address", "target"),
    [
        # One copy: used as it is, as before.
        ("127.0.0.1:50051", "127.0.0.1:50051"),
        ("omnium-command:50051", "omnium-command:50051"),
        ("[::1]:50051", "[::1]:50051"),
        (" 127.0.0.1:50051 ", "127.0.0.1:50051"),
        ("127.0.0.1:50051,", "127.0.0.1:50051"),
        # Several copies.
        ("127.0.0.1:50051,127.0.0.1:50061", "ipv4:127.0.0.1:50051,127.0.0.1:50061"),
        ("10.0.0.5:50051, 10.0.0.6:50051", "ipv4:10.0.0.5:50051,10.0.0.6:50051"),
        ("[::1]:50051,[fd00::6]:50061", "ipv6:[::1]:50051,[fd00::6]:50061"),
        # Targets with a scheme pass through: a headless Service resolves to every pod.
        ("dns:///command-headless.omnium.svc:50051", "dns:///command-headless.omnium.svc:50051"),
        ("dns://10.96.0.10/command-headless:50051", "dns://10.96.0.10/command-headless:50051"),
        ("ipv4:10.0.0.5:50051,10.0.0.6:50051", "ipv4:10.0.0.5:50051,10.0.0.6:50051"),
        ("unix:/run/omnium/command.sock", "unix:/run/omnium/command.sock"),
    ],
)
def test_an_address_becomes_its_target(address: str, target: str) -> None:
    assert grpc_target(address) == target


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("", "empty"),
        (" , ", "empty"),
        ("127.0.0.1", "without a port"),
        ("127.0.0.1:50051,127.0.0.1", "'127.0.0.1' without a port"),
        ("[::1],[::2]:50051", "'[::1]' without a port"),
        ("dns:///command-headless.omnium.svc", "without a port"),
        ("::1:50051", "in brackets"),
        ("127.0.0.1:fifty", "not a port number"),
        ("127.0.0.1:0", "not a port number"),
        ("command-0:50051,command-1:50051", "dns:///name:port"),
        ("127.0.0.1:50051,[::1]:50051", "mixes IPv4 and IPv6"),
    ],
)
def test_an_address_gRPC_would_misread_is_refused_in_words(address: str, words: str) -> None:
    with pytest.raises(SettingsError, match=words.replace("[", r"\[").replace("]", r"\]")):
        grpc_target(address)


def test_the_config_balances_and_retries_unavailable_with_the_settings_numbers() -> None:
    settings = Settings.from_env(
        {
            "OMNIUM_GRPC_RETRY_ATTEMPTS": "5",
            "OMNIUM_GRPC_RETRY_FIRST_BACKOFF_SECONDS": "0.25",
            "OMNIUM_GRPC_RETRY_MAX_BACKOFF_SECONDS": "2",
            "OMNIUM_GRPC_RETRY_BACKOFF_MULTIPLIER": "3",
        }
    )
    options = dict(balancing_options(settings))
    config = json.loads(options["grpc.service_config"])
    assert config == service_config(settings)
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    [method_config] = config["methodConfig"]
    assert method_config["retryPolicy"] == {
        "maxAttempts": 5,
        "initialBackoff": "0.250000s",
        "maxBackoff": "2.000000s",
        "backoffMultiplier": 3.0,
        "retryableStatusCodes": ["UNAVAILABLE", "CANCELLED"],
    }
    names = {(n["service"], n["method"]) for n in method_config["name"]}
    assert ("omnium.command.v1.CommandService", "Submit") in names
    assert ("omnium.scoring.v1.ScoringService", "Act") in names
    # Writes without their own idempotency key are never tried twice.
    assert ("omnium.imports.v1.ImportsService", "StartRun") not in names
    assert ("omnium.delivery.v1.DeliveryService", "Resend") not in names
    # An import batch as large as a message can still be tried again.
    assert options["grpc.per_rpc_retry_buffer_size"] == settings.grpc.max_message_bytes


def test_one_try_means_no_retry_policy_at_all() -> None:
    config = service_config(Settings.from_env({"OMNIUM_GRPC_RETRY_ATTEMPTS": "1"}))
    assert config == {"loadBalancingConfig": [{"round_robin": {}}]}


@pytest.mark.parametrize(
    "environ",
    [
        {"OMNIUM_GRPC_RETRY_ATTEMPTS": "0"},
        {"OMNIUM_GRPC_RETRY_ATTEMPTS": "6"},
        {"OMNIUM_GRPC_RETRY_FIRST_BACKOFF_SECONDS": "0"},
        {"OMNIUM_GRPC_RETRY_BACKOFF_MULTIPLIER": "-1"},
    ],
)
def test_retry_numbers_grpc_would_refuse_fail_at_start_up(environ: dict[str, str]) -> None:
    with pytest.raises(SettingsError, match="OMNIUM_GRPC_RETRY_"):
        Settings.from_env(environ)


def test_every_retried_method_exists_in_the_contracts() -> None:
    files = (command_pb2, scoring_pb2, imports_pb2, delivery_pb2, health_pb2)
    services = {
        service.full_name: service
        for module in files
        for service in module.DESCRIPTOR.services_by_name.values()
    }
    missing = [
        f"{service}/{method}"
        for service, methods in RETRIED_METHODS.items()
        for method in methods
        if service not in services or method not in services[service].methods_by_name
    ]
    assert missing == []
