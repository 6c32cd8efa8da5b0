"""A newcomer at a terminal, for the onboarding tests: a folder laid out like the repository's,
the dev stack's services in small, and the commands a README section gives, in order."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from omnium_db import apply_migrations, init_connection
from omnium_devstack.stack import Stack, dev_process_environ
from omnium_imports import (
    ImportsApp,
)
from omnium_scout_sim import DoorbellTarget, ScoutSimulator, SimulatorConfig
from tests.conftest import REPO
from tests.support.command import TOKEN, running_command
from tests.support.imports import import_settings

README = REPO / "services" / "imports" / "README.md"
EXAMPLES = REPO / "services" / "imports" / "examples"
DEFAULT_UNITS = REPO / "services" / "imports" / "omnium_imports" / "mappings" / "scout_units.json"
CODE = "games-schedule"
ROWS = 1_252  # the simulator's Games: every unit is one row of a schedule run


@dataclass(slots=True)
class Newcomer:
    """A terminal in a folder laid out like the repository's (its `services` and `.venv`), with
    the settings the walkthrough names."""

    env: dict[str, str]
    folder: Path
    sim: ScoutSimulator
    db: asyncpg.Connection
    command_address: str

    async def run(self, *args: str, expect: int = 0) -> str:
        """`python -m omnium_imports ARGS`, with this test's interpreter."""
        return await self._said((sys.executable, "-m", "omnium_imports", *args), args, expect)

    async def type(self, line: str, expect: int = 0) -> str:
        """A command line as a person types it, into bash."""
        return await self._said(("bash", "-c", line), line, expect)

    async def _said(self, argv: tuple[str, ...], what: object, expect: int) -> str:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=self.folder,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(90):
            out, err = await process.communicate()
        said = out.decode() + err.decode()
        assert process.returncode == expect, f"{what} exited {process.returncode}:\n{said}"
        return said

    def set_scout_url(self, name: str) -> None:
        """The edit the walkthrough's step 2 asks for when Scout is not the dev stack's."""
        path = self.folder / name
        path.write_text(
            json.dumps({**json.loads(path.read_text()), "scout_url": self.sim.base_url}, indent=2)
        )


class Walkthrough:
    """The commands a README section gives, taken in order: each must be the one expected."""

    def __init__(self, commands: list[str]) -> None:
        self.left = commands

    def next(self, expected: str) -> str:
        assert self.left, f"the README has no more commands; expected `{expected}`"
        command = self.left.pop(0)
        assert command == expected, "the README's next command is not what this test runs"
        return command


def terminal_env(command_address: str, **settings: str) -> dict[str, str]:
    env = dev_process_environ()
    return env | {"OMNIUM_COMMAND_ADDRESS": command_address} | settings


def like_the_repository(folder: Path) -> None:
    """The walkthrough runs from the repository's folder: its paths are `services/...` and
    `.venv/bin/python`. Files it makes (integration.json, my-mapping.json) land here."""
    (folder / "services").symlink_to(REPO / "services")
    (folder / ".venv").symlink_to(Path(sys.prefix))


@asynccontextmanager
async def small_dev_services(
    database_url: str, *, doorbell: bool
) -> AsyncIterator[tuple[str, ScoutSimulator]]:
    """The dev stack's services in small: command, imports (its workers; no scheduler, so the
    first run is the one `integration resume` queues), and Scout with one schedule run made.
    With `doorbell`, Scout rings the imports service's doorbell for the walkthrough's
    integration, signed with the example's secret."""
    async with running_command(database_url) as command:
        imports = ImportsApp(import_settings(database_url, command.port))
        port = await imports.start(0, workers=1, scheduler=False, grpc_port=0)
        secret = json.loads((EXAMPLES / "integration.json").read_text())["secret"]
        sim = ScoutSimulator(
            SimulatorConfig(
                doorbells={"schedule": DoorbellTarget(f"http://127.0.0.1:{port}", CODE, secret)}
                if doorbell
                else {}
            )
        )
        await sim.start()
        try:
            # Before the integration exists: no doorbell for it.
            sim.mute_doorbell(True)
            await sim.make_run("schedule")
            sim.mute_doorbell(False)
            yield f"127.0.0.1:{command.port}", sim
        finally:
            await sim.stop()
            await imports.stop(grace=2)


@asynccontextmanager
async def newcomer(
    database_url: str, tmp_path: Path, *, command_up: bool = True, doorbell: bool = False
) -> AsyncIterator[Newcomer]:
    """Settings exported, as the walkthrough says to do away from the dev stack."""
    like_the_repository(tmp_path)
    async with small_dev_services(database_url, doorbell=doorbell) as (command_address, sim):
        db = await asyncpg.connect(database_url)
        await init_connection(db)
        address = command_address if command_up else "127.0.0.1:9"
        env = terminal_env(
            address,
            OMNIUM_DATABASE_URL=database_url,
            OMNIUM_GRPC_TOKEN=TOKEN,
            # This Scout listens on this machine (README: "if Scout is on your own network").
            OMNIUM_OUTBOUND_ALLOWED_NETWORKS="127.0.0.0/8",
        )
        try:
            yield Newcomer(env, tmp_path, sim, db, address)
        finally:
            await db.close()


@asynccontextmanager
async def dev_stack_newcomer(tmp_path: Path) -> AsyncIterator[Newcomer]:
    """The walkthrough's default: no database or token settings, a dev stack in `.omnium/dev`
    under the folder the commands run from (here on free ports, as `make run` would have left
    it running), its token beside it. Only the command service's address is set."""
    like_the_repository(tmp_path)
    stack = Stack(tmp_path / ".omnium" / "dev", 0, 0, False)
    await asyncio.to_thread(stack.start)
    try:
        (stack.data_dir / "grpc-token").write_text(TOKEN + "\n")
        database_url = stack.database_url
        db = await asyncpg.connect(database_url)
        try:
            await apply_migrations(db)
            await init_connection(db)
            async with small_dev_services(database_url, doorbell=False) as (address, sim):
                env = terminal_env(address, SCOUT=sim.base_url)
                yield Newcomer(env, tmp_path, sim, db, address)
        finally:
            await db.close()
    finally:
        await asyncio.to_thread(stack.stop)
        # As root, PostgreSQL's files may live in a fallback folder its own user can reach.
        shutil.rmtree(stack.postgres.fallback_home, ignore_errors=True)


def readme_section(heading: str) -> str:
    """A part of services/imports/README.md: from its heading to the next heading."""
    text = README.read_text()
    start = text.index(f"\n{heading}\n") + 1
    end = re.compile(r"\n#{1,3} ").search(text, start + 1)
    return text[start : end.start() if end else None]


def walkthrough() -> str:
    return readme_section("## Add an integration in ten minutes")


# A line of a code block that a person types: the rest are what the commands print.
_TYPED = re.compile(r"^ {4,}((?:[A-Z]+=|cp |\.venv/bin/python ).*?)\s*$", re.MULTILINE)


def typed_commands(section: str) -> list[str]:
    return _TYPED.findall(section)
