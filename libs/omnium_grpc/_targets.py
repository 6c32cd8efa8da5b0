"""Address settings to gRPC targets, and the service config that balances and retries copies."""

from __future__ import annotations

import ipaddress
import json

from omnium_settings import Settings, SettingsError

# Methods a copy may be asked again when another copy answered UNAVAILABLE. Writes are here only
# when the request carries its own idempotency key: Submit and ApplyImportBatch their command id,
# Act and Sync each action's client id (which becomes the command id). The rest only read.
# Writes without such a key (StartRun, AddLookup, Resend, ...) are never retried by gRPC.
RETRIED_METHODS: dict[str, tuple[str, ...]] = {
    "omnium.command.v1.CommandService": ("Submit", "ApplyImportBatch", "GetTimeline"),
    "omnium.scoring.v1.ScoringService": (
        "Act",
        "Sync",
        "GetMatchState",
        "WatchMatch",
        "ListMatches",
    ),
    "omnium.imports.v1.ImportsService": (
        "ListIntegrations",
        "ListRuns",
        "GetRun",
        "ListWaiting",
        "DryRun",
    ),
    "omnium.delivery.v1.DeliveryService": ("ListClients", "GetClient", "ListSends"),
    "grpc.health.v1.Health": ("Check",),
}

# UNAVAILABLE: the copy is gone or going. CANCELLED: a stopping copy cancels the calls it had
# received but not yet started, even in a graceful stop (measured in test_grpc_copies); the
# caller's own cancel ends its call and is never tried again.
RETRIED_CODES = ("UNAVAILABLE", "CANCELLED")

_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:")


def grpc_target(address: str) -> str:
    """The gRPC target for an address setting.

    `host:port` is used as it is (one copy, or a Service's one virtual address);
    `10.0.0.5:50051,10.0.0.6:50051` becomes `ipv4:10.0.0.5:50051,10.0.0.6:50051` (IPv6 copies in
    brackets become `ipv6:`); `dns:///name:port` and other scheme targets pass through, so a
    headless Service's name resolves to every pod. A port is required: gRPC would dial 443.
    """
    text = address.strip()
    if text.startswith(_SCHEMES):
        if text.startswith("dns:"):
            _host_port(text.removeprefix("dns:").lstrip("/").rpartition("/")[2], address)
        return text
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    if not entries:
        raise SettingsError(
            "An address setting is empty. Write host:port, a comma list of IP:port copies, "
            "or dns:///name:port."
        )
    if len(entries) == 1:
        _host_port(entries[0], address)
        return entries[0]
    families = set()
    for entry in entries:
        host, _ = _host_port(entry, address)
        try:
            families.add(ipaddress.ip_address(host).version)
        except ValueError:
            raise SettingsError(
                f"The address {address!r} lists {host!r}, which is a name: a list of copies must "
                "be IP addresses. For names, use one dns:///name:port target (a headless "
                "Service's name resolves to every copy)."
            ) from None
    if families == {4}:
        return "ipv4:" + ",".join(entries)
    if families == {6}:
        return "ipv6:" + ",".join(entries)
    raise SettingsError(
        f"The address {address!r} mixes IPv4 and IPv6 copies; gRPC takes one family per list. "
        "List copies of one family, or use a dns:///name:port target."
    )


def _host_port(entry: str, address: str) -> tuple[str, int]:
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        port_text = rest.removeprefix(":") if bracket and rest.startswith(":") else ""
    elif entry.count(":") == 1:
        host, _, port_text = entry.partition(":")
    elif ":" in entry:
        raise SettingsError(
            f"The address {address!r} names {entry!r}: write an IPv6 copy in brackets with its "
            "port, e.g. [fd00::5]:50051."
        )
    else:
        host, port_text = entry, ""
    if not host or not port_text:
        raise SettingsError(
            f"The address {address!r} names {entry!r} without a port; gRPC would dial port 443. "
            "Add the service's port, e.g. 10.0.0.5:50051 or [fd00::5]:50051."
        )
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise SettingsError(
            f"The address {address!r} names {entry!r}, whose port is not a port number "
            "(1 to 65535)."
        )
    return host, port


def service_config(settings: Settings) -> dict[str, object]:
    """round_robin over every address the target resolves to, and UNAVAILABLE tried again on
    another copy for RETRIED_METHODS. The caller's deadline bounds all tries together."""
    config: dict[str, object] = {"loadBalancingConfig": [{"round_robin": {}}]}
    if settings.grpc.retry_attempts > 1:
        config["methodConfig"] = [
            {
                "name": [
                    {"service": service, "method": method}
                    for service, methods in RETRIED_METHODS.items()
                    for method in methods
                ],
                "retryPolicy": {
                    "maxAttempts": settings.grpc.retry_attempts,
                    "initialBackoff": _duration(settings.grpc.retry_first_backoff_seconds),
                    "maxBackoff": _duration(settings.grpc.retry_max_backoff_seconds),
                    "backoffMultiplier": settings.grpc.retry_backoff_multiplier,
                    "retryableStatusCodes": list(RETRIED_CODES),
                },
            }
        ]
    return config


def service_config_json(settings: Settings) -> str:
    return json.dumps(service_config(settings), separators=(",", ":"))


def _duration(seconds: float) -> str:
    return f"{seconds:.6f}s"
