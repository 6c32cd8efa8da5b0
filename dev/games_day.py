"""`make run`: the servers, the schema, a dev token and every service built so far, in one go."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import secrets
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from dev.copies import addresses, two_copies
from dev.demo import MEDALS, SCHEDULE, demo_clients, demo_integrations, webhook_secret
from omnium_db import init_connection
from omnium_delivery import load_clients
from omnium_delivery.sinks import ensure_keys
from omnium_devstack import RedisServer, Stack
from omnium_devstack.ha import PatroniCluster
from omnium_devstack.launcher import ServiceSpec, run_services
from omnium_devstack.roles import grant_services, own_logins, prepare_migrator
from omnium_devstack.stack import DEV_PROVIDERS_DIR
from omnium_outbound import LOOPBACK
from omnium_settings import Settings

log = logging.getLogger(__name__)
# The demo provider's folder: dev-only, kept out of providers/ (which the image has).
DEV_PROVIDERS = DEV_PROVIDERS_DIR


# The caller each process calls the others as (docs/callers.md): name and role. Command and
# delivery call no one; the provider pull sends its commands as scoring.
PROCESS_CALLERS: dict[str, tuple[str, str]] = {
    "imports": ("imports", "service"),
    "scoring": ("scoring", "service"),
    "providers": ("scoring", "service"),
    "admin": ("admin-console", "operator-console"),
    "gateway": ("gateway", "scorer-console"),
}
# The token `make run` prints, for grpcurl and the command lines beside the stack
# (`python -m omnium_imports ...`): a caller of its own.
TOOLS_CALLER = ("dev-tools", "service")


def grpc_callers(data_dir: Path, tools_token: str) -> tuple[str, dict[str, str]]:
    """OMNIUM_GRPC_CALLERS for every server of the dev stack, and each process's own token.
    The tokens are kept beside the data, the same across restarts."""
    tokens = {name: _secret(data_dir, f"grpc-token-{name}") for name, _ in PROCESS_CALLERS.values()}
    roles = dict(PROCESS_CALLERS.values())
    items = [f"{TOOLS_CALLER[0]}:{TOOLS_CALLER[1]}:{tools_token}"]
    items += [f"{name}:{roles[name]}:{token}" for name, token in tokens.items()]
    by_process = {process: tokens[name] for process, (name, _) in PROCESS_CALLERS.items()}
    return ",".join(items), by_process


def services(
    settings: Settings, secret_file: Path, tokens: Mapping[str, str] | None = None
) -> list[ServiceSpec]:
    """Every process `make run` starts. A new service adds its line here.

    `tokens`: each process's own gRPC token (`grpc_callers`); without it every process sends
    OMNIUM_GRPC_TOKEN. No priorities here: each service lowers its own from its settings
    (imports_nice, delivery_nice, provider_nice, scoring_nice), as it does under Kubernetes
    and systemd."""
    specs = _services(settings, secret_file)
    if tokens is None:
        return specs
    return [
        dataclasses.replace(spec, env={**spec.env, "OMNIUM_GRPC_TOKEN": tokens[spec.name]})
        if spec.name in tokens
        else spec
        for spec in specs
    ]


def _services(settings: Settings, secret_file: Path) -> list[ServiceSpec]:
    host = settings.server.bind_host
    doorbell = f"http://{host}:{settings.imports.doorbell_port}"
    data_dir = secret_file.parent
    return [
        ServiceSpec(
            name="command",
            module="omnium_command",
            listens=[("gRPC", f"grpc://{host}:{settings.command.port}")],
        ),
        ServiceSpec(
            name="imports",
            module="omnium_imports",
            listens=[
                ("doorbell", doorbell),
                ("gRPC", f"grpc://{host}:{settings.imports.port}"),
            ],
        ),
        ServiceSpec(
            name="admin",
            module="omnium_admin",
            listens=[("console", f"http://{host}:{settings.admin.port}")],
        ),
        ServiceSpec(
            name="gateway",
            module="omnium_gateway",
            listens=[
                ("public API", f"http://{host}:{settings.gateway.port}/v1/events"),
                ("live (SSE)", f"http://{host}:{settings.gateway.port}/v1/events/AG2026/live"),
                ("scorer console", f"http://{host}:{settings.gateway.port}/score/"),
            ],
        ),
        ServiceSpec(
            name="scoring",
            module="omnium_scoring",
            listens=[("gRPC", f"grpc://{host}:{settings.scoring.port}")],
        ),
        # Provider feeds that omnium reads (pull); the process lowers its own priority
        # (provider_nice), below scoring's.
        ServiceSpec(name="providers", module="omnium_scoring", args=("pull",)),
        ServiceSpec(
            name="scout-sim",
            module="omnium_scout_sim",
            listens=[("Scout (simulated)", f"http://{host}:{settings.dev.scout_simulator_port}")],
            args=(
                "--replay",
                # A restarted stack goes on with the day: PostgreSQL kept it, so must Scout.
                "--replay-state",
                str(data_dir / "scout-sim-clock"),
                "--doorbell-url",
                doorbell,
                "--secret-file",
                str(secret_file),
                "--integration",
                f"schedule={SCHEDULE.code}",
                "--integration",
                f"medals={MEDALS.code}",
            ),
        ),
        ServiceSpec(
            name="delivery",
            module="omnium_delivery",
            listens=[("gRPC", f"grpc://{host}:{settings.delivery.port}")],
        ),
        ServiceSpec(
            name="client-sinks",
            module="omnium_delivery.sinks",
            listens=[
                ("SFTP (demo clients' files)", f"sftp://{host}:{settings.dev.sftp_sink_port}"),
                ("webhooks (demo receiver)", f"http://{host}:{settings.dev.webhook_sink_port}"),
            ],
            args=(
                "--folder",
                str(data_dir / "sftp"),
                "--keys",
                str(data_dir / "sftp-keys"),
                "--secret-file",
                str(data_dir / "webhook-secret"),
                "--host",
                host,
                "--sftp-port",
                str(settings.dev.sftp_sink_port),
                "--webhook-port",
                str(settings.dev.webhook_sink_port),
            ),
        ),
    ]


async def set_up_demo(
    database_url: str, settings: Settings, secret: str, data_dir: Path | None = None
) -> None:
    """The demo's two integrations, set up from the simulator's reference once it answers."""
    base = f"http://{settings.server.bind_host}:{settings.dev.scout_simulator_port}"
    reference: dict[str, Any] | None = None
    async with httpx.AsyncClient(timeout=5) as http:
        for _ in range(600):
            try:
                reference = (await http.get(f"{base}/control/reference")).json()
                break
            except (httpx.HTTPError, ValueError):
                await asyncio.sleep(0.1)
    if reference is None:
        log.warning("the Scout simulator never answered; no demo integrations were set up")
        return
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        await demo_integrations(conn, reference, base, secret, check_seconds=60)
        event = reference["event"]["code"]
        if data_dir is not None:
            await load_clients(conn, demo_clients(settings, data_dir, event), settings)
    finally:
        await conn.close()
    print(f"demo: integrations {SCHEDULE.code} and {MEDALS.code} set up for {event}", flush=True)
    if data_dir is not None:
        print(
            f"demo: clients ndtv (7 files by SFTP into {data_dir / 'sftp' / 'ndtv'}) and "
            "dailyhunt (top-5 medal table by webhook) set up",
            flush=True,
        )


def _secret(data_dir: Path, name: str) -> str:
    """A random secret kept beside the dev stack's data, the same across restarts."""
    path = data_dir / name
    if path.exists():
        return path.read_text().strip()
    value = secrets.token_urlsafe(24)
    data_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n")
    path.chmod(0o600)
    return value


