"""Start and stop a private PostgreSQL and Redis under a local data folder."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from omnium_devstack.binaries import (
    PG_MISSING,
    REDIS_MISSING,
    Binaries,
    MissingBinaries,
    PostgresBinaries,
    ensure_binaries,
    find_postgres,
    find_redis_server,
)

log = logging.getLogger("omnium_devstack")

HOST = "127.0.0.1"
DATABASE = "omnium"
START_TIMEOUT = 30.0
PG_STOP_TIMEOUT = 30.0
REDIS_KILL_AFTER = 10.0
_REDIS_PIDFILE_GRACE = 5.0
LOG_TAIL_LINES = 20
FALLBACK_PG_USER = "omnium-pg"
# sockaddr_un.sun_path is 108 bytes on Linux, including the terminating NUL.
_MAX_SOCKET_PATH = 107
# Linux pids stay below PID_MAX_LIMIT (2**22), so nothing can ever run with this one.
_IMPOSSIBLE_PID = 2**22


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


def _with_log(message: str, logfile: Path) -> str:
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


def _is_process(pid: int, name: str) -> bool:
    if not pid_alive(pid):
        return False
    comm = _comm(pid)
    # Without /proc there is no cheap way to tell; trust the pid file.
    return comm is None or name in comm


def _wait_until_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _clean_env() -> dict[str, str]:
    # Stray PGHOST/PGPORT/PGDATA/... from the developer's shell would redirect our tools.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGCONNECT_TIMEOUT"] = "10"
    return env


def _run(
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


def _choose_port(port: int, what: str, setting: str) -> int:
    if port == 0:
        return free_port()
    if not 0 < port < 65536:
        raise StackError(f"{setting}={port} is not a TCP port (use 1-65535, or 0 to pick one).")
    if not port_is_free(port):
        raise PortInUse(port, what, setting)
    return port


def _accepts(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def fallback_folder(data_dir: Path, prefix: str = "omnium") -> Path:
    """Where PostgreSQL's files go, as root, when its OS user cannot reach `data_dir`."""
    digest = hashlib.sha1(str(data_dir).encode(), usedforsecurity=False).hexdigest()
    return Path("/var/tmp") / f"{prefix}-{digest[:12]}"


def make_fallback(folder: Path) -> Path:
    folder.mkdir(mode=0o755, exist_ok=True)
    st = folder.stat()
    if st.st_uid != os.geteuid():
        # /var/tmp is world-writable: someone else's folder here must not hold our cluster.
        raise StackError(f"{folder} exists but belongs to uid {st.st_uid}; remove it.")
    folder.chmod(0o755)
    return folder


# --- running PostgreSQL as a non-root user --------------------------------------------------


@dataclass(frozen=True)
class _RunAs:
    """How to run a command as the OS user that owns the cluster (None: as ourselves)."""

    user: str | None
    uid: int
    gid: int

    def wrap(self, cmd: Sequence[str]) -> list[str]:
        if self.user is None:
            return list(cmd)
        runuser = shutil.which("runuser")
        if runuser:
            return [runuser, "-u", self.user, "--", *cmd]
        setpriv = shutil.which("setpriv")
        if setpriv:
            return [
                setpriv,
                f"--reuid={self.uid}",
                f"--regid={self.gid}",
                "--init-groups",
                "--",
                *cmd,
            ]
        su = shutil.which("su")
        if su:
            # System users often have /usr/sbin/nologin as their shell, hence -s.
            return [su, "-s", "/bin/sh", self.user, "-c", shlex.join(cmd)]
        raise StackError(
            "running as root, but none of runuser, setpriv or su is available to start "
            f"PostgreSQL as {self.user!r} (PostgreSQL refuses to run as root)."
        )

    def chown(self, path: Path) -> None:
        if self.user is not None:
            os.chown(path, self.uid, self.gid)

    def can_reach(self, path: Path) -> bool:
        if self.user is None:
            return True
        code, _ = _run(self.wrap(["test", "-x", str(path)]), timeout=30, cwd=Path("/"))
        return code == 0


def _current_user() -> _RunAs:
    return _RunAs(None, os.getuid(), os.getgid())


def _user(name: str) -> _RunAs | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return _RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _owner_of(path: Path) -> _RunAs:
    if os.geteuid() != 0:
        return _current_user()
    st = path.stat()
    try:
        name = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        name = None
    if st.st_uid == 0 or name is None:
        # Root cannot run the cluster and a deleted user cannot be switched to: hand it to
        # the usual user (start() chowns the files over).
        return _pg_os_user()
    return _RunAs(name, st.st_uid, st.st_gid)


