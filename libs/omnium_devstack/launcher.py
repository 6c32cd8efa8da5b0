"""Run omnium's service processes together for `make run`, with prefixed output and clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

STOP_GRACE = 15.0
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
# Long log lines (JSON blobs, tracebacks without newlines) must not break the pump.
_LINE_LIMIT = 1 << 20


@dataclass(frozen=True)
class ServiceSpec:
    """One service: `python -m module`, the URLs it listens on, its niceness and extra env."""

    name: str
    module: str
    listens: Sequence[tuple[str, str]] = ()
    nice: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    args: Sequence[str] = ()


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


@dataclass
class _Child:
    spec: ServiceSpec
    proc: asyncio.subprocess.Process
    pump: asyncio.Task[None]
    waiter: asyncio.Task[int]


def _emit(name: str, width: int, text: str) -> None:
    sys.stdout.write(f"{name:<{width}} | {text}\n")
    sys.stdout.flush()


async def _pump(name: str, width: int, stream: asyncio.StreamReader) -> None:
    while True:
        try:
            line = await stream.readline()
        except ValueError:
            line = await stream.read(_LINE_LIMIT)
        if not line:
            return
        _emit(name, width, line.decode(errors="replace").rstrip("\r\n"))


async def _start(spec: ServiceSpec, env: Mapping[str, str], width: int) -> _Child:
    child_env = {**os.environ, **env, **spec.env}
    # Without this, a child's prints sit in its buffer and interleave late or never.
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    kwargs: dict[str, Any] = {}
    if spec.nice > 0:
        increment = spec.nice
        kwargs["preexec_fn"] = lambda: os.nice(increment)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        spec.module,
        *spec.args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=child_env,
        limit=_LINE_LIMIT,
        # Own process group: a terminal Ctrl-C reaches only us, so shutdown runs in our
        # order, and a service's own subprocesses are stopped along with it.
        process_group=0,
        **kwargs,
    )
    assert proc.stdout is not None
    pump = asyncio.create_task(_pump(spec.name, width, proc.stdout), name=f"pump-{spec.name}")
    waiter = asyncio.create_task(proc.wait(), name=f"wait-{spec.name}")
    return _Child(spec, proc, pump, waiter)


async def _listening(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=1.0)
    except OSError:  # TimeoutError included
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _wait_ready(child: _Child, ready_timeout: float) -> str | None:
    """None once every listed port accepts connections, else why not."""
    deadline = time.monotonic() + ready_timeout
    for label, url in child.spec.listens:
        host, port = host_port(url)
        while not await _listening(host, port):
            if child.waiter.done():
                return f"{child.spec.name} exited with code {child.waiter.result()} while starting"
            if time.monotonic() >= deadline:
                return (
                    f"{child.spec.name} did not open {label} ({url}) within {ready_timeout:.0f} s"
                )
            await asyncio.sleep(0.1)
    return None


def _signal_group(child: _Child, sig: signal.Signals) -> None:
    # After the leader is reaped its pid may be reused; signal only while it is ours.
    if child.proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.proc.pid, sig)


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
                    _width(children),
                    f"still running after {STOP_GRACE:.0f} s; killing",
                )
                _signal_group(child, signal.SIGKILL)
        if pending:
            await asyncio.wait(pending)
    pumps = [c.pump for c in children]
    # A grandchild outside the group could hold the pipe open forever.
    _, stuck = await asyncio.wait(pumps, timeout=2.0)
    for task in stuck:
        task.cancel()
    await asyncio.gather(*pumps, return_exceptions=True)


def _width(children: Sequence[_Child]) -> int:
    return max((len(c.spec.name) for c in children), default=0)


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


async def run_services(
    specs: Sequence[ServiceSpec],
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 60.0,
) -> int:
    """Run the services until SIGINT/SIGTERM (returns 0) or until one exits (returns 1)."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"service names must be unique: {names}")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    width = max((len(n) for n in names), default=0)
    children: list[_Child] = []
    with _on_signals(loop, stop.set):
        try:
            for spec in specs:
                children.append(await _start(spec, env or {}, width))
            return await _supervise(children, specs, stop, ready_timeout)
        finally:
            await _stop_all(children)


async def _supervise(
    children: Sequence[_Child],
    specs: Sequence[ServiceSpec],
    stop: asyncio.Event,
    ready_timeout: float,
) -> int:
    stop_wait = asyncio.create_task(stop.wait(), name="stop-signal")
    ready = asyncio.create_task(_all_ready(children, ready_timeout), name="ready")
    try:
        waiters = {c.waiter: c for c in children}
        await asyncio.wait([stop_wait, ready, *waiters], return_when=asyncio.FIRST_COMPLETED)
        if not stop_wait.done() and ready.done():
            problem = ready.result()
            if problem is not None:
                print(f"launcher: {problem}; stopping the others", file=sys.stderr, flush=True)
                return 1
            print(_table(specs), flush=True)
            await asyncio.wait([stop_wait, *waiters], return_when=asyncio.FIRST_COMPLETED)
        if stop_wait.done():
            print("launcher: stopping the services", file=sys.stderr, flush=True)
            return 0
        for waiter, child in waiters.items():
            if waiter.done():
                print(
                    f"launcher: {child.spec.name} exited with code {waiter.result()}; "
                    "stopping the others",
                    file=sys.stderr,
                    flush=True,
                )
                break
        return 1
    finally:
        for task in (stop_wait, ready):
            task.cancel()
        await asyncio.gather(stop_wait, ready, return_exceptions=True)


async def _all_ready(children: Sequence[_Child], ready_timeout: float) -> str | None:
    results = await asyncio.gather(*(_wait_ready(c, ready_timeout) for c in children))
    return next((r for r in results if r is not None), None)
