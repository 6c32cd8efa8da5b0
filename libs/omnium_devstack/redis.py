"""A private, non-persistent Redis under a local data folder."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import time
from pathlib import Path
from typing import ClassVar

from omnium_devstack.binaries import REDIS_MISSING, MissingBinaries, find_redis_server
from omnium_devstack.server import (
    HOST,
    START_TIMEOUT,
    LocalServer,
    StackError,
    is_process,
    pid_alive,
    run_command,
    wait_until_gone,
    with_log,
)

log = logging.getLogger("omnium_devstack")

REDIS_KILL_AFTER = 10.0
_REDIS_PIDFILE_GRACE = 5.0


def redis_command(port: int, *args: str, timeout: float = 2.0) -> bytes:
    """Send one RESP command; return the first reply line (b"" if the server hung up)."""
    payload = f"*{len(args)}\r\n".encode()
    for arg in args:
        raw = arg.encode()
        payload += b"$%d\r\n%s\r\n" % (len(raw), raw)
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(payload)
        reply = b""
        while not reply.endswith(b"\r\n"):
            try:
                chunk = sock.recv(4096)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            reply += chunk
    return reply.split(b"\r\n", 1)[0]


def redis_ping(port: int, timeout: float = 2.0) -> bool:
    try:
        return redis_command(port, "PING", timeout=timeout).startswith(b"+PONG")
    except OSError:
        return False


def _redis_server_pid(port: int, timeout: float = 2.0) -> int | None:
    """process_id from INFO, to tell our Redis from another one answering on the port."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            sock.sendall(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                header, _, body = data.partition(b"\r\n")
                if not header.startswith(b"$") or len(body) >= int(header[1:]):
                    break
    except (OSError, ValueError):
        return None
    match = re.search(rb"^process_id:(\d+)", data, re.MULTILINE)
    return int(match.group(1)) if match else None


def _redis_is(pid: int, port: int) -> bool:
    return redis_ping(port, timeout=1.0) and _redis_server_pid(port) == pid


class RedisServer(LocalServer):
    """A private, non-persistent Redis listening on 127.0.0.1 only."""

    name: ClassVar[str] = "Redis"
    label: ClassVar[str] = "redis"

    def __init__(
        self,
        data_dir: Path | str,
        port: int = 0,
        *,
        binary: Path | None = None,
        port_setting: str = "redis_port",
    ) -> None:
        super().__init__(data_dir, port, port_setting)
        self._binary = binary

    @property
    def binary(self) -> Path:
        if self._binary is None:
            found = find_redis_server()
            if found is None:
                raise MissingBinaries(REDIS_MISSING, ("redis-server",))
            self._binary = found
        return self._binary

    @property
    def workdir(self) -> Path:
        return self.data_dir / "redis"

    @property
    def folder(self) -> Path:
        return self.workdir

    @property
    def pidfile(self) -> Path:
        return self.data_dir / "redis.pid"

    @property
    def logfile(self) -> Path:
        return self.data_dir / "redis.log"

    @property
    def portfile(self) -> Path:
        # Redis keeps no record of its port on disk; `down` and reuse need it.
        return self.data_dir / "redis.port"

    @property
    def redis_url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def running(self) -> tuple[int, int | None] | None:
        """(pid, port) if the Redis recorded in this data dir is alive, else None."""
        pid = _read_int(self.pidfile)
        if pid is None or not is_process(pid, "redis"):
            return None
        return pid, _read_int(self.portfile)

    def start(self) -> None:
        found = self.running()
        if found is not None:
            pid, port = found
            if port is not None and _redis_is(pid, port):
                if self.requested_port not in (0, port):
                    log.warning(
                        "Redis already runs for %s on port %d, not %d; using it as it is",
                        self.data_dir,
                        port,
                        self.requested_port,
                    )
                self._port = port
                self.started = False
                log.info("Redis already running on %s:%d (pid %d); reusing it", HOST, port, pid)
                return
            log.warning("Redis (pid %d) from %s does not answer; restarting it", pid, self.data_dir)
            self.stop()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pidfile.unlink(missing_ok=True)
        port = self._choose_port()
        cmd = [str(self.binary), "--port", str(port), "--bind", HOST]
        # No persistence: dev data is disposable, and snapshots would only cost I/O.
        cmd += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        cmd += [
            "--daemonize",
            "yes",
            "--pidfile",
            str(self.pidfile),
            "--logfile",
            str(self.logfile),
        ]
        code, out = run_command(cmd, timeout=START_TIMEOUT, cwd=self.workdir)
        if code != 0:
            raise StackError(
                with_log(
                    f"redis-server did not start on port {port} (exit {code}): {out}", self.logfile
                )
            )
        self.portfile.write_text(f"{port}\n")
        self._port = port
        self.started = True
        try:
            self._wait_ready(port)
        except BaseException:
            self.stop()
            raise
        log.info("Redis running on %s:%d (data %s)", HOST, port, self.workdir)

    def _wait_ready(self, port: int) -> None:
        started = time.monotonic()
        deadline = started + START_TIMEOUT
        while True:
            pid = _read_int(self.pidfile)
            # PING alone could come from another Redis that took the port after our check.
            if pid is not None and _redis_is(pid, port):
                return
            if pid is not None and not pid_alive(pid):
                raise StackError(
                    with_log(
                        f"Redis (pid {pid}) exited while starting on port {port}", self.logfile
                    )
                )
            # The daemon writes its pid file right after binding; one that fails earlier
            # (say its port got taken after we checked) leaves no pid to watch.
            if pid is None and time.monotonic() - started > _REDIS_PIDFILE_GRACE:
                raise StackError(
                    with_log(f"Redis exited while starting on port {port}", self.logfile)
                )
            if time.monotonic() >= deadline:
                raise StackError(
                    with_log(
                        f"Redis did not answer PING on port {port} within {START_TIMEOUT:.0f} s",
                        self.logfile,
                    )
                )
            time.sleep(0.05)

    def stop(self) -> None:
        found = self.running()
        if found is not None:
            pid, port = found
            asked = False
            # Never send SHUTDOWN to whichever Redis holds the recorded port now.
            if port is not None and _redis_server_pid(port) == pid:
                try:
                    redis_command(port, "SHUTDOWN", "NOSAVE")
                    asked = True
                except OSError:
                    asked = False
            if not asked:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            if not wait_until_gone(pid, REDIS_KILL_AFTER):
                log.warning(
                    "Redis (pid %d) still running after %.0f s; killing it", pid, REDIS_KILL_AFTER
                )
                self._kill(pid, self.logfile)
            log.info("Redis stopped (data %s)", self.workdir)
        self.pidfile.unlink(missing_ok=True)
        self.portfile.unlink(missing_ok=True)
        self.started = False
        self._port = None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
