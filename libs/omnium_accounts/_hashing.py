"""Password checks on a bounded pool: as many threads as the process has CPUs, a short queue, and
past it an immediate "busy" rather than hundreds of 19 MiB hashes waiting in memory."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from omnium_settings import Settings

T = TypeVar("T")
# cgroup v2 (Kubernetes' CPU limit): "<quota> <period>" or "max <period>".
_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


class PasswordChecksBusy(RuntimeError):
    """Every password check thread is taken and the queue is full; try again shortly."""


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


class PasswordChecks:
    """One per process (see `password_checks`): a thread pool and a count of the checks taken.

    The count is read and changed only on the event loop's thread, so taking a place is atomic
    without a lock."""

    def __init__(self, threads: int, queue: int) -> None:
        self.threads = threads
        self.capacity = threads + max(0, queue)
        self.taken = 0
        # Checks run, for the tests and metrics: a refused sign-in costs one like any other.
        self.done = 0
        self._pool = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="password", initializer=_lowest_priority
        )

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
        """`check(*args)` on the pool, in a place already taken."""
        result = await asyncio.get_running_loop().run_in_executor(self._pool, check, *args)
        self.done += 1
        return result

    async def run(self, check: Callable[..., T], *args: object, wait: bool = False) -> T:
        """`check(*args)` on the pool. Past its capacity: PasswordChecksBusy at once, or with
        `wait` (an admin setting a password) a turn when one is free."""
        while self.taken >= self.capacity:
            if not wait:
                break  # place() says busy
            await asyncio.sleep(0.05)
        with self.place():
            return await self.check(check, *args)


def _lowest_priority() -> None:
    """Password checks run only on CPU time nothing else wants: Linux's SCHED_IDLE for this
    thread alone (a policy is per thread), or nice 19 where that is refused. A scorer's tap,
    and every process it goes through, gets the CPU first and is never made to wait for a
    hash; a flood of sign-ins slows sign-ins, which then answer busy, not the scoring.

    nice 19 alone is not enough on a busy machine: a nice-19 thread still gets its slices
    (about 1.5 % of a nice-0 one's weight each, but a slice once it runs), and the half-dozen
    wake-ups of one tap across gateway, scoring, command service and database each waited for
    one (`make drill-abuse`: p95 53 to 106 ms under a sign-in flood, target 50)."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


_PROCESS_CHECKS: dict[tuple[int, int], PasswordChecks] = {}


def password_checks(settings: Settings) -> PasswordChecks:
    """The process's pool for these settings: every Accounts of the process shares it, so the
    CPUs are shared however many consoles or handlers make one."""
    s = settings.sign_in
    threads = s.hash_threads if s.hash_threads > 0 else available_cpus()
    key = (threads, s.hash_queue)
    checks = _PROCESS_CHECKS.get(key)
    if checks is None:
        checks = _PROCESS_CHECKS[key] = PasswordChecks(threads, s.hash_queue)
    return checks
