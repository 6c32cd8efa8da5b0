"""Integration tests for omnium_devstack: the private PostgreSQL and Redis servers."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from omnium_devstack import PortInUse, Stack, binaries, running_stack
from omnium_devstack import __main__ as devstack_cli
from omnium_devstack.binaries import find_postgres
from tests.support.waiting import eventually_sync

LIBS = Path(__file__).resolve().parents[2] / "libs"


def _alive(pid: int) -> bool:
    """Independent of the library's check: zombies under a non-reaping init count as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return True
    return state not in ("Z", "X")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ping(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        return sock.recv(64)


def _select_one(database_url: str) -> str:
    binaries = find_postgres()
    assert binaries is not None
    out = subprocess.run(
        [str(binaries.psql), "-X", "-tA", "-c", "SELECT 1", database_url],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout.strip()


@pytest.fixture
def data_dirs() -> Iterator[Callable[[bool], Path]]:
    """Makes data dirs; afterwards stops whatever still runs there and removes fallbacks."""
    made: list[Path] = []
    scratch: list[Path] = []

    def make(reachable: bool) -> Path:
        # mkdtemp folders are 0700, so PostgreSQL's OS user cannot enter them when we are root.
        parent = Path(tempfile.mkdtemp(prefix="omnium-devstack-test-"))
        scratch.append(parent)
        if reachable:
            parent.chmod(0o755)
        made.append(parent / "dev")
        return made[-1]

    yield make
    for data_dir in made:
        stack = Stack(data_dir)
        try:
            stack.stop()
        finally:
            shutil.rmtree(stack.postgres.fallback_home, ignore_errors=True)
    for parent in scratch:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.parametrize("reachable", [True, False], ids=["open-parent", "closed-parent"])
def test_stack_starts_serves_stops_and_restarts(
    data_dirs: Callable[[bool], Path], reachable: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="omnium_devstack")
    data_dir = data_dirs(reachable)

    with running_stack(data_dir, pg_port=0, redis_port=0, fsync=False) as stack:
        assert stack.database_url.startswith("postgresql://postgres@127.0.0.1:")
        assert stack.database_url.endswith("/omnium")
        assert stack.redis_url == f"redis://127.0.0.1:{stack.redis.port}/0"
        assert _select_one(stack.database_url) == "1"
        assert _ping(stack.redis.port).startswith(b"+PONG")
        pg_pid, redis_pid = stack.postgres.pid, stack.redis.pid
        pg_port, redis_port = stack.postgres.port, stack.redis.port
        home = stack.postgres.home
    assert pg_pid is not None
    assert redis_pid is not None

    if os.geteuid() == 0 and not reachable:
        assert home == stack.postgres.fallback_home
        assert "cannot reach" in caplog.text
    else:
        assert home == data_dir.resolve()
    eventually_sync(lambda: not _alive(pg_pid), within=10, what="postgres to stop")
    eventually_sync(lambda: not _alive(redis_pid), within=10, what="redis to stop")
    assert _port_free(pg_port)
    assert _port_free(redis_port)

    # Same data dir again: the cluster from the first run is reused, no second initdb.
    caplog.clear()
    started = time.monotonic()
    with running_stack(data_dir, fsync=False) as again:
        assert _select_one(again.database_url) == "1"
        assert _ping(again.redis.port).startswith(b"+PONG")
        assert again.postgres.home == home
    assert "creating a cluster" not in caplog.text
    assert time.monotonic() - started < 20


def test_running_servers_are_reused_and_left_running(
    data_dirs: Callable[[bool], Path],
) -> None:
    data_dir = data_dirs(True)
    owner = Stack(data_dir, fsync=False)
    owner.start()
    pg_pid = owner.postgres.pid
    try:
        with running_stack(data_dir, fsync=False) as guest:
            assert not guest.postgres.started
            assert not guest.redis.started
            assert guest.database_url == owner.database_url
            assert guest.redis_url == owner.redis_url
        assert pg_pid is not None
        assert _alive(pg_pid), "the guest stopped a server it did not start"
        assert _ping(owner.redis.port).startswith(b"+PONG")
    finally:
        owner.stop()
    assert pg_pid is not None
    eventually_sync(lambda: not _alive(pg_pid), within=10, what="postgres to stop")


def test_taken_port_is_a_clear_error(data_dirs: Callable[[bool], Path]) -> None:
    data_dir = data_dirs(True)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]

        with pytest.raises(PortInUse) as pg_error:
            Stack(data_dir, pg_port=port, fsync=False).start()
        assert f"port {port}" in str(pg_error.value)
        assert "pg_port" in str(pg_error.value)

        with pytest.raises(PortInUse) as redis_error:
            Stack(data_dir, redis_port=port, fsync=False).start()
        assert "redis_port" in str(redis_error.value)
        # The Redis port is checked before PostgreSQL starts, so nothing was left running.
        assert Stack(data_dir).postgres.running() is None

        args = ["up", "--data-dir", str(data_dir), "--pg-port", str(port), "--redis-port", "0"]
        cli = subprocess.run(
            [sys.executable, "-m", "omnium_devstack", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(LIBS)},
            check=False,
        )
    assert cli.returncode == 2, cli.stderr
    assert f"port {port}" in cli.stderr
    assert "--pg-port" in cli.stderr
    assert "Traceback" not in cli.stderr


def test_missing_binaries_name_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(binaries, "_server_dirs", list)
    monkeypatch.setattr(binaries, "find_redis_server", lambda: None)

    with pytest.raises(binaries.MissingBinaries) as error:
        binaries.ensure_binaries(install=False)
    message = str(error.value)
    assert "install the Debian package 'postgresql'" in message
    assert "OMNIUM_DATABASE_URL" in message
    assert "install the Debian package 'redis-server'" in message
    assert error.value.packages == ("postgresql", "redis-server")

    assert devstack_cli.main(["up", "--data-dir", str(tmp_path / "dev")]) == 2
    err = capsys.readouterr().err
    assert "sudo apt-get install postgresql" in err
    assert "Traceback" not in err
    assert not (tmp_path / "dev").exists()


def test_stack_up_runs_the_migration_step_so_a_service_alone_finds_its_schema(
    data_dirs: Callable[[bool], Path],
) -> None:
    data_dir = data_dirs(True)
    args = ["up", "--data-dir", str(data_dir), "--pg-port", "0", "--redis-port", "0", "--no-fsync"]
    cli = subprocess.run(
        [sys.executable, "-m", "omnium_devstack", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={k: v for k, v in os.environ.items() if not k.startswith("OMNIUM_")},
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    env = dict(line.split("=", 1) for line in cli.stdout.splitlines())
    known = len(list((LIBS / "omnium_db" / "migrations").glob("*.sql")))
    assert f"migrate: applied 0001 to {known:04d}" in cli.stderr
    status = subprocess.run(
        [sys.executable, "-m", "omnium_db", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OMNIUM_DATABASE_URL": env["OMNIUM_DATABASE_URL"]},
        check=False,
    )
    assert status.stdout.strip() == f"database at version {known}; this code's is {known}"
