"""What production refuses: the dev defaults that must never reach a Games day.

Each check is one plain line naming the setting and what to do. Every process runs them at
start-up when OMNIUM_ENVIRONMENT is production (and refuses to start on any), and
`python -m omnium_process check --deploy` prints them for the environment it runs in, the way
Django's `check --deploy` does.
"""

from __future__ import annotations

import ipaddress
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

from omnium_settings._settings import Settings

#: The repository's (and the image's) providers folder, when OMNIUM_SCORING_PROVIDERS_DIR is unset.
PROVIDERS_DIR = Path(__file__).resolve().parents[2] / "providers"

#: Words that mark a value copied from an example or the dev stack rather than made for a Games.
_EXAMPLE_MARKS = ("example", "change-me", "changeme", "not-a-password", "dev-", "demo", "xxxx")
#: A secret shorter than this was typed by hand, not made (`openssl rand -hex 32` gives 64).
MIN_SECRET_LENGTH = 24

Check = Callable[[Settings], Iterator[str]]


def deploy_problems(settings: Settings) -> list[str]:
    """Every dev default in force, as production sees it: empty when the settings are fit."""
    return [problem for check in _CHECKS for problem in check(settings)]


def _environment(settings: Settings) -> Iterator[str]:
    if settings.server.environment != "production":
        yield (
            f"OMNIUM_ENVIRONMENT is {settings.server.environment}: set it to production on a "
            "Games day (the image does), so a dev default cannot slip through unseen."
        )


def _sign_in(settings: Settings) -> Iterator[str]:
    if not settings.grpc.auth_required:
        yield (
            "OMNIUM_GRPC_AUTH_REQUIRED is false: any caller that reaches a gRPC port may change "
            "live data. Remove it, and give each caller a token in OMNIUM_GRPC_CALLERS."
        )
    if not settings.admin.sign_in_required:
        yield (
            "OMNIUM_ADMIN_SIGN_IN_REQUIRED is false: anyone who reaches the operators' console "
            "may act on the Games. Remove it; make accounts with `python -m omnium_accounts`."
        )
    if not settings.session_cookie_secure:
        yield (
            "OMNIUM_SESSION_COOKIE_SECURE is false: the session cookie would travel over plain "
            "HTTP. Set it to true (the consoles are served over HTTPS)."
        )


def _grpc_transport(settings: Settings) -> Iterator[str]:
    grpc = settings.grpc
    if grpc.mesh:
        return
    if not (grpc.tls_cert_file and grpc.tls_key_file):
        yield (
            "gRPC serves without TLS, so bearer tokens cross the network in clear: set "
            "OMNIUM_GRPC_TLS_CERT_FILE and OMNIUM_GRPC_TLS_KEY_FILE, or OMNIUM_GRPC_MESH=true "
            "when a service mesh gives every connection mutual TLS."
        )
    if not grpc.tls_ca_file:
        yield (
            "gRPC calls to other services go without TLS: set OMNIUM_GRPC_TLS_CA_FILE to the "
            "CA that signed the services' certificates, or OMNIUM_GRPC_MESH=true when a "
            "service mesh gives every connection mutual TLS."
        )


def _secrets(settings: Settings) -> Iterator[str]:
    for name, caller in _caller_tokens(settings):
        # The servers need only each token's hash: a plain one is one more copy to steal.
        yield (
            f"OMNIUM_GRPC_CALLERS gives caller {name} its token in clear: list its hash instead "
            f"({name}:<role>:sha256=<hex>, from `python -m omnium_grpc hash-token`)."
        )
        yield from _weak("OMNIUM_GRPC_CALLERS", f"caller {name}'s token", caller)
    if settings.grpc.token:
        yield from _weak("OMNIUM_GRPC_TOKEN", "this process's token", settings.grpc.token)
    for item in settings.gateway.api_keys:
        parts = item.split(":")
        if len(parts) >= 2:
            yield from _weak("OMNIUM_GATEWAY_API_KEYS", f"client {parts[0]}'s key", parts[1])
    for secret in settings.gateway.stream_token_secrets:
        yield from _weak("OMNIUM_GATEWAY_STREAM_TOKEN_SECRETS", "a stream-token secret", secret)
    for variable, url in (
        ("OMNIUM_DATABASE_URL", settings.server.database_url),
        ("OMNIUM_REDIS_URL", settings.server.redis_url),
    ):
        password = urlsplit(url).password if url else None
        if password and _looks_like_example(password):
            yield (
                f"{variable} has an example password: make a real one for this Games and "
                "keep it in your secret store."
            )


