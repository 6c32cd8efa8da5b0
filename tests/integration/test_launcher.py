"""Integration tests for the dev stack's launcher: real child processes, restarts, stops, nice."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dev.games_day import _api_keys, grpc_callers, services
from omnium_devstack import free_port
from omnium_devstack.launcher import Launcher, RestartPolicy, ServiceSpec, run_services
from omnium_grpc import Callers
from omnium_settings import Settings
from tests.support.servers import Servers
from tests.support.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(REPO)}
QUICK = RestartPolicy(first_wait=0.3, max_wait=1.0, reset_after=600.0, settle=0.2)


def _spec(
    tmp_path: Path, name: str, policy: RestartPolicy = QUICK, *, ports: bool = True, **env: str
) -> ServiceSpec:
    port = free_port()
    return ServiceSpec(
        name,
        "tests.support.listener",
        [("http", f"http://127.0.0.1:{port}")] if ports else [],
        {
            "LISTENER_PORT": str(port),
            "LISTENER_PIDFILE": str(tmp_path / f"{name}.pid"),
            **{f"LISTENER_{key.upper()}": value for key, value in env.items()},
        },
        restart=policy,
    )


def _pids(path: Path) -> list[int]:
    """Every pid the file lists, one per start (a line still being written is left out)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [int(line) for line in text.split("\n")[:-1]]