def _pg_os_user() -> _RunAs:
    """The user initdb/postgres run as: ourselves, or when root `postgres` / `omnium-pg`."""
    if os.geteuid() != 0:
        return _current_user()
    for name in ("postgres", FALLBACK_PG_USER):
        found = _user(name)
        if found is not None:
            return found
    useradd = shutil.which("useradd")
    if useradd is None:
        raise StackError(
            "running as root and there is no 'postgres' OS user to run PostgreSQL as "
            f"(it refuses to run as root), and useradd is missing to create {FALLBACK_PG_USER!r}."
        )
    code, out = _run([useradd, "--system", "--no-create-home", FALLBACK_PG_USER], timeout=30)
    created = _user(FALLBACK_PG_USER)
    if created is None:
        raise StackError(f"could not create the OS user {FALLBACK_PG_USER!r} (exit {code}): {out}")
    log.info(
        "created system user %s to run PostgreSQL (it refuses to run as root)", FALLBACK_PG_USER
    )
    return created


def _chown_tree(root: Path, who: _RunAs) -> None:
    who.chown(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.chown(Path(dirpath, name), who.uid, who.gid, follow_symlinks=False)


def _c_utf8_available() -> bool:
    locale_bin = shutil.which("locale")
    if locale_bin:
        code, out = _run([locale_bin, "-a"], timeout=10)
        if code == 0:
            names = {line.strip().lower().replace("-", "") for line in out.splitlines()}
            return "c.utf8" in names
    return any(Path("/usr/lib/locale", name).exists() for name in ("C.utf8", "C.UTF-8"))


def _read_postmaster_pid(pgdata: Path) -> tuple[int, int | None] | None:
    """(pid, port) from postmaster.pid, or None when there is no such file."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    try:
        pid = int(lines[0])
    except (IndexError, ValueError):
        return None
    try:
        port: int | None = int(lines[3])
    except (IndexError, ValueError):
        port = None
    return pid, port


# --- PostgreSQL -----------------------------------------------------------------------------


class PostgresServer:
    """A private PostgreSQL cluster in `<data_dir>/pg`, listening on 127.0.0.1 only."""

    def __init__(
        self,
        data_dir: Path | str,
        port: int = 0,
        *,
        fsync: bool = True,
        binaries: PostgresBinaries | None = None,
        port_setting: str = "pg_port",
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.requested_port = port
        self.fsync = fsync
        self.port_setting = port_setting
        self.started = False
        self._binaries = binaries
        self._port: int | None = None
        self._home: Path | None = None

    # -- where things live

    @property
    def binaries(self) -> PostgresBinaries:
        if self._binaries is None:
            found = find_postgres()
            if found is None:
                raise MissingBinaries(PG_MISSING, ("postgresql",))
            self._binaries = found
        return self._binaries

    @property
    def fallback_home(self) -> Path:
        return fallback_folder(self.data_dir)

    @property
    def home(self) -> Path:
        """The folder holding pg/, pg.log and pg-sock/: the data dir, or the root fallback."""
        if self._home is not None:
            return self._home
        return self._existing_home() or self.data_dir

    @property
    def pgdata(self) -> Path:
        return self.home / "pg"

    @property
    def logfile(self) -> Path:
        return self.home / "pg.log"

    @property
    def port(self) -> int:
        if self._port is None:
            running = self.running()
            if running is None or running[1] is None:
                raise StackError(f"PostgreSQL is not running in {self.pgdata}")
            self._port = running[1]
        return self._port

    @property
    def database_url(self) -> str:
        return f"postgresql://postgres@{HOST}:{self.port}/{DATABASE}"

    def _homes(self) -> list[Path]:
        return [self.data_dir, self.fallback_home] if os.geteuid() == 0 else [self.data_dir]

    def _existing_home(self) -> Path | None:
        homes = self._homes()
        for home in homes:
            if _live_postmaster(home / "pg") is not None:
                return home
        for home in homes:
            if (home / "pg" / "PG_VERSION").is_file():
                return home
        return None

    def running(self) -> tuple[int, int | None] | None:
        """(postmaster pid, port) if a server runs on this data dir, else None."""
        for home in self._homes():
            found = _live_postmaster(home / "pg")
            if found is not None:
                return found
        return None

    @property
    def pid(self) -> int | None:
        found = self.running()
        return None if found is None else found[0]

    def check_port(self) -> None:
        """Raise PortInUse now if start() would find its fixed port taken."""
        if self.running() is None and self.requested_port != 0:
            _choose_port(self.requested_port, "PostgreSQL", self.port_setting)

    def describe(self) -> str:
        found = self.running()
        if found is None:
            return f"postgres: not running (data {self.pgdata})"
        pid, port = found
        return f"postgres: running on {HOST}:{port} (pid {pid}, data {self.pgdata})"

    # -- start

    def _choose_home(self) -> tuple[Path, _RunAs]:
        existing = self._existing_home()
        if existing is not None:
            who = _owner_of(existing / "pg")
            if who.can_reach(existing):
                return existing, who
        who = _pg_os_user()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if who.can_reach(self.data_dir):
            return self.data_dir, who
        fallback = self.fallback_home
        log.warning(
            "PostgreSQL's OS user %s cannot reach %s (a parent folder is closed to it); "
            "keeping PostgreSQL's files in %s instead",
            who.user,
            self.data_dir,
            fallback,
        )
        return make_fallback(fallback), who

    def start(self) -> None:
        found = self.running()
        if found is not None:
            self._reuse(*found)
            return
        port = _choose_port(self.requested_port, "PostgreSQL", self.port_setting)
        self._home, who = self._choose_home()
        pgdata = self.pgdata
        cluster_exists = (pgdata / "PG_VERSION").is_file()
        if cluster_exists and who.user is not None and pgdata.stat().st_uid != who.uid:
            _chown_tree(pgdata, who)
        self._prepare(pgdata, who)
        if not (pgdata / "PG_VERSION").is_file():
            self._initdb(pgdata, who)
        self._defuse_stale_locks(pgdata)
        self._pg_ctl_start(pgdata, who, port)
        self._port = port
        self.started = True
        try:
            self._ensure_database()
        except BaseException:
            self.stop()
            raise
        log.info("PostgreSQL running on %s:%d (data %s)", HOST, port, pgdata)

    def _reuse(self, pid: int, port: int | None) -> None:
        if port is None:
            raise StackError(
                f"PostgreSQL (pid {pid}) runs on {self.pgdata} but its port is unknown; "
                "stop it (python -m omnium_devstack down) and start again."
            )
        if self.requested_port not in (0, port):
            log.warning(
                "PostgreSQL already runs on %s with port %d, not %d; using it as it is",
                self.pgdata,
                port,
                self.requested_port,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not _accepts(port):
            if time.monotonic() >= deadline or not pid_alive(pid):
                raise StackError(
                    _with_log(
                        f"PostgreSQL (pid {pid}) on {self.pgdata} does not accept connections "
                        f"on port {port}",
                        self.logfile,
                    )
                )
            time.sleep(0.1)
        self._home = self.home
        self._port = port
        self.started = False
        self._ensure_database()
        log.info("PostgreSQL already running on %s:%d (pid %d); reusing it", HOST, port, pid)

    def _prepare(self, pgdata: Path, who: _RunAs) -> None:
        if not pgdata.exists():
            # initdb demands 0700 (or 0750) on the cluster folder.
            pgdata.mkdir(mode=0o700)
            who.chown(pgdata)
        self.logfile.touch(exist_ok=True)
        who.chown(self.logfile)
        sockets = self.home / "pg-sock"
        sockets.mkdir(mode=0o700, exist_ok=True)
        who.chown(sockets)

    def _initdb(self, pgdata: Path, who: _RunAs) -> None:
        if any(pgdata.iterdir()):
            raise StackError(f"{pgdata} is not empty but holds no PostgreSQL cluster; remove it.")
        locale = "--locale=C.UTF-8" if _c_utf8_available() else "--no-locale"
        cmd = [str(self.binaries.initdb), "-D", str(pgdata)]
        cmd += ["-A", "trust", "-U", "postgres", "-E", "UTF8", locale]
        if not self.fsync:
            # Flushing every freshly written catalog file is most of initdb's run time.
            cmd.append("--no-sync")
        log.info("PostgreSQL: creating a cluster in %s", pgdata)
        code, out = _run(who.wrap(cmd), timeout=180, cwd=self.home, env=_clean_env())
        if code != 0:
            raise StackError(f"initdb failed (exit {code}) for {pgdata}:\n{out}")

    def _defuse_stale_locks(self, pgdata: Path) -> None:
        """Make crash leftovers that postgres would mistake for a live server harmless.

        postgres treats a lock file as stale only when its pid is gone entirely, so a
        postmaster that died as a zombie (under an init that never reaps) or whose pid was
        reused blocks every restart.
        """
        pidfile = pgdata / "postmaster.pid"
        pid = _stale_lock_pid(pidfile)
        if pid is not None:
            log.warning(
                "%s names pid %d, which is not PostgreSQL; treating it as stale", pidfile, pid
            )
            # Rewriting rather than deleting keeps the shared-memory key, so postgres still
            # refuses to start beside orphaned backends of the dead server.
            lines = pidfile.read_text().splitlines(keepends=True)
            lines[0] = f"{_IMPOSSIBLE_PID}\n"
            pidfile.write_text("".join(lines))
        sockets = self.home / "pg-sock"
        if sockets.is_dir():
            for lock in sockets.glob(".s.PGSQL.*.lock"):
                if _stale_lock_pid(lock) is not None:
                    lock.unlink(missing_ok=True)

    def _pg_ctl_start(self, pgdata: Path, who: _RunAs, port: int) -> None:
        sockets = self.home / "pg-sock"
        socket_dir = str(sockets)
        if len(f"{socket_dir}/.s.PGSQL.{port}") > _MAX_SOCKET_PATH:
            # Everything here talks TCP; a too-long socket path would stop the server cold.
            log.info("PostgreSQL: %s is too long for a Unix socket; TCP only", socket_dir)
            socket_dir = ""
        options = " ".join(
            [
                f"-p {port}",
                f"-k {shlex.quote(socket_dir)}",
                f"-c listen_addresses={HOST}",
                f"-c fsync={'on' if self.fsync else 'off'}",
                "-c synchronous_commit=on",
                "-c max_connections=200",
                "-c shared_buffers=256MB",
            ]
        )
        cmd = [str(self.binaries.pg_ctl), "-D", str(pgdata), "-l", str(self.logfile)]
        cmd += ["-o", options, "-w", "-t", str(int(START_TIMEOUT)), "start"]
        code, out = _run(who.wrap(cmd), timeout=START_TIMEOUT + 15, cwd=self.home, env=_clean_env())
        if code != 0 or _live_postmaster(pgdata) is None:
            self._pg_ctl_stop(pgdata, who, "immediate")
            raise StackError(
                _with_log(
                    f"PostgreSQL did not start on port {port} (pg_ctl exit {code}): {out}",
                    self.logfile,
                )
            )

    def _psql(self, sql: str) -> tuple[int, str]:
        # -X: a developer's ~/.psqlrc must not change the output we parse.
        cmd = [str(self.binaries.psql), "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"]
        cmd += ["-h", HOST, "-p", str(self.port), "-U", "postgres", "-d", "postgres", "-c", sql]
        return _run(cmd, timeout=60, env=_clean_env())

    def _ensure_database(self) -> None:
        code, out = self._psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'")
        if code != 0:
            raise StackError(_with_log(f"psql could not query PostgreSQL: {out}", self.logfile))
        if out.strip() == "1":
            return
        code, out = self._psql(f"CREATE DATABASE {DATABASE}")
        # A second starter racing us may have created it in between.
        if code != 0 and "already exists" not in out:
            raise StackError(f"could not create database {DATABASE!r}: {out}")

    # -- stop

    def _pg_ctl_stop(self, pgdata: Path, who: _RunAs, mode: str) -> tuple[int, str]:
        cmd = [str(self.binaries.pg_ctl), "-D", str(pgdata), "-m", mode]
        cmd += ["-w", "-t", str(int(PG_STOP_TIMEOUT)), "stop"]
        return _run(
            who.wrap(cmd), timeout=PG_STOP_TIMEOUT + 15, cwd=pgdata.parent, env=_clean_env()
        )

    def stop(self, mode: str = "fast") -> None:
        """Fast shutdown (rolls back open transactions); escalates if that does not finish.

        `mode="immediate"` stops as a crash would (no checkpoint; recovery at the next start),
        which is what the outage tests and drills need.
        """
        for home in self._homes():
            pgdata = home / "pg"
            found = _live_postmaster(pgdata)
            if found is None:
                continue
            pid = found[0]
            who = _owner_of(pgdata)
            _, out = self._pg_ctl_stop(pgdata, who, mode)
            if not _wait_until_gone(pid, 10):
                log.warning("PostgreSQL (pid %d) ignored a fast shutdown: %s", pid, out)
                self._pg_ctl_stop(pgdata, who, "immediate")
            if not _wait_until_gone(pid, 10):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                _wait_until_gone(pid, 5)
            if pid_alive(pid):
                raise StackError(
                    _with_log(f"PostgreSQL (pid {pid}) would not stop", home / "pg.log")
                )
            log.info("PostgreSQL stopped (data %s)", pgdata)
        self.started = False
        self._port = None


def _stale_lock_pid(lockfile: Path) -> int | None:
    """The pid in a postgres lock file if it exists but is not a live postmaster."""
    try:
        pid = int(lockfile.read_text().splitlines()[0])
    except (OSError, UnicodeDecodeError, IndexError, ValueError):
        return None
    if _is_process(pid, "postgres"):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # postgres clears these by itself
    except PermissionError:
        pass
    return pid


def _live_postmaster(pgdata: Path) -> tuple[int, int | None] | None:
    found = _read_postmaster_pid(pgdata)
    if found is None or not _is_process(found[0], "postgres"):
        return None
    return found


# --- Redis ----------------------------------------------------------------------------------


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


class RedisServer:
    """A private, non-persistent Redis listening on 127.0.0.1 only."""

    def __init__(
        self,
        data_dir: Path | str,
        port: int = 0,
        *,
        binary: Path | None = None,
        port_setting: str = "redis_port",
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.requested_port = port
        self.port_setting = port_setting
        self.started = False
        self._binary = binary
        self._port: int | None = None

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
    def port(self) -> int:
        if self._port is None:
            running = self.running()
            if running is None or running[1] is None:
                raise StackError(f"Redis is not running in {self.data_dir}")
            self._port = running[1]
        return self._port

    @property
    def redis_url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def _read_pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def _read_port(self) -> int | None:
        try:
            return int(self.portfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def running(self) -> tuple[int, int | None] | None:
        """(pid, port) if the Redis recorded in this data dir is alive, else None."""
        pid = self._read_pid()
        if pid is None or not _is_process(pid, "redis"):
            return None
        return pid, self._read_port()

    @property
    def pid(self) -> int | None:
        found = self.running()
        return None if found is None else found[0]

    def check_port(self) -> None:
        """Raise PortInUse now if start() would find its fixed port taken."""
        if self.running() is None and self.requested_port != 0:
            _choose_port(self.requested_port, "Redis", self.port_setting)

    def describe(self) -> str:
        found = self.running()
        if found is None:
            return f"redis: not running (data {self.workdir})"
        pid, port = found
        where = f"{HOST}:{port}" if port is not None else "an unknown port"
        return f"redis: running on {where} (pid {pid}, data {self.workdir})"

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
        port = _choose_port(self.requested_port, "Redis", self.port_setting)
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
        code, out = _run(cmd, timeout=START_TIMEOUT, cwd=self.workdir)
        if code != 0:
            raise StackError(
                _with_log(
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
            pid = self._read_pid()
            # PING alone could come from another Redis that took the port after our check.
            if pid is not None and _redis_is(pid, port):
                return
            if pid is not None and not pid_alive(pid):
                raise StackError(
                    _with_log(
                        f"Redis (pid {pid}) exited while starting on port {port}", self.logfile
                    )
                )
            # The daemon writes its pid file right after binding; one that fails earlier
            # (say its port got taken after we checked) leaves no pid to watch.
            if pid is None and time.monotonic() - started > _REDIS_PIDFILE_GRACE:
                raise StackError(
                    _with_log(f"Redis exited while starting on port {port}", self.logfile)
                )
            if time.monotonic() >= deadline:
                raise StackError(
                    _with_log(
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
            if not _wait_until_gone(pid, REDIS_KILL_AFTER):
                log.warning(
                    "Redis (pid %d) still running after %.0f s; killing it", pid, REDIS_KILL_AFTER
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                _wait_until_gone(pid, 5)
            if pid_alive(pid):
                raise StackError(_with_log(f"Redis (pid {pid}) would not stop", self.logfile))
            log.info("Redis stopped (data %s)", self.workdir)
        self.pidfile.unlink(missing_ok=True)
        self.portfile.unlink(missing_ok=True)
        self.started = False
        self._port = None


# --- both together --------------------------------------------------------------------------


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
        return {"OMNIUM_DATABASE_URL": self.database_url, "OMNIUM_REDIS_URL": self.redis_url}

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
