"""The HA profile's write route: HAProxy sends database connections only where Patroni says.

Every service reaches the pair through one address, HAProxy's, which asks each node's Patroni
`GET /primary` every second (200 only from the node that holds the leader key and runs as the
primary) and sends connections only to that node: the shape Patroni's own docs recommend. A
node whose Patroni dies, hangs or loses the key is marked down after two failed checks, and
`on-marked-down shutdown-sessions` cuts the connections it already had, so no service goes on
writing to a primary that is no longer the leader (docs/high-availability.md, "Writes only
where Patroni says").
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omnium_devstack.binaries import MissingBinaries
from omnium_devstack.server import HOST, StackError, free_port, tail

HAPROXY_MISSING = (
    "HAProxy (haproxy) is not on this machine: install the Debian package 'haproxy' "
    "(sudo apt-get install haproxy); the HA profile routes database writes through it."
)
# Checks every second, two failures mark a node down: a node whose Patroni is gone stops
# taking connections within about 2 s (3 s with a check that hangs to its timeout), far inside
# the leader key's TTL, so the old primary is fenced before any other node can be promoted.
CHECK_EVERY_SECONDS = 1
CHECK_FAILURES = 2
CHECK_TIMEOUT_SECONDS = 1
FENCE_SECONDS = CHECK_EVERY_SECONDS * CHECK_FAILURES + CHECK_TIMEOUT_SECONDS


@dataclass(frozen=True)
class RoutedNode:
    name: str
    pg_port: int
    rest_port: int


def route_config(port: int, stats_port: int, nodes: Sequence[RoutedNode]) -> str:
    lines = [
        "# Written by the HA profile (libs/omnium_devstack/ha_route.py); not edited.",
        "global",
        "  maxconn 2000",
        "defaults",
        "  mode tcp",
        "  timeout connect 2s",
        # LISTEN connections and pooled ones sit idle for hours: never cut for being quiet.
        "  timeout client 24h",
        "  timeout server 24h",
        f"  timeout check {CHECK_TIMEOUT_SECONDS}s",
        "  option clitcpka",
        "  option srvtcpka",
        "listen stats",
        "  mode http",
        f"  bind {HOST}:{stats_port}",
        "  stats enable",
        "  stats uri /stats",
        "listen primary",
        f"  bind {HOST}:{port}",
        "  option httpchk GET /primary",
        "  http-check expect status 200",
        f"  default-server inter {CHECK_EVERY_SECONDS}s fall {CHECK_FAILURES} rise 1 "
        "on-marked-down shutdown-sessions",
    ]
    lines += [
        f"  server {n.name} {HOST}:{n.pg_port} maxconn 500 check port {n.rest_port}" for n in nodes
    ]
    return "\n".join(lines) + "\n"


class WriteRoute:
    """One HAProxy in front of the pair, listening on `port`; `start()`, then `stop()`."""

    def __init__(self, home: Path, nodes: Sequence[RoutedNode], port: int = 0) -> None:
        found = shutil.which("haproxy")
        if found is None:
            raise MissingBinaries(HAPROXY_MISSING, ("haproxy",))
        self.binary = found
        self.home = home
        self.nodes = list(nodes)
        self.port = port or free_port()
        self.stats_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def config(self) -> Path:
        return self.home / "haproxy-db.cfg"

    @property
    def logfile(self) -> Path:
        return self.home / "haproxy-db.log"

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.config.write_text(route_config(self.port, self.stats_port, self.nodes))
        with self.logfile.open("ab") as out:
            # -db: in the foreground, so the pid we hold is HAProxy's own.
            self.proc = subprocess.Popen(
                [self.binary, "-db", "-f", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def servers_up(self) -> set[str] | None:
        """The nodes HAProxy sends connections to now (None: it does not answer)."""
        url = f"http://{HOST}:{self.stats_port}/stats;csv"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                text = answer.read().decode()
        except OSError:
            return None
        rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
        return {
            row["svname"]
            for row in rows
            if row.get("pxname") == "primary"
            and row["svname"] not in ("FRONTEND", "BACKEND")
            and row.get("status", "").startswith("UP")
        }

    def wait_routes_to(self, name: str, timeout: float) -> None:
        """Until HAProxy sends connections to `name` alone (at start every server counts as
        up until its first checks fail)."""
        deadline = time.monotonic() + timeout
        while True:
            up = self.servers_up()
            if up == {name}:
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise StackError(f"HAProxy stopped:\n--- {self.logfile} ---\n{tail(self.logfile)}")
            if time.monotonic() > deadline:
                raise StackError(
                    f"HAProxy did not route writes to {name} alone within {timeout:.0f} s "
                    f"(up: {sorted(up or [])}):\n--- {self.logfile} ---\n{tail(self.logfile)}"
                )
            time.sleep(0.2)
