"""A PostgreSQL pair under Patroni with etcd, on one machine: the HA profile's database.

etcd (one member, or three for the fault drill: omnium_devstack.etcd) holds the leader key; two
Patroni nodes each run PostgreSQL 15. The first leads; the second copies it and streams from it
as the synchronous standby, so a commit is answered once the standby has it. Services reach the
leader through HAProxy, which asks Patroni.

Patroni talks to etcd's v2 API: Debian's Patroni 3.0.2 renews an expired leader key on etcd3
with an unconditional put, so a primary that wakes from a freeze longer than the TTL takes the
key back from the node promoted meanwhile, which demotes itself and loses what it saved (fixed
upstream in 3.0.3); on v2 the renewal is a compare-and-swap on the holder, and fails. Patroni
and PostgreSQL run as `postgres` when we are root; etcd runs as whoever we are.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omnium_devstack.binaries import MissingBinaries, find_postgres
from omnium_devstack.etcd import Etcd, http_json, kill, start_process, stop_process
from omnium_devstack.ha_route import RoutedNode, WriteRoute
from omnium_devstack.postgres import (
    DATABASE,
    _clean_env,
    _pg_os_user,
    _RunAs,
    fallback_folder,
    make_fallback,
)
from omnium_devstack.relay import Relay
from omnium_devstack.server import (
    HOST,
    StackError,
    child_pids,
    free_port,
    pid_alive,
    run_command,
    tail,
    wait_until_gone,
)

log = logging.getLogger("omnium_devstack")

PATRONI_MISSING = (
    "Patroni (patroni) is not on this machine: install the Debian package 'patroni' "
    "(sudo apt-get install patroni); the HA profile runs PostgreSQL under it."
)
ETCD_MISSING = (
    "etcd (etcd) is not on this machine: install the Debian package 'etcd-server' "
    "(sudo apt-get install etcd-server); Patroni keeps its leader key there."
)
SCOPE = "omnium"
START_TIMEOUT = 90.0


@dataclass(frozen=True)
class HaTimings:
    """Patroni's DCS timings (ttl ≥ loop_wait + 2 × retry_timeout).

    ttl 14 s: a leader that stops renewing its key (killed, frozen) is replaced 12-14 s after
    its last renewal, so the writes stop for less than the 20 s a failover may cost (the key,
    then the promotion, HAProxy's next check and the consoles' retry: 23-25 s with a 20 s
    TTL). It is still seven renewals (`loop_wait`) long, so a leader on a busy machine that
    misses a few keeps its key, and it is more than `loop_wait` + 2 × `retry_timeout` (12 s),
    which Patroni requires: a leader that cannot reach etcd demotes itself before its key can
    expire. A shorter TTL fails over on shorter hiccups; Patroni's own default is 30 s.
    """

    ttl: int = 14
    loop_wait: int = 2
    retry_timeout: int = 5
    # Not strict: with the standby gone the primary goes on alone (see docs/high-availability.md,
    # "When the database fails over"); Patroni then promotes no node that was not in sync.
    strict: bool = False


def find_patroni() -> Path | None:
    return Path(found) if (found := shutil.which("patroni")) else None


def find_etcd() -> Path | None:
    return Path(found) if (found := shutil.which("etcd")) else None


def require_ha_binaries() -> tuple[Path, Path]:
    """Patroni and etcd, or MissingBinaries naming every package to install."""
    messages: list[str] = []
    packages: list[str] = []
    patroni, etcd = find_patroni(), find_etcd()
    if patroni is None:
        messages.append(PATRONI_MISSING)
        packages.append("patroni")
    if etcd is None:
        messages.append(ETCD_MISSING)
        packages.append("etcd-server")
    if patroni is None or etcd is None:
        raise MissingBinaries(" ".join(messages), tuple(packages))
    return patroni, etcd


@dataclass
class PatroniNode:
    """One Patroni agent and the PostgreSQL it runs."""

    name: str
    home: Path
    pg_port: int
    rest_port: int
    who: _RunAs
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    # With `cuttable`: this Patroni's only way to etcd, which a drill can partition.
    relay: Relay | None = field(default=None, repr=False)

    @property
    def pgdata(self) -> Path:
        return self.home / "pg"

    @property
    def config(self) -> Path:
        return self.home / "patroni.yml"

    @property
    def logfile(self) -> Path:
        return self.home / "patroni.log"

    @property
    def rest_url(self) -> str:
        return f"http://{HOST}:{self.rest_port}"

    def postmaster_pid(self) -> int | None:
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if pid_alive(pid) else None

    def patroni_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> dict[str, Any] | None:
        """Patroni's own view of this node (`GET /patroni`), None when it does not answer."""
        try:
            found: dict[str, Any] = http_json(f"{self.rest_url}/patroni")
        except (OSError, ValueError):
            return None
        return found


