"""The HA profile's copies: two of every service, gRPC callers balanced over both, HAProxy in front.

Copy 1 of each gRPC service keeps the dev port (command 50051 ...), copy 2 takes it + 100.
The HTTP services' copies listen on port + 100 and + 200; HAProxy holds the dev ports (gateway
8080, doorbell 8081, admin 8082) and sends each request to a copy whose ready check answers,
as a Kubernetes Service with readiness probes would. Every caller of a gRPC service is given
both copies' addresses (round_robin, UNAVAILABLE tried again on the other copy).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Sequence
from pathlib import Path

from omnium_devstack.launcher import ServiceSpec
from omnium_devstack.server import StackError
from omnium_settings import Settings

COPIES = 2
GRPC_STEP = 100
HTTP_STEP = 100
# The services run in two copies, and the port settings each copy moves.
_GRPC = {
    "command": "COMMAND_PORT",
    "scoring": "SCORING_PORT",
    "imports": "IMPORTS_PORT",
    "delivery": "DELIVERY_PORT",
}
# HTTP services behind HAProxy: the port setting, and the path its ready check reads. Each
# answers 503 while its copy stops or cannot reach PostgreSQL (their /healthz and /health
# only say the process is alive).
_HTTP = {
    "gateway": ("GATEWAY_PORT", "/readyz"),
    "imports": ("DOORBELL_PORT", "/readyz"),
    "admin": ("ADMIN_PORT", "/readyz"),
}
# The same checks by service, for anything else that waits for a copy to be ready.
READY_PATH = {service: path for service, (_, path) in _HTTP.items()}
_BACKEND = {"gateway": "gateway", "imports": "doorbell", "admin": "admin"}
# HAProxy reaches the copies over loopback and says who its client was in X-Forwarded-For
# (option forwardfor): the copies believe that header from loopback only, so each fan (and each
# scorer) has its own rate limits, not one bucket for everyone behind HAProxy.
TRUSTED_PROXIES = "127.0.0.0/8,::1/128"
# What HAProxy sends again to the other copy. The gateway's reads and the scorers' syncs (client
# ids) and the doorbell (run ids) are safe to send twice; the console's forms are not, so admin
# retries only a connection that was never made.
_RETRY_ON = {
    "gateway": "conn-failure empty-response response-timeout",
    "imports": "conn-failure empty-response response-timeout",
    "admin": "conn-failure",
}


def _settings_port(settings: Settings, name: str) -> int:
    port: int = settings.value(name.lower())
    return port


def grpc_port(settings: Settings, service: str, copy: int) -> int:
    return _settings_port(settings, _GRPC[service]) + GRPC_STEP * (copy - 1)


def http_port(settings: Settings, service: str, copy: int) -> int:
    return _settings_port(settings, _HTTP[service][0]) + HTTP_STEP * copy


def addresses(settings: Settings) -> dict[str, str]:
    """The OMNIUM_*_ADDRESS every process gets: both copies of each gRPC service."""
    host = settings.server.bind_host
    return {
        f"OMNIUM_{service.upper()}_ADDRESS": ",".join(
            f"{host}:{grpc_port(settings, service, n)}" for n in range(1, COPIES + 1)
        )
        for service in ("command", "scoring", "imports", "delivery")
    }


def _copy(spec: ServiceSpec, settings: Settings, n: int) -> ServiceSpec:
    host = settings.server.bind_host
    env = dict(spec.env)
    listens: list[tuple[str, str]] = []
    if spec.name in _GRPC:
        port = grpc_port(settings, spec.name, n)
        env[f"OMNIUM_{_GRPC[spec.name]}"] = str(port)
        listens.append(("gRPC", f"grpc://{host}:{port}"))
    if spec.name in _HTTP:
        setting, _ = _HTTP[spec.name]
        port = http_port(settings, spec.name, n)
        env[f"OMNIUM_{setting}"] = str(port)
        env["OMNIUM_TRUSTED_PROXIES"] = TRUSTED_PROXIES
        listens.append((_BACKEND[spec.name], f"http://{host}:{port}"))
    # A service's section carries its /metrics port (the sinks and the simulator have none).
    metrics_port: int = getattr(getattr(settings, spec.name, None), "metrics_port", 0)
    if metrics_port:
        # Each copy its own /metrics port: the second one 100 above the first.
        env[f"OMNIUM_{spec.name.upper()}_METRICS_PORT"] = str(metrics_port + 100 * (n - 1))
    return dataclasses.replace(spec, name=f"{spec.name}-{n}", env=env, listens=listens)


def two_copies(
    specs: Sequence[ServiceSpec], settings: Settings, data_dir: Path
) -> list[ServiceSpec]:
    """Every service of `specs` in two copies, HAProxy in front of the HTTP ones; the rest
    (the Scout simulator, the client sinks, the provider pull) as they are."""
    doubled = {*_GRPC, *_HTTP}
    out: list[ServiceSpec] = []
    for spec in specs:
        if spec.name in doubled:
            out.extend(_copy(spec, settings, n) for n in range(1, COPIES + 1))
        else:
            out.append(spec)
    out.append(haproxy_spec(settings, data_dir))
    return out


def haproxy_config(settings: Settings) -> str:
    """Frontends on the dev ports, each with both copies behind a ready check."""
    host = settings.server.bind_host
    lines = [
        "# Written by the dev stack's HA profile (dev/copies.py); not edited.",
        "global",
        "  maxconn 4096",
        "defaults",
        "  mode http",
        "  timeout connect 2s",
        "  timeout client 60s",
        # Live push streams stay open: a keepalive every live_heartbeat_seconds keeps them so.
        "  timeout server 60s",
        "  timeout http-keep-alive 10s",
        # A copy that refuses the connection, or dies before it answers, is tried again on the
        # other one (a kill -9 cuts the requests it had in flight).
        "  option redispatch",
        "  retries 2",
        "  timeout check 3s",
        # A request is sent again only if HAProxy still has it whole: keep the (small) bodies.
        "  option http-buffer-request",
        # The client's address for the copies' per-address limits (they trust TRUSTED_PROXIES).
        "  option forwardfor",
    ]
    for service, (setting, check) in _HTTP.items():
        name = _BACKEND[service]
        lines += [
            f"frontend {name}",
            f"  bind {host}:{_settings_port(settings, setting)}",
            f"  default_backend {name}",
            f"backend {name}",
            "  balance roundrobin",
            f"  option httpchk GET {check}",
            "  http-check expect status 200",
            # Imports runs at nice +10: a check may be slow on a busy machine, not down.
            "  default-server inter 1s fall 3 rise 1",
            f"  retry-on {_RETRY_ON[service]}",
        ]
        lines += [
            f"  server {name}-{n} {host}:{http_port(settings, service, n)} check"
            for n in range(1, COPIES + 1)
        ]
    return "\n".join(lines) + "\n"


def haproxy_spec(settings: Settings, data_dir: Path) -> ServiceSpec:
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        raise StackError(
            "HAProxy (haproxy) is not on this machine: install the Debian package 'haproxy' "
            "(sudo apt-get install haproxy); the HA profile puts it in front of the copies."
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir / "haproxy.cfg"
    config.write_text(haproxy_config(settings))
    host = settings.server.bind_host
    listens = [
        (f"{_BACKEND[s]} (both copies)", f"http://{host}:{_settings_port(settings, p)}")
        for s, (p, _) in _HTTP.items()
    ]
    # -db: stay in the foreground, so the launcher supervises it like any service.
    return ServiceSpec(
        name="haproxy", module="", program=(haproxy, "-db", "-f", str(config)), listens=listens
    )
