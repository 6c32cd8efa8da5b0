"""Password checks on a bounded pool: as many threads as the process has CPUs, a short queue, and
past it an immediate "busy" rather than hundreds of 19 MiB hashes waiting in memory."""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable
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
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="password")

    async def run(self, check: Callable[..., T], *args: object, wait: bool = False) -> T:
        """`check(*args)` on the pool. Past its capacity: PasswordChecksBusy at once, or with
        `wait` (an admin setting a password) a turn when one is free."""
        while self.taken >= self.capacity:
            if not wait:
                raise PasswordChecksBusy("every password check is taken")
            await asyncio.sleep(0.05)
        self.taken += 1
        try:
            result = await asyncio.get_running_loop().run_in_executor(self._pool, check, *args)
            self.done += 1
            return result
        finally:
            self.taken -= 1


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
