"""A private PostgreSQL cluster under a local data folder, run as a non-root user when we are
root (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import hashlib
import logging
import os
import pwd
import shlex
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from omnium_devstack.binaries import PG_MISSING, MissingBinaries, PostgresBinaries, find_postgres
from omnium_devstack.server import (
    HOST,
    START_TIMEOUT,
    LocalServer,
    StackError,
    accepts,
    is_process,
    pid_alive,
    run_command,
    wait_until_gone,
    with_log,
)

log = logging.getLogger("omnium_devstack")

DATABASE = "omnium"
PG_STOP_TIMEOUT = 30.0
FALLBACK_PG_USER = "omnium-pg"
# sockaddr_un.sun_path is 108 bytes on Linux, including the terminating NUL.
_MAX_SOCKET_PATH = 107
# Linux pids stay below PID_MAX_LIMIT (2**22), so nothing can ever run with this one.
_IMPOSSIBLE_PID = 2**22


def _clean_env() -> dict[str, str]:
    # Stray PGHOST/PGPORT/PGDATA/... from the developer's shell would redirect our tools.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGCONNECT_TIMEOUT"] = "10"
    return env


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
        code, _ = run_command(self.wrap(["test", "-x", str(path)]), timeout=30, cwd=Path("/"))
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
    code, out = run_command([useradd, "--system", "--no-create-home", FALLBACK_PG_USER], timeout=30)
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
        code, out = run_command([locale_bin, "-a"], timeout=10)
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


class PostgresServer(LocalServer):
    """A private PostgreSQL cluster in `<data_dir>/pg`, listening on 127.0.0.1 only."""

    name: ClassVar[str] = "PostgreSQL"
    label: ClassVar[str] = "postgres"

    def __init__(
        self,
        data_dir: Path | str,
        port: int = 0,
        *,
        fsync: bool = True,
        binaries: PostgresBinaries | None = None,
        port_setting: str = "pg_port",
    ) -> None:
        super().__init__(data_dir, port, port_setting)
        self.fsync = fsync
        self._binaries = binaries
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
    def folder(self) -> Path:
        return self.pgdata

    @property
    def logfile(self) -> Path:
        return self.home / "pg.log"

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
        port = self._choose_port()
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
        while not accepts(port):
            if time.monotonic() >= deadline or not pid_alive(pid):
                raise StackError(
                    with_log(
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
        code, out = run_command(who.wrap(cmd), timeout=180, cwd=self.home, env=_clean_env())
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
        code, out = run_command(
            who.wrap(cmd), timeout=START_TIMEOUT + 15, cwd=self.home, env=_clean_env()
        )
        if code != 0 or _live_postmaster(pgdata) is None:
            self._pg_ctl_stop(pgdata, who, "immediate")
            raise StackError(
                with_log(
                    f"PostgreSQL did not start on port {port} (pg_ctl exit {code}): {out}",
                    self.logfile,
                )
            )

    def _psql(self, sql: str) -> tuple[int, str]:
        # -X: a developer's ~/.psqlrc must not change the output we parse.
        cmd = [str(self.binaries.psql), "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"]
        cmd += ["-h", HOST, "-p", str(self.port), "-U", "postgres", "-d", "postgres", "-c", sql]
        return run_command(cmd, timeout=60, env=_clean_env())

    def _ensure_database(self) -> None:
        code, out = self._psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'")
        if code != 0:
            raise StackError(with_log(f"psql could not query PostgreSQL: {out}", self.logfile))
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
        return run_command(
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
            if not wait_until_gone(pid, 10):
                log.warning("PostgreSQL (pid %d) ignored a fast shutdown: %s", pid, out)
                self._pg_ctl_stop(pgdata, who, "immediate")
            if not wait_until_gone(pid, 10):
                self._kill(pid, home / "pg.log")
            log.info("PostgreSQL stopped (data %s)", pgdata)
        self.started = False
        self._port = None


def _stale_lock_pid(lockfile: Path) -> int | None:
    """The pid in a postgres lock file if it exists but is not a live postmaster."""
    try:
        pid = int(lockfile.read_text().splitlines()[0])
    except (OSError, UnicodeDecodeError, IndexError, ValueError):
        return None
    if is_process(pid, "postgres"):
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
    if found is None or not is_process(found[0], "postgres"):
        return None
    return found