def _alive(pid: int) -> bool:
    """Zombies (exited, not yet reaped) count as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _nice(pid: int) -> int:
    # Field 19 of /proc/<pid>/stat; the fields after the ")" that ends the name start at 3.
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19 - 3])


async def _gone(pids: list[int], seconds: float = 10.0) -> None:
    await eventually(
        lambda: not any(_alive(p) for p in pids), within=seconds, every=0.02, what=f"{pids} to end"
    )


def _new_copy(launcher: Launcher, name: str, old: int) -> Callable[[], bool]:
    return lambda: launcher.pid(name) not in (None, old)


def _counted(launcher: Launcher, name: str, restarts: int) -> Callable[[], bool]:
    return lambda: len(launcher.restarts[name]) == restarts


def _lines(path: Path, count: int) -> Callable[[], bool]:
    return lambda: len(_pids(path)) == count


async def _started(launcher: Launcher, task: asyncio.Task[int]) -> None:
    done, _ = await asyncio.wait(
        [task, asyncio.ensure_future(launcher.started.wait())],
        timeout=30,
        return_when=asyncio.FIRST_COMPLETED,
    )
    assert task not in done, "the launcher stopped before every service started"
    assert done, "the services did not start within 30 s"


async def test_a_killed_service_is_started_again_with_growing_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alpha = _spec(tmp_path, "alpha")
    beta = _spec(tmp_path, "beta", worker_pidfile=str(tmp_path / "beta-workers.pid"))
    launcher = Launcher([alpha, beta], ENV, ready_timeout=30)
    task = asyncio.create_task(launcher.run())
    await _started(launcher, task)
    alpha_pid = launcher.pid("alpha")
    assert alpha_pid is not None

    gaps = []
    for round_ in range(1, 4):
        old = launcher.pid("beta")
        assert old is not None
        await eventually(_lines(tmp_path / "beta-workers.pid", round_), every=0.02, what="a worker")
        os.kill(old, signal.SIGKILL)
        killed = time.monotonic()
        await eventually(_new_copy(launcher, "beta", old), every=0.02, what="beta restarted")
        gaps.append(time.monotonic() - killed)
        await eventually(_counted(launcher, "beta", round_), every=0.02, what="the restart counted")

    restarts = launcher.restarts["beta"]
    assert [r.returncode for r in restarts] == [-signal.SIGKILL] * 3
    # 0.3 s doubling, capped at 1 s.
    assert [r.wait for r in restarts] == [0.3, 0.6, 1.0]
    for gap, restart in zip(gaps, restarts, strict=True):
        assert gap >= restart.wait
    # A killed copy's worker (same process group) goes with it, as in a dead container.
    await _gone(_pids(tmp_path / "beta-workers.pid")[:3])
    assert launcher.pid("alpha") == alpha_pid
    assert _alive(alpha_pid)
    assert launcher.restarts["alpha"] == []
    assert not task.done()
    err = capsys.readouterr().err
    assert "beta was killed by SIGKILL" in err
    assert "starting it again in 1 s (restart 3)" in err
    assert "restarts so far: beta 3" in err

    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(task, timeout=30) == 0
    await _gone([alpha_pid, *_pids(tmp_path / "beta.pid"), *_pids(tmp_path / "beta-workers.pid")])
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


async def test_waits_start_over_once_a_copy_stayed_up(tmp_path: Path) -> None:
    policy = RestartPolicy(first_wait=0.2, max_wait=5.0, reset_after=1.5, settle=0.2)
    launcher = Launcher([_spec(tmp_path, "beta", policy)], ENV, ready_timeout=30)
    task = asyncio.create_task(launcher.run())
    try:
        await _started(launcher, task)
        for round_, pause in enumerate([0.0, 0.0, 2.0], start=1):
            old = launcher.pid("beta")
            assert old is not None
            await asyncio.sleep(pause)
            os.kill(old, signal.SIGKILL)
            await eventually(_new_copy(launcher, "beta", old), every=0.02, what="beta restarted")
            await eventually(
                _counted(launcher, "beta", round_), every=0.02, what="the restart counted"
            )
        # Up only a moment twice (0.2 s, then 0.4 s), then up over 1.5 s: back to 0.2 s.
        assert [r.wait for r in launcher.restarts["beta"]] == [0.2, 0.4, 0.2]
        assert launcher.restarts["beta"][2].uptime >= 2.0
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await _gone(_pids(tmp_path / "beta.pid"))


async def test_a_service_that_exits_by_itself_is_started_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = [_spec(tmp_path, "alpha"), _spec(tmp_path, "beta", exit_after="0.5")]
    launcher = Launcher(specs, ENV, ready_timeout=30)
    task = asyncio.create_task(launcher.run())
    try:
        await eventually(
            lambda: len(launcher.restarts["beta"]) >= 2, every=0.02, what="beta restarted twice"
        )
        assert all(r.returncode == 3 and r.started for r in launcher.restarts["beta"])
        assert not task.done()
        assert len(_pids(tmp_path / "alpha.pid")) == 1
        assert "beta exited with code 3 after" in capsys.readouterr().err
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await _gone(_pids(tmp_path / "alpha.pid") + _pids(tmp_path / "beta.pid"))


@pytest.mark.parametrize(
    ("ports", "fail", "ready_timeout", "reason"),
    [
        (True, "beta: OMNIUM_X is not set", 30.0, "it exited with code 4 before opening http"),
        (False, "beta: OMNIUM_X is not set", 30.0, "it exited with code 4 before it had run"),
        # Listens on another port than its spec says: running, but never ready.
        (True, "", 1.0, "it did not open http (http://127.0.0.1:"),
    ],
    ids=["exits-before-listening", "no-ports-exits-at-once", "never-opens-its-port"],
)
async def test_a_service_that_cannot_start_stops_the_launcher_with_its_reason(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    ports: bool,
    fail: str,
    ready_timeout: float,
    reason: str,
) -> None:
    policy = RestartPolicy(first_wait=0.1, settle=0.5, start_attempts=3)
    beta = _spec(tmp_path, "beta", policy, ports=ports, fail=fail)
    if not fail:
        beta = ServiceSpec(
            beta.name,
            beta.module,
            beta.listens,
            {**beta.env, "LISTENER_PORT": str(free_port())},
            restart=policy,
        )
    started = time.monotonic()
    code = await asyncio.wait_for(
        run_services([_spec(tmp_path, "alpha"), beta], ENV, ready_timeout=ready_timeout),
        timeout=90,
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "launcher: beta cannot start: " + reason in err
    assert "(3 times in a row)" in err
    if fail:
        assert f"its last lines:\n  beta | {fail}" in err
    assert "stopping the others" in err
    assert len(_pids(tmp_path / "beta.pid")) == 3
    # Two waits between the three starts, 0.1 s then 0.2 s.
    assert time.monotonic() - started >= 0.3
    await _gone(_pids(tmp_path / "alpha.pid") + _pids(tmp_path / "beta.pid"))


async def test_ctrl_c_stops_everything_even_while_a_restart_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alpha = _spec(tmp_path, "alpha", worker_pidfile=str(tmp_path / "alpha-workers.pid"))
    slow = RestartPolicy(first_wait=30.0, settle=0.2)
    beta = _spec(tmp_path, "beta", slow)
    launcher = Launcher([alpha, beta], ENV, ready_timeout=30)
    before = signal.getsignal(signal.SIGINT)
    task = asyncio.create_task(launcher.run())
    await _started(launcher, task)
    await eventually(_lines(tmp_path / "alpha-workers.pid", 1), every=0.02, what="a worker")
    beta_pid = launcher.pid("beta")
    assert beta_pid is not None
    os.kill(beta_pid, signal.SIGKILL)
    await eventually(_counted(launcher, "beta", 1), every=0.02, what="beta's exit seen")

    os.kill(os.getpid(), signal.SIGINT)
    # Well inside beta's 30 s wait: the stop does not sit out a pending restart.
    assert await asyncio.wait_for(task, timeout=20) == 0
    await _gone(_pids(tmp_path / "alpha.pid") + _pids(tmp_path / "alpha-workers.pid"))
    assert _pids(tmp_path / "beta.pid") == [beta_pid]
    assert "launcher: stopping the services" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is before


async def test_the_launcher_cleans_up_when_cancelled(tmp_path: Path) -> None:
    specs = [_spec(tmp_path, "alpha"), _spec(tmp_path, "beta")]
    launcher = Launcher(specs, ENV, ready_timeout=30)
    task = asyncio.create_task(launcher.run())
    await _started(launcher, task)
    pids = _pids(tmp_path / "alpha.pid") + _pids(tmp_path / "beta.pid")
    assert len(pids) == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _gone(pids)


async def test_each_service_lowers_its_priority_once(
    tmp_path: Path, servers: Servers, database_url: str
) -> None:
    ports = {
        name: str(free_port())
        for name in ("doorbell", "imports", "scoring", "delivery", "command", "scout_simulator")
    }
    environ = {f"OMNIUM_{name.upper()}_PORT": port for name, port in ports.items()}
    settings = Settings.from_env(environ)
    # The dev stack's callers: each process with its own token.
    callers, tokens = grpc_callers(tmp_path, "launcher-test-token")
    env = {
        **environ,
        "OMNIUM_DATABASE_URL": database_url,
        "OMNIUM_REDIS_URL": servers.redis_url,
        "OMNIUM_GRPC_CALLERS": callers,
        "OMNIUM_GRPC_TOKEN": "launcher-test-token",
    }
    # The README's table: imports +10, delivery +5, providers +10, scoring 0.
    steps = {"imports": 10, "delivery": 5, "providers": 10, "scoring": 0}
    specs = [s for s in services(settings, tmp_path / "scout-secret", tokens) if s.name in steps]
    assert sorted(s.name for s in specs) == sorted(steps)
    launcher = Launcher(specs, env, ready_timeout=60)
    task = asyncio.create_task(launcher.run())
    try:
        done, _ = await asyncio.wait(
            [task, asyncio.ensure_future(launcher.started.wait())],
            timeout=90,
            return_when=asyncio.FIRST_COMPLETED,
        )
        assert done and task not in done, "the services did not all start"
        ours = _nice(os.getpid())
        seen = {}
        for name in steps:
            pid = launcher.pid(name)
            assert pid is not None, name
            seen[name] = _nice(pid)
        assert seen == {name: min(ours + step, 19) for name, step in steps.items()}
        assert all(r == [] for r in launcher.restarts.values()), launcher.restarts
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_the_dev_stack_gives_each_calling_process_a_caller_of_its_own(tmp_path: Path) -> None:
    """`make run`: every server takes the same callers; admin and the gateway act for people
    through console roles, imports and scoring (and the provider pull) as services, and the
    printed token is a caller of its own. The tokens stay the same across restarts."""
    callers, tokens = grpc_callers(tmp_path, "tools-token")
    assert grpc_callers(tmp_path, "tools-token") == (callers, tokens)
    known = Callers.parse(callers.split(","))
    sent = {}
    for spec in services(Settings.from_env({}), tmp_path / "scout-secret", tokens):
        if "OMNIUM_GRPC_TOKEN" in spec.env:
            caller = known.identify((("authorization", f"Bearer {spec.env['OMNIUM_GRPC_TOKEN']}"),))
            assert not isinstance(caller, str), spec.name
            sent[spec.name] = (caller.name, caller.role.name)
    assert sent == {
        "imports": ("imports", "service"),
        "scoring": ("scoring", "service"),
        "providers": ("scoring", "service"),
        "admin": ("admin-console", "operator-console"),
        "gateway": ("gateway", "scorer-console"),
    }
    tools = known.identify((("authorization", "Bearer tools-token"),))
    assert not isinstance(tools, str) and (tools.name, tools.role.name) == ("dev-tools", "service")


def test_the_dev_stack_makes_an_api_key_for_the_samples_unless_keys_are_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make run` gives the gateway one API key (kept beside the data, the same across
    restarts) and prints it for docs/clients/; keys set in OMNIUM_GATEWAY_API_KEYS win."""
    made = _api_keys(Settings.from_env({}), tmp_path)
    name, _, key = made.partition(":")
    assert name == "dev" and len(key) >= 24
    assert f"API key     {key}" in capsys.readouterr().out
    assert _api_keys(Settings.from_env({}), tmp_path) == made
    mine = Settings.from_env({"OMNIUM_GATEWAY_API_KEYS": "media:abc123"})
    assert _api_keys(mine, tmp_path) == "media:abc123"
