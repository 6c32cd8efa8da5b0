"""Every service from the image, one container each on the host network, as production runs them.

`make run-image` (`python -m dev.image`) and tests/integration/test_image_run.py share it: the
image `make image` built, each process in a container of its own as user 10001, in production
mode (gRPC over TLS with a CA made here, callers known by their tokens' hashes, long random
secrets, Secure cookies), against the dev stack's PostgreSQL and Redis (or the test's). Scout
and the media clients are outside the cluster in production; here the Scout simulator and the
demo clients' SFTP and webhook servers run on this machine, on its own address rather than
loopback, which production refuses to call.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dev.demo import MEDALS, SCHEDULE, webhook_secret
from dev.games_day import set_up_demo
from omnium_delivery.sinks import ensure_keys
from omnium_devstack import Stack
from omnium_devstack.roles import grant_services, prepare_migrator, service_urls
from omnium_devstack.tls import Tls, make_tls
from omnium_settings import Settings

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "deploy" / "image" / "build.sh"
# Podman as it runs on these machines (deploy/README.md, "The image").
PODMAN = ("podman", "--cgroup-manager=cgroupfs", "--runtime", "runc")
LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
USER = "10001:10001"
UID = 10001
# The pods' terminationGracePeriodSeconds: SIGTERM, then SIGKILL this long after.
GRACE_SECONDS = 30
# Each process's command in the image, as the Deployments give it.
SERVICES: dict[str, tuple[str, ...]] = {
    "command": ("python", "-m", "omnium_command"),
    "scoring": ("python", "-m", "omnium_scoring"),
    "imports": ("python", "-m", "omnium_imports"),
    "delivery": ("python", "-m", "omnium_delivery"),
    "gateway": ("python", "-m", "omnium_gateway"),
    "admin": ("python", "-m", "omnium_admin"),
    "providers": ("python", "-m", "omnium_scoring", "pull"),
}
# The caller each process calls the others as (docs/callers.md); command and delivery call no one.
CALLERS: dict[str, tuple[str, str]] = {
    "imports": ("imports", "service"),
    "scoring": ("scoring", "service"),
    "providers": ("scoring", "service"),
    "admin": ("admin-console", "operator-console"),
    "gateway": ("gateway", "scorer-console"),
}


def build_image(python: str = sys.executable) -> str:
    """`make image`'s build (skipped when the version's image is there): its tag."""
    done = subprocess.run(
        ["bash", str(BUILD)],
        cwd=REPO,
        env={**os.environ, "PY": python},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"deploy/image/build.sh failed: {done.stderr[-4000:]}")
    return done.stdout.strip().splitlines()[-1]


def host_address() -> str:
    """This machine's own IPv4 address, not loopback: what Scout and the clients listen on."""
    done = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True)
    for word in done.stdout.split():
        address = ipaddress.ip_address(word)
        if address.version == 4 and not (address.is_loopback or address.is_link_local):
            return word
    raise RuntimeError("this machine has no IPv4 address but loopback; the image run needs one")


@dataclass(frozen=True)
class Ports:
    """Where each process listens; `metrics` off gives every metrics port 0 (none)."""

    command: int = 50051
    scoring: int = 50052
    imports: int = 50053
    delivery: int = 50054
    doorbell: int = 8081
    gateway: int = 8080
    admin: int = 8082
    scout_simulator: int = 8090
    sftp_sink: int = 8022
    webhook_sink: int = 8092
    metrics: bool = True

    def env(self) -> dict[str, str]:
        env = {
            f"OMNIUM_{name.upper()}_PORT": str(port)
            for name, port in asdict(self).items()
            if name != "metrics"
        }
        if not self.metrics:
            env |= {
                f"OMNIUM_{name.upper()}_METRICS_PORT": "0"
                for name in ("command", "scoring", "imports", "delivery", "gateway", "admin")
            }
        return env


@dataclass(frozen=True)
class Credentials:
    """Each calling process's token, and the servers' list of callers with only their hashes."""

    tokens: dict[str, str]  # by process
    callers: str  # OMNIUM_GRPC_CALLERS

    @classmethod
    def make(cls) -> Credentials:
        by_caller = {name: secrets.token_hex(32) for name, _ in CALLERS.values()}
        roles = dict(CALLERS.values())
        callers = ",".join(
            f"{name}:{roles[name]}:sha256={hashlib.sha256(token.encode()).hexdigest()}"
            for name, token in by_caller.items()
        )
        tokens = {process: by_caller[name] for process, (name, _) in CALLERS.items()}
        return cls(tokens, callers)