def _migrate(database_url: str) -> None:
    """The release's migration step, as the Kubernetes Job runs it, before any service starts."""
    env = {**os.environ, "OMNIUM_DATABASE_URL": database_url}
    done = subprocess.run([sys.executable, "-m", "omnium_db", "migrate"], env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the migration step failed (exit {done.returncode}); nothing started")


def _migrate_as_roles(database_url: str, ours: bool) -> bool:
    """The migration step. On servers the dev stack started (`ours`) it runs as the migration
    role, then the services' roles and logins are made (roles.sql), as production runs them,
    and True says each service connects as its own; elsewhere it runs as `database_url` says."""
    if not ours:
        _migrate(database_url)
        return False
    _migrate(asyncio.run(prepare_migrator(database_url)))
    asyncio.run(grant_services(database_url))
    return True


async def _run(
    settings: Settings,
    data_dir: Path,
    env: dict[str, str],
    database_url: str,
    secret: str,
    *,
    ha: bool = False,
    tokens: Mapping[str, str] | None = None,
    logins: bool = False,
) -> int:
    specs = services(settings, data_dir / "scout-secret", tokens)
    if logins:
        # Each service as its own database role; the demo's set-up as the superuser.
        specs = own_logins(specs, database_url)
    if ha:
        specs = two_copies(specs, settings, data_dir)
    running = asyncio.ensure_future(run_services(specs, env))
    # Made before the sinks start, so the sink and the demo clients agree on them.
    ensure_keys(data_dir / "sftp-keys")
    webhook_secret(data_dir)
    demo = asyncio.ensure_future(set_up_demo(database_url, settings, secret, data_dir))
    demo.add_done_callback(_report)
    try:
        return await running
    finally:
        demo.cancel()


def _report(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("demo set-up failed", exc_info=task.exception())


# The HA profile's fixed dev ports: PostgreSQL nodes, Patroni's REST API, etcd client and peer.
HA_PG_PORTS = (55433, 55434)
HA_REST_PORTS = (58008, 58009)
HA_ETCD_PORTS = (52379, 52380)
HA_ROUTE_PORT = 55432  # HAProxy: the services' one database address in the HA profile


def _on_this_machine(settings: Settings) -> Settings:
    """The demo's webhook sink, alert sink and Scout simulator listen on this machine: calls to
    loopback are allowed unless OMNIUM_OUTBOUND_ALLOWED_NETWORKS says otherwise."""
    if settings.server.outbound_allowed_networks:
        return settings
    return settings.replace(outbound_allowed_networks=LOOPBACK)


def _api_keys(settings: Settings, data_dir: Path) -> str:
    """OMNIUM_GATEWAY_API_KEYS: those set, or one for the client samples (docs/clients/), kept
    beside the data and printed."""
    if settings.gateway.api_keys:
        return ",".join(settings.gateway.api_keys)
    key = _secret(data_dir, "api-key")
    print(f"API key     {key}   (send 'X-API-Key: <key>'; samples in docs/clients/)")
    return f"dev:{key}"


def run_games_day(
    data_dir: Path,
    pg_port: int,
    redis_port: int,
    environ: Mapping[str, str] | None = None,
    *,
    ha: bool = False,
) -> int:
    environ = os.environ if environ is None else environ
    settings = _on_this_machine(Settings.from_env(environ))
    stack: Stack | None = None
    cluster: PatroniCluster | None = None
    redis: RedisServer | None = None
    env: dict[str, str] = {}
    if settings.server.database_url and settings.server.redis_url:
        database_url, redis_url = settings.server.database_url, settings.server.redis_url
        log.info("using the servers OMNIUM_DATABASE_URL and OMNIUM_REDIS_URL name")
    elif ha:
        # Fail before starting anything when Patroni or etcd is missing, naming the packages.
        cluster = PatroniCluster(
            data_dir,
            pg_ports=HA_PG_PORTS,
            rest_ports=HA_REST_PORTS,
            etcd_ports=HA_ETCD_PORTS,
            route_port=HA_ROUTE_PORT,
        )
        redis = RedisServer(data_dir, redis_port, port_setting="--redis-port")
        redis.check_port()
        cluster.start()
        try:
            redis.start()
        except BaseException:
            cluster.stop()
            raise
        database_url = cluster.database_url
        redis_url = redis.redis_url
        print("\n".join(cluster.describe()), flush=True)
    else:
        stack = Stack.from_command_line(data_dir, pg_port, redis_port)
        stack.start()
        database_url = settings.server.database_url or stack.database_url
        redis_url = settings.server.redis_url or stack.redis_url
    try:
        # Servers started here are ours to make roles on: each service then connects as its own.
        ours = (stack is not None and database_url == stack.database_url) or cluster is not None
        logins = _migrate_as_roles(database_url, ours)
        token = settings.grpc.token or _secret(data_dir, "grpc-token")
        scout_secret = _secret(data_dir, "scout-secret")
        callers, tokens = grpc_callers(data_dir, token)
        api_keys = _api_keys(settings, data_dir)
        env = {
            "OMNIUM_DATABASE_URL": database_url,
            "OMNIUM_REDIS_URL": redis_url,
            "OMNIUM_GRPC_CALLERS": ",".join(settings.grpc.callers) or callers,
            "OMNIUM_GRPC_TOKEN": token,
            "OMNIUM_GATEWAY_STREAM_TOKEN_SECRETS": ",".join(settings.gateway.stream_token_secrets)
            or _secret(data_dir, "stream-token-secret"),
            "OMNIUM_SCORING_PROVIDERS_DIR": settings.scoring.providers_dir or str(DEV_PROVIDERS),
            "OMNIUM_OUTBOUND_ALLOWED_NETWORKS": ",".join(settings.server.outbound_allowed_networks),
            "OMNIUM_GATEWAY_API_KEYS": api_keys,
        }
        if ha:
            env["OMNIUM_DATABASE_STANDBY_EXPECTED"] = "true"
            env.update(addresses(settings))
        print(f"PostgreSQL  {database_url}\nRedis       {redis_url}")
        print(
            f"gRPC token  {token}   (caller {TOOLS_CALLER[0]}; send "
            "'authorization: Bearer <token>')"
        )
        print(
            f"Console     http://{settings.server.bind_host}:{settings.admin.port}   "
            "(first account, in another terminal: make account LOGIN=<you> ROLE=admin)"
        )
        # Callers set by hand (OMNIUM_GRPC_CALLERS) bring their own tokens: every process then
        # sends OMNIUM_GRPC_TOKEN.
        own = None if settings.grpc.callers else tokens
        return asyncio.run(
            _run(
                settings,
                data_dir,
                env,
                database_url,
                scout_secret,
                ha=ha,
                tokens=own,
                logins=logins,
            )
        )
    finally:
        if stack is not None:
            stack.stop(only_started=True)
        if redis is not None:
            redis.stop()
        if cluster is not None:
            cluster.stop()
