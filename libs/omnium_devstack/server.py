"""What the dev stack's private servers share: errors, ports on 127.0.0.1, pids and logs, and
the LocalServer base that PostgreSQL and Redis each fill in."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

HOST = "127.0.0.1"
START_TIMEOUT = 30.0
LOG_TAIL_LINES = 20


class StackError(RuntimeError):
    """A dev server could not be started or stopped; the message says why."""


class PortInUse(StackError):
    """The requested port is held by a program that is not this stack's server."""

    def __init__(self, port: int, what: str, setting: str) -> None:
        super().__init__(
            f"port {port} for {what} on {HOST} is already taken by another program: "
            f"change {setting} to a free port (or 0 to pick one)."
        )
        self.port = port
        self.setting = setting


# --- small process/file helpers --------------------------------------------------------------


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def with_log(message: str, logfile: Path) -> str:
    return f"{message}\n--- last {LOG_TAIL_LINES} lines of {logfile} ---\n{tail(logfile)}"


def pid_alive(pid: int) -> bool:
    """True while `pid` runs; zombies count as gone because they hold no resources."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # A daemon reparented to an init that never reaps stays a zombie forever.
    state = stat.rsplit(")", 1)[-1].split()[:1]
    return state not in (["Z"], ["X"])


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def is_process(pid: int, name: str) -> bool:
    if not pid_alive(pid):
        return False
    comm = _comm(pid)
    # Without /proc there is no cheap way to tell; trust the pid file.
    return comm is None or name in comm


def wait_until_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def run_command(
    cmd: Sequence[str],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """Run to completion; output goes through a file, not a pipe.

    Daemons started by the command (postgres under pg_ctl, redis) inherit its stdout; with a
    pipe, reading to EOF would block for as long as they live.
    """
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.run(
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                cwd=cwd,
                env=None if env is None else dict(env),
                check=False,
            )
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = 124
        out.seek(0)
        text = out.read().decode(errors="replace").strip()
    if code == 124:
        text += f"\n({Path(cmd[0]).name} did not finish within {timeout:.0f} s)"
    return code, text


# --- ports ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Servers bind with SO_REUSEADDR too, so TIME_WAIT leftovers must not count as taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def choose_port(port: int, what: str, setting: str) -> int:
    if port == 0:
        return free_port()
    if not 0 < port < 65536:
        raise StackError(f"{setting}={port} is not a TCP port (use 1-65535, or 0 to pick one).")
    if not port_is_free(port):
        raise PortInUse(port, what, setting)
    return port


def accepts(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


class LocalServer(ABC):
    """A server of the dev stack's own on 127.0.0.1, its files under `data_dir`: where it runs
    (pid and port), whether its fixed port is free, and the last resort when it will not stop."""

    name: ClassVar[str]  # for people: "PostgreSQL"
    label: ClassVar[str]  # the process, as `describe` shows it: "postgres"

    def __init__(self, data_dir: Path | str, port: int, port_setting: str) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.requested_port = port
        self.port_setting = port_setting
        self.started = False
        self._port: int | None = None

    @property
    @abstractmethod
    def folder(self) -> Path:
        """Where the server keeps its data, as messages show it."""

    @abstractmethod
    def running(self) -> tuple[int, int | None] | None:
        """(pid, port) if a server runs on this data dir, else None."""

    @property
    def port(self) -> int:
        if self._port is None:
            running = self.running()
            if running is None or running[1] is None:
                raise StackError(f"{self.name} is not running in {self.folder}")
            self._port = running[1]
        return self._port

    @property
    def pid(self) -> int | None:
        found = self.running()
        return None if found is None else found[0]

    def check_port(self) -> None:
        """Raise PortInUse now if start() would find its fixed port taken."""
        if self.running() is None and self.requested_port != 0:
            self._choose_port()

    def _choose_port(self) -> int:
        return choose_port(self.requested_port, self.name, self.port_setting)

    def describe(self) -> str:
        found = self.running()
        if found is None:
            return f"{self.label}: not running (data {self.folder})"
        pid, port = found
        where = f"{HOST}:{port}" if port is not None else "an unknown port"
        return f"{self.label}: running on {where} (pid {pid}, data {self.folder})"

    def _kill(self, pid: int, logfile: Path) -> None:
        """For a server that ignored its shutdown: SIGKILL, and it must then be gone."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not wait_until_gone(pid, 5):
            raise StackError(with_log(f"{self.name} (pid {pid}) would not stop", logfile))


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a postmaster's backends and helpers)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The command name, in brackets, may hold spaces: the parent follows the last ')'.
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found