def production_env(
    *,
    database_url: str,
    redis_url: str,
    tls: Tls,
    credentials: Credentials,
    ports: Ports,
    host: str,
) -> dict[str, str]:
    """What every container starts with: production, as the manifests give it."""
    return {
        "OMNIUM_ENVIRONMENT": "production",
        "OMNIUM_DATABASE_URL": database_url,
        "OMNIUM_REDIS_URL": redis_url,
        "OMNIUM_GRPC_TLS_CERT_FILE": str(tls.cert),
        "OMNIUM_GRPC_TLS_KEY_FILE": str(tls.key),
        "OMNIUM_GRPC_TLS_CA_FILE": str(tls.ca),
        "OMNIUM_GRPC_CALLERS": credentials.callers,
        # The certificate names 127.0.0.1: each container reaches the others on the host.
        "OMNIUM_COMMAND_ADDRESS": f"127.0.0.1:{ports.command}",
        "OMNIUM_IMPORTS_ADDRESS": f"127.0.0.1:{ports.imports}",
        "OMNIUM_SCORING_ADDRESS": f"127.0.0.1:{ports.scoring}",
        # Scout and the clients' servers are on this machine's address, and only there.
        "OMNIUM_OUTBOUND_ALLOWED_NETWORKS": f"{host}/32",
        "OMNIUM_GATEWAY_WORKERS": "1",
        **ports.env(),
    }


def secret_folder(folder: Path) -> Tls:
    """The folder the containers mount (at the same path): the test CA and certificate, readable
    by the image's user alone."""
    folder.mkdir(parents=True, exist_ok=True)
    tls = make_tls(folder / "tls", "omnium image-run CA")
    give_to_image_user(folder)
    return tls


def give_to_image_user(folder: Path) -> None:
    """The image's user owns the folder (this machine's root still reads it)."""
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, UID, UID)


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PODMAN, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


