"""What every benchmark needs around its own workload: servers, databases, processes, figures."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from omnium_devstack.stack import dev_process_environ, running_stack


class BenchError(RuntimeError):
    """The benchmark cannot go on; the message says why."""


def say(message: str) -> None:
    print(message, flush=True)


# --- servers and databases -------------------------------------------------------------------


@contextlib.contextmanager
def database_server(data_dir: Path) -> Iterator[str]:
    """OMNIUM_DATABASE_URL if set, else a private PostgreSQL (and Redis) for the run."""
    given = os.environ.get("OMNIUM_DATABASE_URL")
    if given:
        say(f"database: OMNIUM_DATABASE_URL ({urlsplit(given).hostname}:{urlsplit(given).port})")
        yield given
        return
    say(f"database: starting a private PostgreSQL in {data_dir} (fsync on)")
    with running_stack(data_dir, pg_port=0, redis_port=0, fsync=True) as stack:
        yield stack.database_url


@contextlib.contextmanager
def servers(data_dir: Path, say: Callable[[str], None] = say) -> Iterator[tuple[str, str]]:
    """OMNIUM_DATABASE_URL and OMNIUM_REDIS_URL if both are set, else a private pair."""
    db, redis = os.environ.get("OMNIUM_DATABASE_URL"), os.environ.get("OMNIUM_REDIS_URL")
    if db and redis:
        say("servers: OMNIUM_DATABASE_URL and OMNIUM_REDIS_URL")
        yield db, redis
        return
    say(f"servers: a private PostgreSQL and Redis in {data_dir} (fsync on)")
    with running_stack(data_dir, pg_port=0, redis_port=0, fsync=True) as stack:
        yield stack.database_url, stack.redis_url


def database_url_for(server_url: str, name: str) -> str:
    """The same server, database `name`."""
    return urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))


async def recreate(server_url: str, name: str) -> None:
    """A bench's database, empty: dropped (with its connections) and made again."""
    await drop(server_url, name)
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()


async def drop(server_url: str, name: str) -> None:
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


# --- processes -------------------------------------------------------------------------------


def require(tool: str) -> None:
    """A program the benchmark drives is on PATH, or a BenchError saying how to get it."""
    if shutil.which(tool) is None:
        raise BenchError(
            f"{tool} is not installed: run 'make tools' (as root) or apt-get install {tool}"
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_for_port(
    proc: asyncio.subprocess.Process,
    port: int,
    logfile: Path,
    within: float,
    name: str = "the service",
) -> None:
    """Until `proc` accepts connections on `port`; its log's tail if it exits first."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise BenchError(
                f"{name} exited with {proc.returncode} before listening:\n"
                + (await asyncio.to_thread(logfile.read_text, errors="replace"))[-3000:]
            )
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 0.5)
        except (OSError, TimeoutError):
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise BenchError(f"{name} did not listen on {port} within {within:.0f} s")


def service_env(
    ports: Mapping[str, int], db_url: str, redis_url: str, token: str, **extra: str
) -> dict[str, str]:
    """The environment a bench gives the services it starts: this shell's without its OMNIUM_
    settings, their ports, the servers, one caller (role service) for all, quiet logs, then
    the bench's own settings (`extra`, which win)."""
    env = dev_process_environ()
    env |= {k: str(v) for k, v in ports.items()}
    env |= {
        "OMNIUM_DATABASE_URL": db_url,
        "OMNIUM_REDIS_URL": redis_url,
        "OMNIUM_GRPC_CALLERS": f"bench:service:{token}",
        "OMNIUM_GRPC_TOKEN": token,
        "OMNIUM_LOG_LEVEL": "WARNING",
        **extra,
    }
    return env


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise BenchError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of a process so far (Linux /proc); OSError once it is gone."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- figures ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest rank."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


async def add_scored_match(
    conn: asyncpg.Connection,
    n: int,
    *,
    event: Any,
    discipline: Any,
    teams: Sequence[Any],
    code: str,
    name: str,
    password_hash: str,
    starts_now: bool = False,
) -> str:
    """Match `n` for a scoring load: a football unit with its two teams, and the account
    `scorer<n>` that scores it. Returns the unit's id."""
    unit: str = await conn.fetchval(
        "INSERT INTO unit (event_id, discipline_id, code, name, start_at) "
        "VALUES ($1, $2, $3, $4, CASE WHEN $5 THEN now() END) RETURNING id::text",
        event,
        discipline,
        code,
        name,
        starts_now,
    )
    await conn.execute(
        "INSERT INTO unit_competitor (unit_id, sort_order, competitor_id) "
        "VALUES ($1, 1, $2), ($1, 2, $3)",
        unit,
        *teams,
    )
    account = await conn.fetchval(
        "INSERT INTO account (login, name, role, password_hash) VALUES ($1, $2, 'scorer', $3) "
        "RETURNING id",
        f"scorer{n}",
        f"Scorer {n}",
        password_hash,
    )
    # Scorers score only their own matches (issue 20): the operator assigns this one.
    await conn.execute(
        "INSERT INTO scorer_assignment (account_id, event_id, unit_id, assigned_by) "
        "VALUES ($1, $2, $3::uuid, 'the benchmark')",
        account,
        event,
        unit,
    )
    return unit


# --- tracing ---------------------------------------------------------------------------------


class TraceSink:
    """The OTLP sink's process (bench.otlp_sink) and the settings that send traces to it."""

    def __init__(self, ratio: float, out: Path | None = None) -> None:
        self.ratio = ratio
        self.port = free_port()
        self.spans: int | None = None
        keep = ["--out", str(out)] if out is not None else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.otlp_sink", "--port", str(self.port), *keep],
            cwd=Path(__file__).resolve().parents[1],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise BenchError("the OTLP trace sink (bench.otlp_sink) did not start")

    @property
    def env(self) -> dict[str, str]:
        return {
            "OMNIUM_TELEMETRY_EXPORTER": "otlp",
            "OMNIUM_OTLP_ENDPOINT": f"http://127.0.0.1:{self.port}",
            "OMNIUM_TELEMETRY_SAMPLE_RATIO": str(self.ratio),
        }

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            out, _ = self.proc.communicate(timeout=15)
            for line in out.splitlines():
                if line.startswith("spans "):
                    self.spans = int(line.split()[1])


@contextlib.contextmanager
def tracing(ratio: float | None, out: Path | None = None) -> Iterator[TraceSink | None]:
    """With a ratio: the services export traces (OTLP, that share of new traces kept) to a sink
    that counts them (and writes them to `out`). None: tracing off, as by default."""
    if ratio is None:
        yield None
        return
    sink = TraceSink(ratio, out)
    try:
        yield sink
    finally:
        sink.close()


def tracing_line(sink: TraceSink | None) -> str:
    if sink is None:
        return "# tracing off"
    return (
        f"# tracing on: OTLP to a sink, sample ratio {sink.ratio:g}; "
        f"{sink.spans if sink.spans is not None else '?'} spans exported"
    )
