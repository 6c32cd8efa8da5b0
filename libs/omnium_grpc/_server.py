"""A grpc.aio server with health, reflection, auth and a graceful stop on SIGTERM."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import grpc
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from omnium_grpc._callers import Callers, SessionLookup
from omnium_grpc._client import channel_options
from omnium_grpc._handlers import GuardedRegistrar
from omnium_grpc._reflection import add_reflection
from omnium_settings import Settings
from omnium_telemetry import grpc_server_interceptors

log = logging.getLogger(__name__)

Servicer = TypeVar("Servicer")


class GrpcServer:
    """One process's gRPC server. `add` services, `start`, then `stop` on SIGTERM."""

    def __init__(self, settings: Settings, *, name: str) -> None:
        interceptors: list[aio.ServerInterceptor] = list(grpc_server_interceptors(settings))
        callers = Callers.from_settings(settings, server=name)
        self.callers = callers
        self.settings = settings
        self.name = name
        self.server = aio.server(
            interceptors=interceptors or None,
            options=channel_options(settings),
            maximum_concurrent_rpcs=None,
        )
        # Services are added through this: their requests are decoded where a bad one can be
        # answered, and their methods check the caller's token and role (health is open).
        self._registrar = GuardedRegistrar(self.server, callers)
        self.health = HealthServicer()
        # Health is open to every caller; its requests are decoded safely like the rest.
        health_pb2_grpc.add_HealthServicer_to_server(
            self.health, GuardedRegistrar(self.server, None)
        )
        self._service_names: list[str] = [
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
        ]
        self.port = 0
        self._credentials: grpc.ServerCredentials | None = None
        if settings.grpc.tls_cert_file and settings.grpc.tls_key_file:
            key = Path(settings.grpc.tls_key_file).read_bytes()
            cert = Path(settings.grpc.tls_cert_file).read_bytes()
            # Mutual TLS: callers must show a certificate the CA bundle signed.
            ca = settings.grpc.tls_ca_file if settings.grpc.tls_client_auth else None
            self._credentials = grpc.ssl_server_credentials(
                [(key, cert)],
                root_certificates=Path(ca).read_bytes() if ca else None,
                require_client_auth=ca is not None,
            )

    def use_sessions(self, sessions: SessionLookup) -> None:
        """How this server finds the person behind a console's session (omnium_accounts'
        CallSessions over its pool); without it a console's call with a session is refused."""
        if self.callers is not None:
            self.callers.sessions = sessions

    def add(
        self, register: Callable[[Servicer, aio.Server], None], servicer: Servicer, full_name: str
    ) -> None:
        """Register a servicer, e.g. `add(add_CommandServiceServicer_to_server, svc, NAME)`."""
        register(servicer, self._registrar)
        self._service_names.append(full_name)

    async def start(self, port: int) -> int:
        # Reflection answers only callers with a token, like every service but health.
        add_reflection(self._registrar, self._service_names)
        address = f"{self.settings.server.bind_host}:{port}"
        if self._credentials is not None:
            self.port = self.server.add_secure_port(address, self._credentials)
        else:
            self.port = self.server.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"{self.name} could not listen on {address}: is the port taken?")
        await self.server.start()
        await self._set_all(health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "%s listening on %s:%s (gRPC)", self.name, self.settings.server.bind_host, self.port
        )
        return self.port

    async def stop(self, grace: float | None = None) -> None:
        """Say NOT_SERVING first so balancers stop sending, then let calls in flight finish."""
        await self._set_all(health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(self.settings.grpc.grace_seconds if grace is None else grace)

    async def _set_all(
        self, status: health_pb2.HealthCheckResponse.ServingStatus.ValueType
    ) -> None:
        await self.health.set("", status)
        for service in self._service_names:
            await self.health.set(service, status)