class ImageStack:
    """The containers of one run: `<prefix>-<process>`, started, checked, stopped, removed."""

    def __init__(
        self,
        tag: str,
        prefix: str,
        env: Mapping[str, str],
        credentials: Credentials,
        folder: Path,
        mounts: Sequence[Path] = (),
    ) -> None:
        self.tag = tag
        self.prefix = prefix
        self.env = dict(env)
        self.credentials = credentials
        self.folder = folder
        # Mounted at the same path inside: podman wants it absolute.
        self.mounts = [path.resolve() for path in (folder, *mounts)]
        self.tls = Tls(Path(env["OMNIUM_GRPC_TLS_CA_FILE"]), Path(), Path())
        # Each process's database address when it has its own login (see use_roles).
        self.database_urls: dict[str, str] = {}
        self._superuser_url = ""

    async def use_roles(self, superuser_url: str) -> None:
        """Production's database roles: the migration container logs in as the migration role,
        and once it is done roles.sql is applied and each container logs in as its service's
        own role, so a grant missing from roles.sql fails here as it would on a Games day.
        `superuser_url` reaches the database as a superuser, which the set-up alone uses."""
        self.database_urls = {"migrate": await prepare_migrator(superuser_url)}
        self.database_urls |= service_urls(superuser_url)
        self._superuser_url = superuser_url

    def name(self, process: str) -> str:
        return f"{self.prefix}-{process}"

    def _env_file(self, process: str) -> Path:
        # A file, not -e: the tokens stay out of the process list.
        env = dict(self.env)
        if process in self.database_urls:
            env["OMNIUM_DATABASE_URL"] = self.database_urls[process]
        if process in self.credentials.tokens:
            env["OMNIUM_GRPC_TOKEN"] = self.credentials.tokens[process]
        path = self.folder / f"{process}.env"
        path.write_text("".join(f"{key}={value}\n" for key, value in env.items()))
        path.chmod(0o600)
        return path

    def run(self, name: str, command: Sequence[str], env_file: Path, *, detach: bool) -> str:
        volumes = [arg for path in self.mounts for arg in ("--volume", f"{path}:{path}:ro")]
        done = podman(
            "run",
            *(["--detach"] if detach else ["--rm"]),
            "--name",
            name,
            "--network",
            "host",
            # No --user: the image's own USER is what runs, as under runAsNonRoot.
            *LIMITS,
            "--env-file",
            str(env_file),
            *volumes,
            self.tag,
            *command,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(f"podman run {name} failed: {done.stderr[-3000:]}{done.stdout}")
        return done.stdout

    def migrate(self) -> None:
        """The schema, before the services roll: `python -m omnium_db migrate` in a container of
        its own, as the Kubernetes Job runs it (services never migrate; they check the schema)."""
        self.run(
            self.name("migrate"),
            ("python", "-m", "omnium_db", "migrate"),
            self._env_file("migrate"),
            detach=False,
        )

    def start(self, process: str) -> None:
        self.run(self.name(process), SERVICES[process], self._env_file(process), detach=True)

    async def start_all(self, seconds: float = 120) -> None:
        """The migration (then the services' roles, with use_roles), then every process;
        command first."""
        self.migrate()
        if self._superuser_url:
            await grant_services(self._superuser_url)
        self.start("command")
        await self.wait_ready(["command"], seconds)
        for process in SERVICES:
            if process != "command":
                self.start(process)
        await self.wait_ready(list(SERVICES), seconds)

    async def ready(self, process: str) -> bool:
        ports = self.env
        checks: dict[str, list[Callable[[], Awaitable[bool]]]] = {
            "command": [lambda: self._grpc_serving(ports["OMNIUM_COMMAND_PORT"])],
            "scoring": [lambda: self._grpc_serving(ports["OMNIUM_SCORING_PORT"])],
            "imports": [
                lambda: self._grpc_serving(ports["OMNIUM_IMPORTS_PORT"]),
                lambda: _http_ok(f"http://127.0.0.1:{ports['OMNIUM_DOORBELL_PORT']}/readyz"),
            ],
            "delivery": [lambda: self._grpc_serving(ports["OMNIUM_DELIVERY_PORT"])],
            "gateway": [
                lambda: _http_ok(f"http://127.0.0.1:{ports['OMNIUM_GATEWAY_PORT']}/readyz")
            ],
            "admin": [lambda: _http_ok(f"http://127.0.0.1:{ports['OMNIUM_ADMIN_PORT']}/readyz")],
        }
        # The provider pull has no port: running is all Kubernetes could see.
        return all([await check() for check in checks.get(process, [])])

    async def wait_ready(self, processes: Sequence[str], seconds: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        waiting = list(processes)
        while waiting:
            for process in list(waiting):
                state = self.state(process)
                if state.status != "running":
                    raise RuntimeError(
                        f"{self.name(process)} is {state.status} (exit {state.exit_code}): "
                        f"{self.logs(process)[-3000:]}"
                    )
                if await self.ready(process):
                    waiting.remove(process)
            if waiting and loop.time() > deadline:
                raise RuntimeError(f"not ready in {seconds:.0f} s: {waiting}")
            await asyncio.sleep(0.3)

    async def _grpc_serving(self, port: str) -> bool:
        # No token: the kubelet's gRPC probe sends none.
        credentials = grpc.ssl_channel_credentials(self.tls.ca.read_bytes())
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
            except grpc.aio.AioRpcError:
                return False
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    def state(self, process: str) -> ContainerState:
        done = podman("inspect", "--format", "{{json .State}}", self.name(process))
        if done.returncode != 0:
            return ContainerState("missing", None, False)
        state = json.loads(done.stdout)
        return ContainerState(state["Status"], state.get("ExitCode"), bool(state.get("OOMKilled")))

    def user(self, process: str) -> str:
        """The uid and gid the container's process runs as, read from inside it."""
        done = podman("exec", self.name(process), "sh", "-c", "id -u; id -g")
        return ":".join(done.stdout.split())

    def logs(self, process: str) -> str:
        done = podman("logs", self.name(process))
        return done.stdout + done.stderr

    def stop(self, process: str) -> int | None:
        """SIGTERM, as the kubelet sends it; SIGKILL only after the grace: the exit code."""
        podman("stop", "--time", str(GRACE_SECONDS), self.name(process), timeout=GRACE_SECONDS + 60)
        return self.state(process).exit_code

    def remove(self) -> None:
        for process in [*SERVICES, "migrate"]:
            podman("rm", "--force", "--time", "0", self.name(process))


@dataclass(frozen=True)
class ContainerState:
    status: str  # running, exited, missing...
    exit_code: int | None
    oom_killed: bool


async def _http_ok(url: str) -> bool:
    async with httpx.AsyncClient(timeout=2) as client:
        try:
            return (await client.get(url)).status_code == 200
        except httpx.HTTPError:
            return False


def demo_environ(host: str, ports: Ports, database_url: str, redis_url: str) -> dict[str, str]:
    """The host side's settings (the simulator, the sinks, the demo's set-up): development, on
    this machine's address."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OMNIUM_", "VIRTUAL_ENV"))}
    return base | {
        "OMNIUM_ENVIRONMENT": "development",
        "OMNIUM_BIND_HOST": host,
        "OMNIUM_DATABASE_URL": database_url,
        "OMNIUM_REDIS_URL": redis_url,
        # The demo's clients are checked as delivery checks them: this machine's address only.
        "OMNIUM_OUTBOUND_ALLOWED_NETWORKS": f"{host}/32",
        **{
            f"OMNIUM_{name.upper()}_PORT": str(getattr(ports, name))
            for name in ("scout_simulator", "sftp_sink", "webhook_sink")
        },
    }


def demo_commands(data_dir: Path, host: str, ports: Ports) -> dict[str, list[str]]:
    """Scout (simulated, replaying a Games day) and the demo clients' servers, on this machine."""
    doorbell = f"http://{host}:{ports.doorbell}"
    python = sys.executable
    return {
        "scout-sim": [
            python,
            "-m",
            "omnium_scout_sim",
            "--replay",
            "--doorbell-url",
            doorbell,
            "--secret-file",
            str(data_dir / "scout-secret"),
            "--integration",
            f"schedule={SCHEDULE.code}",
            "--integration",
            f"medals={MEDALS.code}",
        ],
        "client-sinks": [
            python,
            "-m",
            "omnium_delivery.sinks",
            "--folder",
            str(data_dir / "sftp"),
            "--keys",
            str(data_dir / "sftp-keys"),
            "--secret-file",
            str(data_dir / "webhook-secret"),
            "--host",
            host,
            "--sftp-port",
            str(ports.sftp_sink),
            "--webhook-port",
            str(ports.webhook_sink),
        ],
    }


def prepare_demo(data_dir: Path) -> str:
    """The keys and secrets the simulator, the sinks and the demo clients agree on; the Scout
    secret. The client's SFTP key is the delivery container's to read."""
    data_dir.mkdir(parents=True, exist_ok=True)
    ensure_keys(data_dir / "sftp-keys")
    webhook_secret(data_dir)
    scout = data_dir / "scout-secret"
    if not scout.exists():
        scout.write_text(secrets.token_urlsafe(32) + "\n")
    give_to_image_user(data_dir)
    return scout.read_text().strip()


def tool_missing() -> str | None:
    if shutil.which("podman") is None:
        return "podman is missing: run `make image-tools` (apt-get install podman runc uidmap)"
    return None


def run_image(data_dir: Path, pg_port: int, redis_port: int) -> int:
    """`make run-image`: the dev stack's PostgreSQL and Redis (or OMNIUM_DATABASE_URL's and
    OMNIUM_REDIS_URL's), the image built if it is not, every service from it until Ctrl-C."""
    missing = tool_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    settings = Settings.from_env(os.environ)
    stack: Stack | None = None
    if settings.server.database_url and settings.server.redis_url:
        database_url, redis_url = settings.server.database_url, settings.server.redis_url
    else:
        stack = Stack.from_command_line(data_dir, pg_port, redis_port)
        stack.start()
        database_url, redis_url = stack.database_url, stack.redis_url
    try:
        print("building the image (skipped when this version's is built)...", flush=True)
        tag = build_image()
        folder = (data_dir / "image").resolve()
        # Servers started here are ours to make roles on; elsewhere the URL's user is used.
        roles = stack is not None
        return asyncio.run(_run_image(tag, folder, database_url, redis_url, roles=roles))
    finally:
        if stack is not None:
            stack.stop(only_started=True)


async def _run_image(
    tag: str, folder: Path, database_url: str, redis_url: str, *, roles: bool
) -> int:
    host = host_address()
    ports = Ports()
    secret = prepare_demo(folder)
    environ = demo_environ(host, ports, database_url, redis_url)
    demo = [
        await asyncio.create_subprocess_exec(*command, env=environ)
        for command in demo_commands(folder, host, ports).values()
    ]
    credentials = Credentials.make()
    tls = secret_folder(folder / "secrets")
    env = production_env(
        database_url=database_url,
        redis_url=redis_url,
        tls=tls,
        credentials=credentials,
        ports=ports,
        host=host,
    )
    stack = ImageStack(
        tag, "omnium-image", env, credentials, folder / "secrets", [folder / "sftp-keys"]
    )
    stack.remove()  # what a run killed before left
    if roles:
        await stack.use_roles(database_url)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopped.set)
    try:
        await stack.start_all()
        await set_up_demo(database_url, Settings.from_env(environ), secret, folder)
        print(f"image       {tag}, every process as user {USER}, production mode")
        for process, command in SERVICES.items():
            print(f"container   {stack.name(process):28} {' '.join(command)}")
        print(f"public API  http://127.0.0.1:{ports.gateway}/v1/events")
        print(f"console     http://127.0.0.1:{ports.admin} (Secure cookies: behind HTTPS only)")
        print(f"SFTP files  {folder / 'sftp' / 'ndtv'}")
        print("Ctrl-C stops every container with SIGTERM", flush=True)
        await stopped.wait()
        codes = {process: stack.stop(process) for process in reversed(list(SERVICES))}
        print("stopped: " + ", ".join(f"{p} exit {c}" for p, c in codes.items()), flush=True)
        return 0 if all(code == 0 for code in codes.values()) else 1
    finally:
        stack.remove()
        for helper in demo:
            if helper.returncode is None:
                helper.terminate()
            await helper.wait()
