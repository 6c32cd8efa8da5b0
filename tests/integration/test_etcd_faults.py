"""The pieces of the etcd faults, for real: the relay that partitions one Patroni from etcd, and
a three-member etcd that loses its raft leader and goes on answering.

The relay is tried against a real TCP echo server: cut, an open connection and a new one get
no answer and are not closed (a partition, not a crash); healed, a new connection is answered
and the one that lived through the cut is reset. The etcd members are real processes; the
whole Patroni pair under these faults is the fault drill's (`make drill-faults`).
"""

from __future__ import annotations

import json
import shutil
import socket
import socketserver
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from omnium_devstack.etcd import Etcd
from omnium_devstack.ha import PatroniCluster
from omnium_devstack.relay import Relay
from omnium_devstack.server import free_port
from tests.support.waiting import eventually_sync

pytestmark = pytest.mark.timeout(120)


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _ask(sock: socket.socket, data: bytes, wait: float = 2.0) -> bytes:
    """Send, then what comes back within `wait`: b"" on close, b"?" on silence."""
    sock.settimeout(wait)
    sock.sendall(data)
    try:
        return sock.recv(4096)
    except TimeoutError:
        return b"?"


def _closed(sock: socket.socket) -> bool:
    """Whether the other end closed or reset the connection within 2 s (not silence)."""
    sock.settimeout(2)
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_cut_relay_answers_nothing_and_closes_nothing_until_healed(echo_port: int) -> None:
    relay = Relay("t", [echo_port])
    relay.start()
    try:
        (port,) = relay.ports
        before = socket.create_connection(("127.0.0.1", port), timeout=2)
        assert _ask(before, b"ping") == b"ping"

        relay.cut()
        assert _ask(before, b"lost") == b"?"  # silence: neither answered nor closed
        during = socket.create_connection(("127.0.0.1", port), timeout=2)
        assert _ask(during, b"lost too") == b"?"

        relay.heal()
        after = socket.create_connection(("127.0.0.1", port), timeout=2)
        assert _ask(after, b"again") == b"again"
        # Reset: their bytes were dropped, so the stream is no use; the client reconnects.
        assert _closed(before)
        assert _closed(during)
        for s in (before, during, after):
            s.close()
    finally:
        relay.stop()


def test_a_relay_refuses_when_its_target_is_down() -> None:
    relay = Relay("t", [free_port()])
    relay.start()
    try:
        sock = socket.create_connection(("127.0.0.1", relay.ports[0]), timeout=2)
        assert _closed(sock)
        sock.close()
    finally:
        relay.stop()


def _put(url: str, key: str, value: str) -> None:
    request = urllib.request.Request(
        f"{url}/v2/keys/{key}", data=f"value={value}".encode(), method="PUT"
    )
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    with urllib.request.urlopen(request, timeout=5):
        pass


def _get(url: str, key: str) -> str:
    with urllib.request.urlopen(f"{url}/v2/keys/{key}?quorum=true", timeout=5) as answer:
        return str(json.loads(answer.read())["node"]["value"])


def test_three_etcd_members_survive_losing_their_leader(tmp_path: Path) -> None:
    binary = shutil.which("etcd")
    assert binary is not None, "etcd is not installed: make tools"
    etcd = Etcd(tmp_path, Path(binary), [(free_port(), free_port()) for _ in range(3)])
    began = time.monotonic()
    etcd.start()
    try:
        assert etcd.whole()
        _put(etcd.url, "k", "one")
        assert {_get(url, "k") for url in etcd.urls} == {"one"}

        victim = etcd.leader()
        assert victim is not None
        etcd.kill_member(victim)
        left = [m for m in etcd.members if m.name != victim]
        elected = eventually_sync(etcd.leader, within=15, every=0.1, what="a new etcd leader")
        assert elected in {m.name for m in left}
        assert not etcd.whole()
        _put(left[0].url, "k", "two")  # the two left are a quorum: writes go on
        assert _get(left[1].url, "k") == "two"

        etcd.start_member(victim)
        etcd.wait_whole(30)
        assert _get(etcd.member(victim).url, "k") == "two"
    finally:
        etcd.stop()
    assert all(not m.alive() for m in etcd.members)
    assert time.monotonic() - began < 60


def test_etcd_runs_one_member_or_three_and_says_so(tmp_path: Path) -> None:
    binary = Path(shutil.which("etcd") or "etcd")
    with pytest.raises(ValueError, match="one member or three, not 2"):
        Etcd(tmp_path, binary, [(free_port(), free_port())] * 2)
    with pytest.raises(ValueError, match="etcd_members is 1 or 3"):
        PatroniCluster(tmp_path / "pair", etcd_members=2)
    assert not (tmp_path / "pair").exists()  # refused before anything was made
