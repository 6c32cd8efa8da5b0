"""One operators' console per module that asks for it: the real stack (command, imports, the
Scout simulator) on a database of the module's own, the console, accounts and a browser."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import async_playwright

from omnium_accounts import Accounts
from omnium_admin import AdminApp
from omnium_db import PoolRoad, create_pool
from tests.conftest import cloned_database
from tests.support.admin_console import PASSWORD, Console
from tests.support.imports import games_day, import_settings
from tests.support.servers import Servers


@pytest.fixture(scope="module")
async def module_database(servers: Servers, template_database: str) -> AsyncIterator[str]:
    async with cloned_database(servers, template_database, "omnium_e2e") as url:
        yield url


@pytest.fixture(scope="module")
async def console(
    module_database: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Console]:
    async with games_day(
        module_database,
        # A batch waits on a row lock the progress test holds, rather than giving up.
        command_settings={"import_lock_timeout_seconds": 30.0},
    ) as day:
        settings = import_settings(
            module_database,
            day.command.port,
            imports_address=f"127.0.0.1:{day.imports.grpc_port}",
            admin_refresh_seconds=0.3,
        )
        pool = await create_pool(settings, PoolRoad.PEOPLE, application_name="e2e", size=2)
        accounts = Accounts(pool, settings)
        operator = await accounts.create("ana", "Ana Operator", "operator", PASSWORD)
        await accounts.create("vic", "Vic Viewer", "viewer", PASSWORD)
        await accounts.create("sam", "Sam Scorer", "scorer", PASSWORD)
        await accounts.create("lou", "Lou Locked", "operator", PASSWORD)
        await accounts.create("ada", "Ada Admin", "admin", PASSWORD)
        await pool.close()
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        assert (await day.wait_for_run(first.id))["status"] == "done"
        app = AdminApp(settings)
        await app.start(0)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True
            )
            try:
                yield Console(
                    day, app, browser, tmp_path_factory.mktemp("screenshots"), str(operator.id)
                )
            finally:
                await browser.close()
                await app.stop()
