"""Password checks in a bounded pool of processes: as many as the process has CPUs, a short
queue, and past it an immediate "busy" rather than hundreds of 19 MiB hashes waiting in memory.

Each check runs in a small process of its own (`_hash_worker.py`) under SCHED_IDLE: a hash takes
only CPU time nothing else wants, so a flood of sign-ins slows sign-ins, which then answer busy,
never a scorer's tap. Processes, not threads: a low-priority thread shares the server's
interpreter lock, and one starved while holding it stalled every request of its server until the
machine was idle again (`make drill-abuse`: tap p95 53 to 56 ms under a sign-in flood with
SCHED_IDLE threads, target 50).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from omnium_accounts._passwords import hash_password, verify_password
from omnium_settings import Settings

T = TypeVar("T")
# cgroup v2 (Kubernetes' CPU limit): "<quota> <period>" or "max <period>".
_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
_WORKER = Path(__file__).with_name("_hash_worker.py")
# What a worker process is asked to do, by the function a caller names.
_OPS: dict[Callable[..., Any], str] = {verify_password: "verify", hash_password: "hash"}


class PasswordChecksBusy(RuntimeError):
    """Every password check is taken and the queue is full, or a check's process failed; try
    again shortly."""


def available_cpus() -> int:
    """The CPUs this process may use: its CPU limit (cgroup quota) if it has one, else the CPUs
    it may run on. Never the node's whole count when a limit is smaller."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        quota, period = _CPU_MAX.read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


class _Worker:
    """One password-check process, one check at a time over its pipes."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls) -> _Worker:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(_WORKER),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def call(self, op: str, args: tuple[object, ...]) -> Any:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write((json.dumps([op, list(args)]) + "\n").encode())
        await stdin.drain()
        line = await stdout.readline()
        if not line:
            raise PasswordChecksBusy("a password check process ended; it is started again")
        answer = json.loads(line)
        if "error" in answer:
            raise PasswordChecksBusy(f"a password check failed ({answer['error']})")
        return answer["ok"]

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)


class PasswordChecks:
    """One per process (see `password_checks`): the worker processes and a count of the checks
    taken. Workers start on demand, up to `threads`, and belong to the event loop that started
    them (a new loop, as in tests, starts its own).

    The count is read and changed only on the event loop's thread, so taking a place is atomic
    without a lock."""

    def __init__(self, threads: int, queue: int) -> None:
        self.threads = threads
        self.capacity = threads + max(0, queue)
        self.taken = 0
        # Checks run, for the tests and metrics: a refused sign-in costs one like any other.
        self.done = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._workers: list[_Worker] = []
        self._starting = 0
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids, for the tests."""
        return [w.process.pid for w in self._workers]

    @contextlib.contextmanager
    def place(self) -> Iterator[None]:
        """A place among the checks, taken at once or PasswordChecksBusy. A sign-in holds it
        from before the account is read until its password is checked, so a flood past the
        pool's size costs neither a database read nor a hash."""
        if self.taken >= self.capacity:
            raise PasswordChecksBusy("every password check is taken")
        self.taken += 1
        try:
            yield
        finally:
            self.taken -= 1

    async def check(self, check: Callable[..., T], *args: object) -> T:
        """`check(*args)` (verify_password or hash_password) in a worker process, in a place
        already taken."""
        op = _OPS[check]
        worker = await self._take()
        try:
            result: T = await worker.call(op, args)
        except BaseException:
            # A worker whose answer was not read (cancelled, or it failed) is not used again.
            self._drop(worker)
            raise
        self._idle.put_nowait(worker)
        self.done += 1
        return result

    async def run(self, check: Callable[..., T], *args: object, wait: bool = False) -> T:
        """`check(*args)` in a worker. Past its capacity: PasswordChecksBusy at once, or with
        `wait` (an admin setting a password) a turn when one is free."""
        while self.taken >= self.capacity:
            if not wait:
                break  # place() says busy
            await asyncio.sleep(0.05)
        with self.place():
            return await self.check(check, *args)

    async def _take(self) -> _Worker:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            for worker in self._workers:
                worker.stop()
            self._loop, self._workers, self._idle = loop, [], asyncio.Queue()
            self._starting = 0
        if self._idle.empty() and len(self._workers) + self._starting < self.threads:
            self._starting += 1  # counted before the await: the next caller must not start one too
            try:
                worker = await _Worker.start()
            finally:
                self._starting -= 1
            self._workers.append(worker)
            return worker
        return await self._idle.get()

    def _drop(self, worker: _Worker) -> None:
        worker.stop()
        with contextlib.suppress(ValueError):
            self._workers.remove(worker)


_PROCESS_CHECKS: dict[tuple[int, int, int], PasswordChecks] = {}


def password_checks(settings: Settings) -> PasswordChecks:
    """The process's pool for these settings: every Accounts of the process shares it, so the
    CPUs are shared however many consoles or handlers make one."""
    s = settings.sign_in
    threads = s.hash_threads if s.hash_threads > 0 else available_cpus()
    key = (os.getpid(), threads, s.hash_queue)
    checks = _PROCESS_CHECKS.get(key)
    if checks is None:
        checks = _PROCESS_CHECKS[key] = PasswordChecks(threads, s.hash_queue)
    return checks
