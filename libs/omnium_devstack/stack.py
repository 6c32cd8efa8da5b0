"""Start and stop a private PostgreSQL and Redis under a local data folder, together."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from omnium_devstack.binaries import Binaries, ensure_binaries
from omnium_devstack.postgres import PostgresServer
from omnium_devstack.redis import RedisServer
from omnium_devstack.server import StackError

#: The dev stack's provider files (the demo provider): the repository's dev/providers/.
DEV_PROVIDERS_DIR = Path(__file__).resolve().parents[2] / "dev" / "providers"


def dev_environment() -> dict[str, str]:
    """What makes a process a dev one, beside the servers' addresses."""
    env = {
        "OMNIUM_ENVIRONMENT": "development",
        # Its Scout simulator and webhook sinks listen on this machine.
        "OMNIUM_OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
    }
    # The demo provider is dev-only, so it lives outside providers/ (which the image has).
    if DEV_PROVIDERS_DIR.is_dir():
        env["OMNIUM_SCORING_PROVIDERS_DIR"] = str(DEV_PROVIDERS_DIR)
    return env


def dev_process_environ() -> dict[str, str]:
    """This process's environment without its own OMNIUM_ settings, as a dev process started
    from here needs it: the base a test or a benchmark adds its settings to."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNIUM_")}
    env.update(dev_environment())
    return env


class Stack:
    """PostgreSQL and Redis for one data dir, started and stopped together."""

    def __init__(
        self,
        data_dir: Path | str,
        pg_port: int = 0,
        redis_port: int = 0,
        fsync: bool = True,
        *,
        binaries: Binaries | None = None,
        pg_port_setting: str = "pg_port",
        redis_port_setting: str = "redis_port",
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self._binaries = binaries
        self.postgres = PostgresServer(
            self.data_dir,
            pg_port,
            fsync=fsync,
            binaries=binaries.postgres if binaries else None,
            port_setting=pg_port_setting,
        )
        self.redis = RedisServer(
            self.data_dir,
            redis_port,
            binary=binaries.redis_server if binaries else None,
            port_setting=redis_port_setting,
        )

    @classmethod
    def from_command_line(
        cls, data_dir: Path | str, pg_port: int, redis_port: int, fsync: bool = True
    ) -> Stack:
        """The stack a `make` target or `python -m omnium_devstack` starts: a port already
        taken is named by the flag that moves it (--pg-port, --redis-port)."""
        return cls(
            data_dir,
            pg_port,
            redis_port,
            fsync,
            pg_port_setting="--pg-port",
            redis_port_setting="--redis-port",
        )

    @property
    def database_url(self) -> str:
        return self.postgres.database_url

    @property
    def redis_url(self) -> str:
        return self.redis.redis_url

    @property
    def env_file(self) -> Path:
        return self.data_dir / "stack.env"

    def env(self) -> dict[str, str]:
        return {
            **dev_environment(),
            "OMNIUM_DATABASE_URL": self.database_url,
            "OMNIUM_REDIS_URL": self.redis_url,
        }

    def start(self) -> None:
        if self._binaries is None:
            # Fail before starting anything, with one message naming everything missing.
            self._binaries = ensure_binaries(install=False)
            self.postgres._binaries = self._binaries.postgres
            self.redis._binary = self._binaries.redis_server
        # A taken Redis port should not cost a PostgreSQL start and stop first.
        self.postgres.check_port()
        self.redis.check_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.postgres.start()
        try:
            self.redis.start()
        except BaseException:
            if self.postgres.started:
                self.postgres.stop()
            raise

    def stop(self, only_started: bool = False) -> None:
        """Stop both; with only_started, leave alone servers this object merely reused."""
        errors: list[BaseException] = []
        for server in (self.redis, self.postgres):
            if only_started and not server.started:
                continue
            try:
                server.stop()
            except Exception as exc:  # the other server must still be stopped
                errors.append(exc)
        if errors:
            raise StackError("; ".join(str(e) for e in errors))

    def describe(self) -> list[str]:
        return [self.postgres.describe(), self.redis.describe()]


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """A second Ctrl-C during shutdown would leave the servers running; ignore it meanwhile."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def running_stack(
    data_dir: Path | str,
    pg_port: int = 0,
    redis_port: int = 0,
    fsync: bool = True,
    *,
    binaries: Binaries | None = None,
    pg_port_setting: str = "pg_port",
    redis_port_setting: str = "redis_port",
) -> Iterator[Stack]:
    """Start PostgreSQL and Redis for the block; stop on exit, Ctrl-C included.

    Servers already running on `data_dir` (say from `python -m omnium_devstack up`) are
    reused and left running, because whoever started them still relies on them.
    """
    stack = Stack(
        data_dir,
        pg_port,
        redis_port,
        fsync,
        binaries=binaries,
        pg_port_setting=pg_port_setting,
        redis_port_setting=redis_port_setting,
    )
    stack.start()
    try:
        yield stack
    finally:
        with _sigint_deferred():
            stack.stop(only_started=True)
