"""etcd for Patroni's leader key on one machine: one member, or three that survive losing one.

One member is enough for the dev profile; the fault drill runs three so that losing one (the
raft leader, even) is a fault the pair must ride through without a failover. Members are
started together (each waits for a quorum of its peers), and a cluster counts as whole once
every member says it is healthy and all name the same raft leader. The v2 API is served
(`--enable-v2`): Patroni keeps its key there (see omnium_devstack.ha).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omnium_devstack.postgres import _clean_env
from omnium_devstack.server import HOST, StackError, tail

START_TIMEOUT = 60.0


def http_json(url: str, timeout: float = 1.0, body: dict[str, Any] | None = None) -> Any:
    """GET `url` (POST `body` as JSON when given) and read the JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


def start_process(cmd: list[str], logfile: Path) -> subprocess.Popen[bytes]:
    with logfile.open("ab") as out:
        # Own session: Ctrl-C in the terminal reaches the launcher, which stops these in order.
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_clean_env(),
            cwd="/",
            start_new_session=True,
        )


def kill(pid: int | None, sig: signal.Signals) -> None:
    if pid is not None and pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    if proc is None or proc.poll() is not None:
        return
    kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill(proc.pid, signal.SIGKILL)
        proc.wait(5)


@dataclass
class EtcdMember:
    """One etcd process: its name, data folder, log and loopback ports."""

    name: str
    data: Path
    logfile: Path
    client_port: int
    peer_port: int
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{HOST}:{self.peer_port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def healthy(self) -> bool:
        """etcd's own /health: true only while this member sees a leader and a quorum."""
        try:
            return bool(http_json(f"{self.url}/health").get("health") == "true")
        except (OSError, ValueError, AttributeError):
            return False

    def status(self) -> tuple[str, str] | None:
        """(this member's id, the raft leader's id) from etcd's maintenance API, or None."""
        try:
            found = http_json(f"{self.url}/v3/maintenance/status", body={})
            return str(found["header"]["member_id"]), str(found["leader"])
        except (OSError, ValueError, KeyError, TypeError):
            return None


class Etcd:
    """`members` etcd processes on loopback under `home`; `start()`, then `stop()`.

    `ports` gives the first member's (client, peer) ports (0: any free one); the others always
    take free ports. A single member keeps the layout the dev profile has always had
    (`home/etcd`, `home/etcd.log`), so an existing dev data folder starts as before.
    """

    def __init__(
        self, home: Path, binary: Path, ports: list[tuple[int, int]], *, timeout: float = 60.0
    ) -> None:
        if len(ports) not in (1, 3):
            raise ValueError(f"etcd runs one member or three, not {len(ports)}")
        self.home = home
        self.binary = binary
        self.timeout = timeout
        if len(ports) == 1:
            client, peer = ports[0]
            self.members = [
                EtcdMember("omnium-etcd", home / "etcd", home / "etcd.log", client, peer)
            ]
        else:
            self.members = [
                EtcdMember(f"etcd{n}", home / f"etcd{n}", home / f"etcd{n}.log", c, p)
                for n, (c, p) in enumerate(ports, start=1)
            ]

    @property
    def url(self) -> str:
        """The first member's client URL (tools that want one address)."""
        return self.members[0].url

    @property
    def urls(self) -> list[str]:
        return [m.url for m in self.members]

    @property
    def logfile(self) -> Path:
        return self.members[0].logfile

    def member(self, name: str) -> EtcdMember:
        for m in self.members:
            if m.name == name:
                return m
        raise StackError(f"no etcd member {name!r}; members: {[m.name for m in self.members]}")

    # -- start and stop

    def _command(self, member: EtcdMember) -> list[str]:
        cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        return [
            str(self.binary),
            f"--name={member.name}",
            f"--data-dir={member.data}",
            f"--listen-client-urls={member.url}",
            f"--advertise-client-urls={member.url}",
            f"--listen-peer-urls={member.peer_url}",
            f"--initial-advertise-peer-urls={member.peer_url}",
            f"--initial-cluster={cluster}",
            f"--initial-cluster-token=omnium-{self.members[0].peer_port}",
            # Ignored once the data folder exists: a member started again rejoins as itself.
            "--initial-cluster-state=new",
            "--enable-v2=true",
        ]

    def _launch(self, member: EtcdMember) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        member.proc = start_process(self._command(member), member.logfile)

    def start(self) -> None:
        """Every member started at once (each waits for its peers), then healthy and agreed
        on one leader; a member that exits or a cluster not whole in time stops them all."""
        try:
            for member in self.members:
                self._launch(member)
            self.wait_whole(self.timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for member in self.members:
            stop_process(member.proc, 10)

    # -- what the drill does to it

    def kill_member(self, name: str) -> None:
        """kill -9 of one member, as when its machine is lost."""
        member = self.member(name)
        if member.proc is not None:
            kill(member.proc.pid, signal.SIGKILL)
            member.proc.wait(10)

    def start_member(self, name: str) -> None:
        """A stopped member started again on its own data: it rejoins as itself."""
        member = self.member(name)
        if not member.alive():
            self._launch(member)

    # -- what it looks like

    def leader(self) -> str | None:
        """The raft leader's member name, as the members that answer say (None: no answer)."""
        ids: dict[str, str] = {}
        leaders: set[str] = set()
        for member in self.members:
            if member.alive() and (found := member.status()) is not None:
                ids[found[0]] = member.name
                leaders.add(found[1])
        if len(leaders) != 1:
            return None
        return ids.get(leaders.pop())

    def whole(self) -> bool:
        """Every member alive, healthy and naming the same leader."""
        return all(m.alive() and m.healthy() for m in self.members) and self.leader() is not None

    def wait_whole(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.whole():
            gone = [m for m in self.members if m.proc is not None and m.proc.poll() is not None]
            if gone or time.monotonic() > deadline:
                why = f"{gone[0].name} exited" if gone else f"not whole within {timeout:.0f} s"
                logs = "\n".join(f"--- {m.logfile} ---\n{tail(m.logfile)}" for m in self.members)
                raise StackError(f"etcd ({', '.join(self.urls)}): {why}\n{logs}")
            time.sleep(0.1)