class PatroniCluster:
    """etcd and two Patroni nodes under one data folder; `start()`, then `stop()`.

    `etcd_members` is 1 or 3 (`etcd_ports` are then the first member's; the others take free
    ports). `cuttable` puts a relay (omnium_devstack.relay) between each Patroni and every etcd
    member, and tells Patroni the relays are proxies, so it never finds the members' own
    addresses and a cut relay partitions that Patroni from etcd alone.
    """

    def __init__(
        self,
        data_dir: Path | str,
        *,
        pg_ports: tuple[int, int] = (0, 0),
        rest_ports: tuple[int, int] = (0, 0),
        etcd_ports: tuple[int, int] = (0, 0),
        etcd_members: int = 1,
        cuttable: bool = False,
        route_port: int = 0,
        fsync: bool = True,
        timings: HaTimings | None = None,
    ) -> None:
        # Before anything else, so a machine without them is told what to install.
        patroni, etcd = require_ha_binaries()
        if etcd_members not in (1, 3):
            raise ValueError(
                f"etcd_members is 1 or 3 (a quorum that survives losing one), not {etcd_members}"
            )
        self.data_dir = Path(data_dir).resolve()
        self.fsync = fsync
        self.timings = timings or HaTimings()
        self.who = _pg_os_user() if os.geteuid() == 0 else _RunAs(None, os.getuid(), os.getgid())
        self.home = self._choose_home()
        pg = find_postgres()
        if pg is None:
            raise MissingBinaries(
                "PostgreSQL's server is not on this machine: install the Debian package "
                "'postgresql' (sudo apt-get install postgresql).",
                ("postgresql",),
            )
        self.patroni = patroni
        self.bindir = pg.bindir
        self.psql = pg.psql

        def port(p: int) -> int:
            return p or free_port()

        first = (port(etcd_ports[0]), port(etcd_ports[1]))
        others = [(free_port(), free_port()) for _ in range(etcd_members - 1)]
        self.etcd = Etcd(self.home, etcd, [first, *others])
        self.cuttable = cuttable
        self.nodes = [
            PatroniNode(
                f"pg{n + 1}",
                self.home / f"pg{n + 1}",
                port(pg_ports[n]),
                port(rest_ports[n]),
                self.who,
            )
            for n in range(2)
        ]
        if cuttable:
            for node in self.nodes:
                node.relay = Relay(node.name, [m.client_port for m in self.etcd.members])
        self.route = WriteRoute(
            self.home, [RoutedNode(n.name, n.pg_port, n.rest_port) for n in self.nodes], route_port
        )

    def _choose_home(self) -> Path:
        """The data folder, or as root a folder under /var/tmp that `postgres` can reach."""
        if self.who.user is None:
            return self.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.who.can_reach(self.data_dir):
            return self.data_dir
        return make_fallback(fallback_folder(self.data_dir, "omnium-ha"))

    # -- addresses

    @property
    def database_url(self) -> str:
        """The one DSN every service uses: HAProxy, to the node Patroni says leads (and
        asyncpg still refuses a server that is not read-write)."""
        return (
            f"postgresql://postgres@{HOST}:{self.route.port}/{DATABASE}"
            "?target_session_attrs=read-write"
        )

    def node_url(self, node: PatroniNode, database: str = DATABASE) -> str:
        return f"postgresql://postgres@{HOST}:{node.pg_port}/{database}"

    def node(self, name: str) -> PatroniNode:
        return next(n for n in self.nodes if n.name == name)

    # -- Patroni's configuration

    def _write_config(self, node: PatroniNode) -> None:
        node.home.mkdir(parents=True, exist_ok=True)
        self.who.chown(node.home)
        sockets = node.home / "sock"
        sockets.mkdir(mode=0o700, exist_ok=True)
        self.who.chown(sockets)
        t = self.timings
        parameters = {
            "synchronous_commit": "on",
            "fsync": "on" if self.fsync else "off",
            "max_connections": 200,
            "shared_buffers": "256MB",
            "wal_level": "replica",
            "hot_standby": "on",
            "wal_log_hints": "on",
            "max_wal_senders": 10,
            "max_replication_slots": 10,
            "wal_keep_size": "256MB",
            # A standby that stops answering (hung, its walreceiver stopped) holds every commit
            # until its link is cut; the default 60 s would stall the writes for a minute. Cut
            # after 10 s, Patroni (not strict) lets the primary go on alone until the standby
            # streams again, so a stalled standby costs the writes no more than a failover.
            "wal_sender_timeout": "10s",
        }
        config = {
            "scope": SCOPE,
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"{HOST}:{node.rest_port}",
                "connect_address": f"{HOST}:{node.rest_port}",
            },
            "etcd": self._etcd_config(node),
            "bootstrap": {
                "dcs": {
                    "ttl": t.ttl,
                    "loop_wait": t.loop_wait,
                    "retry_timeout": t.retry_timeout,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "synchronous_mode_strict": t.strict,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": parameters,
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}, {"auth": "trust"}],
                "pg_hba": [
                    "local all all trust",
                    f"host all all {HOST}/32 trust",
                    f"host replication all {HOST}/32 trust",
                ],
            },
            "postgresql": {
                "listen": f"{HOST}:{node.pg_port}",
                "connect_address": f"{HOST}:{node.pg_port}",
                "data_dir": str(node.pgdata),
                "bin_dir": str(self.bindir),
                "pgpass": str(node.home / "pgpass"),
                # The local dev pair trusts loopback; passwords are required by Patroni's schema.
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(sockets)},
                # A spread checkpoint would hold the standby's copy for minutes.
                "basebackup": [{"checkpoint": "fast"}],
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
        }
        # JSON is YAML: no YAML writer needed.
        node.config.write_text(json.dumps(config, indent=2))
        self.who.chown(node.config)
        node.logfile.touch(exist_ok=True)
        self.who.chown(node.logfile)

    def _etcd_config(self, node: PatroniNode) -> dict[str, Any]:
        """Every etcd member; through the node's relay (as proxies, so Patroni asks etcd for no
        other address) when the cluster is cuttable."""
        if node.relay is None:
            return {"hosts": [f"{HOST}:{m.client_port}" for m in self.etcd.members]}
        if not node.relay.ports:
            raise StackError(f"{node.name}'s relay to etcd is not running")
        return {"hosts": [f"{HOST}:{p}" for p in node.relay.ports], "use_proxies": True}

    def _as_pg_user(self, cmd: list[str]) -> list[str]:
        """The command run as `postgres` by exec, not by a forking wrapper: the pid we hold
        must be Patroni's own, so a drill's kill -9 reaches it."""
        setpriv = shutil.which("setpriv")
        if self.who.user is None:
            return cmd
        if setpriv is None:
            raise StackError(
                "running as root, but setpriv (util-linux) is missing to start Patroni"
            )
        ids = [f"--reuid={self.who.uid}", f"--regid={self.who.gid}", "--init-groups"]
        return [setpriv, *ids, "--", *cmd]

    # -- start and stop

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.etcd.start()
        try:
            for node in self.nodes:
                if node.relay is not None:
                    node.relay.start()
            first = self.nodes[0]
            self.start_node(first.name)
            self.wait_for_leader(START_TIMEOUT)
            self._ensure_database()
            for node in self.nodes[1:]:
                self.start_node(node.name)
            for node in self.nodes[1:]:
                self.wait_streaming(node.name, START_TIMEOUT)
            self.wait_sync_standby(START_TIMEOUT)
            self.route.start()
            self.route.wait_routes_to(self.wait_for_leader(START_TIMEOUT), START_TIMEOUT)
        except BaseException:
            self.stop()
            raise

    def start_node(self, name: str) -> None:
        node = self.node(name)
        if node.patroni_alive():
            return
        self._write_config(node)
        node.proc = start_process(
            self._as_pg_user([str(self.patroni), str(node.config)]), node.logfile
        )

    def stop(self) -> None:
        """Stop the route, the standby, then the leader, then etcd (Patroni needs it to stop)."""
        self.route.stop()
        for node in self.nodes:
            if node.relay is not None and node.relay.is_cut:
                node.relay.heal()
        leader = self.leader_name()
        ordered = sorted(self.nodes, key=lambda n: n.name == leader)
        for node in ordered:
            stop_process(node.proc, 60)
            pid = node.postmaster_pid()
            if pid is not None:
                # Patroni stops its PostgreSQL; one left behind by a killed agent is ours to end.
                code, _ = run_command(
                    self.who.wrap(
                        [str(self.bindir / "pg_ctl"), "-D", str(node.pgdata), "-m", "fast", "stop"]
                    ),
                    timeout=60,
                    cwd=Path("/"),
                    env=_clean_env(),
                )
                if code != 0 or not wait_until_gone(pid, 10):
                    kill(pid, signal.SIGKILL)
        for node in self.nodes:
            if node.relay is not None:
                node.relay.stop()
        self.etcd.stop()

    # -- what the drills and tests do to it

    def kill_node(self, name: str) -> None:
        """kill -9 a node's Patroni and its postmaster together, as when a machine is lost."""
        node = self.node(name)
        postmaster = node.postmaster_pid()
        if node.proc is not None:
            kill(node.proc.pid, signal.SIGKILL)
            node.proc.wait(10)
        kill(postmaster, signal.SIGKILL)
        if postmaster is not None:
            wait_until_gone(postmaster, 10)

    def kill_patroni(self, name: str) -> None:
        """kill -9 a node's Patroni alone: its PostgreSQL runs on, still a primary if it was."""
        node = self.node(name)
        if node.proc is not None:
            kill(node.proc.pid, signal.SIGKILL)
            node.proc.wait(10)

    def freeze_node(self, name: str) -> list[int]:
        """SIGSTOP a node's Patroni, postmaster and backends (its machine hangs: the kernel
        still acknowledges what is sent, nothing answers); the pids, for SIGCONT later."""
        node, pids = self.node(name), []
        if node.proc is not None and node.proc.poll() is None:
            pids.append(node.proc.pid)
        if (postmaster := node.postmaster_pid()) is not None:
            pids += [postmaster, *child_pids(postmaster)]
        for pid in pids:
            kill(pid, signal.SIGSTOP)
        return pids

    def cut_from_etcd(self, name: str) -> None:
        """Partition a node's Patroni from every etcd member; all else keeps its links."""
        self._relay(name).cut()

    def heal_etcd_link(self, name: str) -> None:
        self._relay(name).heal()

    def _relay(self, name: str) -> Relay:
        relay = self.node(name).relay
        if relay is None:
            raise StackError("this HA profile has no relays to etcd: start it with cuttable=True")
        return relay

    def kill_postmaster(self, name: str) -> None:
        """kill -9 the postmaster alone: Patroni restarts it in place."""
        pid = self.node(name).postmaster_pid()
        if pid is None:
            raise StackError(f"node {name} runs no PostgreSQL")
        kill(pid, signal.SIGKILL)
        wait_until_gone(pid, 10)

    # -- what it looks like

    def members(self) -> list[dict[str, Any]]:
        """Patroni's `/cluster` view from any node that answers: name, role, state, lag."""
        for node in self.nodes:
            if not node.patroni_alive():
                continue
            with contextlib.suppress(OSError, ValueError):
                found: list[dict[str, Any]] = http_json(f"{node.rest_url}/cluster")["members"]
                return found
        return []

    def leader_name(self) -> str | None:
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return str(member["name"])
        return None

    def _wait(self, what: str, timeout: float, check: Any) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found:
                return found
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n.logfile} ---\n{tail(n.logfile)}" for n in self.nodes)
                raise StackError(f"{what} within {timeout:.0f} s; members {self.members()}\n{logs}")
            time.sleep(0.2)

    def wait_for_leader(self, timeout: float, not_name: str | None = None) -> str:
        """The leader's name once one accepts writes (and is not `not_name`)."""

        def check() -> str | None:
            name = self.leader_name()
            if name is None or name == not_name:
                return None
            status = self.node(name).status()
            return name if status and status.get("role") in ("master", "primary") else None

        found: str = self._wait("no node led", timeout, check)
        return found

    def wait_streaming(self, name: str, timeout: float) -> None:
        def check() -> bool:
            return any(
                m["name"] == name
                and m.get("role") in ("replica", "sync_standby")
                and m.get("state") in ("streaming", "running")
                and self.node(name).status() is not None
                and (self.node(name).status() or {}).get("replication_state", "streaming")
                == "streaming"
                for m in self.members()
            )

        self._wait(f"{name} did not stream from the leader", timeout, check)

    def wait_sync_standby(self, timeout: float) -> str:
        def check() -> str | None:
            for m in self.members():
                if m.get("role") == "sync_standby":
                    return str(m["name"])
            return None

        found: str = self._wait("no node became the synchronous standby", timeout, check)
        return found

    def describe(self) -> list[str]:
        lines = [
            f"etcd: {', '.join(self.etcd.urls)} (data {self.etcd.members[0].data})",
            f"writes: HAProxy {HOST}:{self.route.port}, to the node whose Patroni answers "
            f"/primary (now {sorted(self.route.servers_up() or [])})",
        ]
        by_name = {m["name"]: m for m in self.members()}
        for node in self.nodes:
            m = by_name.get(node.name, {})
            lines.append(
                f"{node.name}: postgres {HOST}:{node.pg_port}, patroni {node.rest_url}, "
                f"{m.get('role', 'down')} ({m.get('state', 'not answering')})"
            )
        return lines

    def _ensure_database(self) -> None:
        leader = self.node(self.wait_for_leader(START_TIMEOUT))
        base = [str(self.psql), "-X", "-q", "-t", "-A", "-h", HOST, "-p", str(leader.pg_port)]
        base += ["-U", "postgres", "-d", "postgres", "-c"]
        code, out = run_command(
            [*base, f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'"],
            timeout=60,
            env=_clean_env(),
        )
        if code == 0 and out.strip() == "1":
            return
        code, out = run_command(
            [*base, f"CREATE DATABASE {DATABASE}"], timeout=60, env=_clean_env()
        )
        if code != 0 and "already exists" not in out:
            raise StackError(f"could not create database {DATABASE!r} on {leader.name}: {out}")


@contextlib.contextmanager
def running_cluster(data_dir: Path | str, **kwargs: Any) -> Iterator[PatroniCluster]:
    cluster = PatroniCluster(data_dir, **kwargs)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