def _weak(variable: str, what: str, secret: str) -> Iterator[str]:
    if _looks_like_example(secret):
        yield f"{variable}: {what} is an example value; make a real one (openssl rand -hex 32)."
    elif len(secret) < MIN_SECRET_LENGTH:
        yield (
            f"{variable}: {what} has {len(secret)} characters; use at least "
            f"{MIN_SECRET_LENGTH}, made at random (openssl rand -hex 32)."
        )


def _looks_like_example(secret: str) -> bool:
    lowered = secret.lower()
    return any(mark in lowered for mark in _EXAMPLE_MARKS)


def _caller_tokens(settings: Settings) -> Iterator[tuple[str, str]]:
    for item in settings.grpc.callers:
        parts = item.split(":", 2)
        if len(parts) == 3 and not parts[2].startswith("sha256="):
            yield parts[0], parts[2]


def _telemetry(settings: Settings) -> Iterator[str]:
    telemetry = settings.telemetry
    if telemetry.exporter != "otlp":
        return
    endpoint = urlsplit(telemetry.otlp_endpoint)
    if endpoint.scheme != "https" and not _loopback(endpoint.hostname):
        yield (
            f"OMNIUM_OTLP_ENDPOINT is {telemetry.otlp_endpoint}: traces would cross the network "
            "without TLS. Use an https:// collector, or one on this host (a sidecar)."
        )


def _loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


#: Ranges no outbound call of a Games day needs: this host and the cloud's metadata service.
_NEVER_OUTBOUND = tuple(
    ipaddress.ip_network(cidr) for cidr in ("127.0.0.0/8", "::1/128", "169.254.0.0/16", "fe80::/10")
)


def _parsed(
    cidrs: tuple[str, ...],
) -> Iterator[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network]]:
    """Each range as written and as a network: Settings.check has refused any that do not parse."""
    for cidr in cidrs:
        yield cidr, ipaddress.ip_network(cidr, strict=False)


def _outbound(settings: Settings) -> Iterator[str]:
    for cidr, network in _parsed(settings.server.outbound_allowed_networks):
        if network.prefixlen == 0 or any(network.overlaps(n) for n in _NEVER_OUTBOUND):
            yield (
                f"OMNIUM_OUTBOUND_ALLOWED_NETWORKS has {cidr}: a webhook or Scout address typed "
                "by a person could then reach this host or the cloud's metadata service. Allow "
                "only the private ranges your clients' or Scout's servers are really in."
            )


def _public_metrics(settings: Settings) -> Iterator[str]:
    if settings.gateway.public_metrics:
        yield (
            "OMNIUM_GATEWAY_PUBLIC_METRICS is true: anyone on the internet could read the "
            "gateway's metrics (routes, keys' traffic, pools). Remove it; Prometheus reads "
            "the metrics port (OMNIUM_GATEWAY_METRICS_PORT)."
        )


def _proxies(settings: Settings) -> Iterator[str]:
    for cidr, network in _parsed(settings.server.trusted_proxies):
        if network.prefixlen == 0:
            yield (
                f"OMNIUM_TRUSTED_PROXIES has {cidr}: any client could say it is any address "
                "and slip every per-address limit. List only your proxies' own ranges."
            )


def _provider_files(settings: Settings) -> Iterator[str]:
    folder = Path(settings.scoring.providers_dir or PROVIDERS_DIR)
    for path in sorted(folder.glob("*.toml")) if folder.is_dir() else ():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue  # scoring itself names a file it cannot read
        if "api_key" in data:
            yield (
                f"{path}: api_key is written in the file, so anyone who reads the image can "
                'send as this provider. Write its hash instead: api_key_sha256 = "<hex>".'
            )
        if "password" in data:
            yield (
                f"{path}: password is written in the file; mount it from your secret store "
                "and name that file with password_file instead."
            )


_CHECKS: tuple[Check, ...] = (
    _environment,
    _sign_in,
    _grpc_transport,
    _secrets,
    _telemetry,
    _proxies,
    _outbound,
    _public_metrics,
    _provider_files,
)
