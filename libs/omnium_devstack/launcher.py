"""Run omnium's service processes for `make run`: prefixed output, restarts, clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

STOP_GRACE = 15.0
# How many of its last lines a service that cannot start is reported with.
TAIL_LINES = 12
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
# Long log lines (JSON blobs, tracebacks without newlines) must not break the pump.
_LINE_LIMIT = 1 << 20


@dataclass(frozen=True)
class RestartPolicy:
    """How the launcher keeps one service running, as a kubelet keeps a container.

    A copy that exits, by any code or signal, is started again after `first_wait` seconds,
    doubling each time up to `max_wait`; a copy that stayed up `reset_after` seconds starts
    the doubling over. A copy has started once every port it lists accepts connections and it
    is still running `settle` seconds later (a service that listens on nothing: once it has run
    `settle` seconds). `start_attempts` copies in a row that exit before they have started, or
    never open their ports within the launcher's ready timeout, stop the whole stack: that
    service cannot start, and waiting will not help.
    """

    first_wait: float = 0.5
    max_wait: float = 30.0
    reset_after: float = 60.0
    settle: float = 2.0
    start_attempts: int = 3


@dataclass(frozen=True)
class ServiceSpec:
    """One service: `python -m module`, the URLs it listens on, extra env and its restarts.

    There is no niceness here: every service lowers its own priority from its settings
    (`run_process(nice=...)`), which is also what happens under Kubernetes and systemd, so the
    launcher applying one too would count it twice.
    """

    name: str
    module: str
    listens: Sequence[tuple[str, str]] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    args: Sequence[str] = ()
    restart: RestartPolicy = RestartPolicy()
    # A program that is not one of ours (the HA profile's HAProxy): run instead of the module.
    program: Sequence[str] = ()


@dataclass(frozen=True)
class Restart:
    """One copy of a service that ended and was started again `wait` seconds later.

    `started` says whether that copy had started (RestartPolicy) before it ended."""

    returncode: int
    uptime: float
    wait: float
    started: bool

    @property
    def how(self) -> str:
        return _exit_text(self.returncode)


def host_port(url: str) -> tuple[str, int]:
    """The TCP address to probe for `url` (`grpc://0.0.0.0:50051`, `127.0.0.1:8080`, ...)."""
    parts = urlsplit(url if "//" in url else f"//{url}")
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    if port is None:
        raise ValueError(f"no port in {url!r}")
    host = parts.hostname or "127.0.0.1"
    # A wildcard listener is reachable over loopback; connecting to the wildcard is not portable.
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return host, port


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


@dataclass
class _Child:
    spec: ServiceSpec
    proc: asyncio.subprocess.Process
    pump: asyncio.Task[None]
    waiter: asyncio.Task[int]
    tail: deque[str]


class CannotStart(Exception):
    """A service exited before it started, `start_attempts` times in a row."""

    def __init__(self, name: str, problem: str, tail: Sequence[str]) -> None:
        self.name = name
        self.problem = problem
        self.tail = list(tail)
        lines = "".join(f"\n  {name} | {line}" for line in self.tail)
        super().__init__(
            f"{name} cannot start: {problem}"
            + (f"; its last lines:{lines}" if lines else "; it printed nothing")
        )


def _emit(name: str, width: int, text: str) -> None:
    sys.stdout.write(f"{name:<{width}} | {text}\n")
    sys.stdout.flush()


def _say(text: str) -> None:
    print(f"launcher: {text}", file=sys.stderr, flush=True)


async def _pump(name: str, width: int, stream: asyncio.StreamReader, tail: deque[str]) -> None:
    while True:
        try:
            line = await stream.readline()
        except ValueError:
            line = await stream.read(_LINE_LIMIT)
        if not line:
            return
        text = line.decode(errors="replace").rstrip("\r\n")
        tail.append(text)
        _emit(name, width, text)


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's own, plus a future for the exit itself.

    `Process.wait()` returns only once the output pipe closes too, which a worker the service
    forked keeps open after the service itself was killed."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


async def _exit_code(proc: asyncio.subprocess.Process, exited: asyncio.Future[None]) -> int:
    await exited
    assert proc.returncode is not None
    return proc.returncode


async def _start(spec: ServiceSpec, env: Mapping[str, str], width: int) -> _Child:
    child_env = {**os.environ, **env, **spec.env}
    # Without this, a child's prints sit in its buffer and interleave late or never.
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    loop = asyncio.get_running_loop()
    protocol = _Protocol(_LINE_LIMIT, loop)
    transport, _ = await loop.subprocess_exec(
        lambda: protocol,
        *(spec.program or (sys.executable, "-m", spec.module, *spec.args)),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=child_env,
        # Own process group: a terminal Ctrl-C reaches only us, so shutdown runs in our
        # order, and a service's own subprocesses are stopped along with it.
        process_group=0,
    )
    proc = asyncio.subprocess.Process(transport, protocol, loop)
    assert proc.stdout is not None
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    pump = asyncio.create_task(_pump(spec.name, width, proc.stdout, tail), name=f"pump-{spec.name}")
    waiter = asyncio.create_task(_exit_code(proc, protocol.exited), name=f"wait-{spec.name}")
    return _Child(spec, proc, pump, waiter, tail)


async def _listening(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=1.0)
    except OSError:  # TimeoutError included
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _wait_started(child: _Child, ready_timeout: float) -> str | None:
    """None once the copy has started (its ports open, then `settle` seconds up), else why not."""
    spec = child.spec
    deadline = time.monotonic() + ready_timeout
    waiting_for = "it had run long enough to count as started"
    for label, url in spec.listens:
        host, port = host_port(url)
        while not await _listening(host, port):
            if child.waiter.done():
                return f"it {_exit_text(child.waiter.result())} before opening {label} ({url})"
            if time.monotonic() >= deadline:
                return f"it did not open {label} ({url}) within {ready_timeout:.0f} s"
            await asyncio.sleep(0.1)
        waiting_for = "its ports had stayed open long enough to count as started"
    # A port that answers can belong to a process we did not start (a copy left from an earlier
    # run): one that exits at once after that has not started, whatever the probe saw.
    await asyncio.wait([child.waiter], timeout=spec.restart.settle)
    if child.waiter.done():
        return f"it {_exit_text(child.waiter.result())} before {waiting_for}"
    return None


def _signal_group(child: _Child, sig: signal.Signals) -> None:
    # After the leader is reaped its pid may be reused; signal only while it is ours.
    if child.proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.proc.pid, sig)


def _kill_leftovers(child: _Child) -> None:
    """SIGKILL what is left of an exited copy's group, as a kubelet ends a dead container's.

    A worker forked by a service that was killed would otherwise keep its port and make every
    new copy fail. Linux keeps a pid from being reused while a process group of that id has
    members, so, called as soon as the leader is reaped, this reaches only the group's leftovers
    or nobody."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.proc.pid, signal.SIGKILL)


async def _drain(child: _Child) -> None:
    # A grandchild outside the group could hold the pipe open forever.
    _, stuck = await asyncio.wait([child.pump], timeout=2.0)
    for task in stuck:
        task.cancel()
    await asyncio.gather(child.pump, return_exceptions=True)


async def _stop_all(children: Sequence[_Child]) -> None:
    for child in children:
        _signal_group(child, signal.SIGTERM)
    waiters = [c.waiter for c in children if not c.waiter.done()]
    if waiters:
        _, pending = await asyncio.wait(waiters, timeout=STOP_GRACE)
        for child in children:
            if child.waiter in pending:
                _emit(
                    child.spec.name,
                    _width([c.spec for c in children]),
                    f"still running after {STOP_GRACE:.0f} s; killing",
                )
                _signal_group(child, signal.SIGKILL)
        if pending:
            await asyncio.wait(pending)
    for child in children:
        _kill_leftovers(child)
    await asyncio.gather(*(_drain(c) for c in children))


def _width(specs: Sequence[ServiceSpec]) -> int:
    return max((len(s.name) for s in specs), default=0)


def _table(specs: Sequence[ServiceSpec]) -> str:
    rows = [("name", "label", "url")] + [
        (s.name, lbl, url) for s in specs for lbl, url in s.listens
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(
        f"{name:<{widths[0]}}  {label:<{widths[1]}}  {url}" for name, label, url in rows
    )


@contextlib.contextmanager
def _on_signals(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> Iterator[None]:
    installed: list[tuple[signal.Signals, Any]] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(sig)
        try:
            loop.add_signal_handler(sig, callback)
        except (RuntimeError, ValueError, NotImplementedError):
            # Not the main thread (or no Unix signals): cancelling the task still stops all.
            continue
        installed.append((sig, previous))
    try:
        yield
    finally:
        for sig, previous in installed:
            loop.remove_signal_handler(sig)
            # remove_signal_handler resets to the default; put back what the caller had.
            signal.signal(sig, previous)


@dataclass
class _Service:
    spec: ServiceSpec
    child: _Child | None = None
    restarts: list[Restart] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)


class Launcher:
    """Runs the services until SIGINT/SIGTERM, starting again each copy that exits.

    `run()` returns 0 after a signal, 1 when a service cannot start (see RestartPolicy).
    While it runs, `restarts` says what ended and how long each restart waited, and `pid`
    which process is the current copy of a service.
    """

    def __init__(
        self,
        specs: Sequence[ServiceSpec],
        env: Mapping[str, str] | None = None,
        *,
        ready_timeout: float = 60.0,
    ) -> None:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"service names must be unique: {names}")
        self._specs = list(specs)
        self._env = dict(env or {})
        self._ready_timeout = ready_timeout
        self._width = _width(self._specs)
        self._services = {s.name: _Service(s) for s in self._specs}
        self.started = asyncio.Event()
        """Set once every service has started (the address table is printed then)."""

    @property
    def restarts(self) -> Mapping[str, Sequence[Restart]]:
        return {name: list(s.restarts) for name, s in self._services.items()}

    def pid(self, name: str) -> int | None:
        child = self._services[name].child
        if child is None or child.proc.returncode is not None:
            return None
        return child.proc.pid

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        with _on_signals(loop, stop.set):
            keepers = [
                asyncio.create_task(self._keep(s), name=f"keep-{s.spec.name}")
                for s in self._services.values()
            ]
            stop_wait = asyncio.create_task(stop.wait(), name="stop-signal")
            announce = asyncio.create_task(self._announce(), name="announce")
            others = [stop_wait, announce]
            try:
                done, _ = await asyncio.wait(
                    [stop_wait, *keepers], return_when=asyncio.FIRST_COMPLETED
                )
                if stop_wait in done:
                    _say("stopping the services")
                    return 0
                try:
                    next(iter(done)).result()  # a keeper ends only by raising
                except CannotStart as exc:
                    _say(f"{exc}\nlauncher: stopping the others")
                return 1
            finally:
                for task in (*others, *keepers):
                    task.cancel()
                await asyncio.gather(*others, *keepers, return_exceptions=True)
                await _stop_all([s.child for s in self._services.values() if s.child])
                if any(s.restarts for s in self._services.values()):
                    _say(self._status())

    async def _announce(self) -> None:
        await asyncio.gather(*(s.started.wait() for s in self._services.values()))
        print(_table(self._specs), flush=True)
        self.started.set()

    def _status(self) -> str:
        counts = ", ".join(
            f"{name} {len(s.restarts)}" for name, s in self._services.items() if s.restarts
        )
        return f"restarts so far: {counts or 'none'}"

    async def _keep(self, service: _Service) -> None:
        """Start the service, and again after every exit, until cancelled or it cannot start."""
        spec, policy = service.spec, service.spec.restart
        wait = policy.first_wait
        failed_starts = 0
        while True:
            child = await _start(spec, self._env, self._width)
            service.child = child
            began = time.monotonic()
            problem = await _wait_started(child, self._ready_timeout)
            if problem is None:
                failed_starts = 0
                service.started.set()
            elif not child.waiter.done():
                _say(f"{spec.name}: {problem}; stopping this copy")
                await _stop_all([child])
            await asyncio.wait([child.waiter])
            uptime = time.monotonic() - began
            _kill_leftovers(child)
            await _drain(child)
            if problem is not None:
                failed_starts += 1
                if failed_starts >= policy.start_attempts:
                    times = "once" if failed_starts == 1 else f"{failed_starts} times in a row"
                    raise CannotStart(spec.name, f"{problem} ({times})", child.tail)
            if uptime >= policy.reset_after:
                wait = policy.first_wait
            restart = Restart(child.waiter.result(), uptime, wait, started=problem is None)
            service.restarts.append(restart)
            last = f"; last line: {child.tail[-1]}" if child.tail else ""
            why = (
                f"{spec.name} {restart.how} after {uptime:.1f} s up{last}"
                if problem is None
                else f"{spec.name} did not start ({failed_starts} of "
                f"{policy.start_attempts}): {problem}{last}"
            )
            _say(f"{why}; starting it again in {wait:g} s (restart {len(service.restarts)})")
            _say(self._status())
            await asyncio.sleep(wait)
            wait = min(wait * 2, policy.max_wait)


async def run_services(
    specs: Sequence[ServiceSpec],
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 60.0,
) -> int:
    """Run the services until SIGINT/SIGTERM (returns 0) or until one cannot start (returns 1)."""
    return await Launcher(specs, env, ready_timeout=ready_timeout).run()
