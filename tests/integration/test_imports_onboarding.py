"""services/imports/README.md, "Add an integration in ten minutes" and "Pause and resume": the
commands as a newcomer types them, into a shell, each its own process, against a real database,
a Scout simulator served here, a real command service and a real imports service."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import asyncpg
import httpx
import pytest

from omnium_imports import (
    IntegrationSpec,
    SetupError,
    add_lookups,
    add_version,
    load_reference,
    mapping_file,
    register_integration,
)
from omnium_imports._queue import enqueue_check
from omnium_scout_sim import ScoutSimulator
from tests.support.command import CALLERS_ENV, TOKEN
from tests.support.delivery import query_until
from tests.support.onboarding import (
    CODE,
    DEFAULT_UNITS,
    EXAMPLES,
    ROWS,
    Newcomer,
    Walkthrough,
    dev_stack_newcomer,
    newcomer,
    readme_section,
    terminal_env,
    typed_commands,
    walkthrough,
)
from tests.support.waiting import eventually


async def test_add_an_integration_in_ten_minutes(tmp_path: Path) -> None:
    """Every command of the walkthrough, as written, in its order, typed into a shell in a
    folder laid out like the repository's, with a dev stack of its own and no OMNIUM_* settings
    but the command service's address: the database and the gRPC token are the dev stack's."""
    walk = Walkthrough(typed_commands(walkthrough()))
    async with dev_stack_newcomer(tmp_path) as me:
        # Where Scout is: the walkthrough's is the dev stack's simulator; here it is this one.
        assert walk.next("SCOUT=http://127.0.0.1:8090")

        # 1. The Games' reference.
        said = await me.type(
            walk.next(".venv/bin/python -m omnium_imports reference load $SCOUT/control/reference")
        )
        assert "loaded AG2026 (Aichi-Nagoya 2026, Asia/Tokyo)" in said
        assert "1,587 competitors" in said

        # 2. The integration, from a copy of the example; this Scout is not the dev stack's,
        # so its scout_url is set, as the step says.
        await me.type(walk.next("cp services/imports/examples/integration.json integration.json"))
        me.set_scout_url("integration.json")
        said = await me.type(
            walk.next(".venv/bin/python -m omnium_imports integration add integration.json")
        )
        assert f"added {CODE} (unit, event AG2026, Scout {me.sim.base_url} job schedule)" in said
        assert "mapping version 1, paused" in said

        # 3. Who is who.
        said = await me.type(
            walk.next(
                f".venv/bin/python -m omnium_imports lookups add {CODE} "
                "--from-reference $SCOUT/control/reference"
            )
        )
        assert f"added 1,587 competitor lookups to {CODE}" in said

        # 4. The check: every row would be accepted, and nothing is written.
        said = await me.type(walk.next(f".venv/bin/python -m omnium_imports mapping check {CODE}"))
        assert f"Compared with our data by the command service at {me.command_address}" in said
        assert f"{ROWS:,} rows: accepted {ROWS:,}" in said
        assert await me.db.fetchval("SELECT count(*) FROM unit") == 0
        assert await me.db.fetchval("SELECT count(*) FROM integration_run") == 0

        # 5. A mapping of one's own: the default copied, Scout's word "Finished" added (the
        # edit the step describes), checked, published.
        await me.type(
            walk.next(
                "cp services/imports/omnium_imports/mappings/scout_units.json my-mapping.json"
            )
        )
        mine = json.loads((me.folder / "my-mapping.json").read_text())
        status = next(s for s in mine["steps"] if s["op"] == "map" and s["field"] == "status")
        status["table"]["FINISHED"] = "OFFICIAL"
        (me.folder / "my-mapping.json").write_text(json.dumps(mine, indent=2))
        said = await me.type(
            walk.next(
                f".venv/bin/python -m omnium_imports mapping check {CODE} --file my-mapping.json"
            )
        )
        assert f"{ROWS:,} rows: accepted {ROWS:,}" in said
        said = await me.type(
            walk.next(
                f".venv/bin/python -m omnium_imports mapping publish {CODE} my-mapping.json "
                '--note "Scout says Finished"'
            )
        )
        assert f"{CODE} now maps with version 2 (it was 1)" in said

        # 6. On: the imports service reads Scout's newest run at once.
        said = await me.type(
            walk.next(f".venv/bin/python -m omnium_imports integration resume {CODE}")
        )
        assert f"{CODE} is on; check queued as job" in said

        # 7. The first run, done, with its rows accepted.
        run = await _finished_run(me.db)
        assert run["status"] == "done", run["reason"]
        assert run["outcomes"] == {"accepted": ROWS}
        assert run["version"] == 2
        assert await me.db.fetchval("SELECT count(*) FROM unit") == ROWS
        said = await me.type(
            walk.next(f".venv/bin/python -m omnium_imports integration show {CODE}")
        )
        assert re.search(rf"runs\s+done, {ROWS:,} rows, .* \(accepted {ROWS:,}\)", said), said
        assert "v2 " in said and "Scout says Finished" in said
        assert "1,587 competitor" in said
        said = await me.type(walk.next(".venv/bin/python -m omnium_imports integration list"))
        assert re.search(rf"{CODE}\s+on\s+unit\s+done, {ROWS:,} rows", said), said
    assert walk.left == [], "commands of the walkthrough this test does not run"


async def test_pause_and_resume_from_the_command_line(database_url: str, tmp_path: Path) -> None:
    """While paused, no run starts: Scout's doorbell is answered that it is paused and a check
    reads nothing, so our data stays as it was; resume reads Scout's newest run at once."""
    walk = Walkthrough(typed_commands(readme_section("### Pause and resume")))
    async with newcomer(database_url, tmp_path, doorbell=True) as me:
        await _first_done_run(me)
        moved = me.sim.reference()["units"][7]["externalId"]

        said = await me.type(
            walk.next(f".venv/bin/python -m omnium_imports integration pause {CODE}")
        )
        assert said.strip() == (
            f"{CODE} is paused: Scout's doorbells and the scheduler's checks start no run, so "
            "nothing from Scout is read or written until `python -m omnium_imports integration "
            f"resume {CODE}`, which reads Scout's newest run at once."
        )
        # Scout moves a unit and rings: the answer says paused, and nothing is queued.
        me.sim.reschedule(moved, venue="Moved While Paused")
        newest = await me.sim.make_run("schedule", wait_doorbell=True)
        rang = me.sim.deliveries[-1]
        # A check queued all the same (as the scheduler had, just before the pause) reads
        # nothing either.
        integration_id = await me.db.fetchval("SELECT id::text FROM integration")
        check = await enqueue_check(me.db, integration_id, "scheduler")
        checked = await query_until(
            me.db,
            "SELECT error FROM integration_job WHERE id = $1 AND status = 'done'",
            check,
            within=30,
        )
        runs_while_paused = await me.db.fetchval("SELECT count(*) FROM integration_run")
        moved_while_paused = await _venue(me.db, moved)
        shown = await me.type(".venv/bin/python -m omnium_imports integration show " + CODE)
        listed = await me.type(".venv/bin/python -m omnium_imports integration list")

        said = await me.type(
            walk.next(f".venv/bin/python -m omnium_imports integration resume {CODE}")
        )
        resumed = await query_until(
            me.db,
            "SELECT coalesce(reason, status) FROM integration_run WHERE scout_run_id = $1 "
            "AND status NOT IN ('received', 'applying')",
            newest.id,
            within=60,
        )
        moved_after = await _venue(me.db, moved)
    assert walk.left == []
    assert (rang.run_id, rang.status) == (newest.id, 200)
    assert rang.answer == {"queued": False, "reason": "the integration is paused"}
    assert checked == "the integration is paused"
    assert runs_while_paused == 1
    assert moved_while_paused != "Moved While Paused"
    assert re.search(r"state\s+paused", shown), shown
    assert re.search(rf"{CODE}\s+paused\s+unit\s+done, {ROWS:,} rows", listed), listed
    assert f"{CODE} is on; check queued as job" in said
    assert resumed == "done"
    assert moved_after == "Moved While Paused"


async def _first_done_run(me: Newcomer) -> None:
    """The walkthrough's steps, short: the reference, the integration, lookups, on; one run."""
    reference = f"{me.sim.base_url}/control/reference"
    await me.run("reference", "load", reference)
    await me.type("cp services/imports/examples/integration.json integration.json")
    me.set_scout_url("integration.json")
    await me.run("integration", "add", "integration.json")
    await me.run("lookups", "add", CODE, "--from-reference", reference)
    await me.run("integration", "resume", CODE)
    run = await _finished_run(me.db)
    assert run["status"] == "done", run["reason"]


async def _venue(db: asyncpg.Connection, external_id: str) -> str | None:
    venue: str | None = await db.fetchval(
        "SELECT u.venue FROM unit u JOIN integration_key_state k ON k.subject_id = u.id "
        "WHERE k.subject_key = $1",
        external_id,
    )
    return venue


async def _finished_run(db: asyncpg.Connection, seconds: float = 60) -> asyncpg.Record:
    run: asyncpg.Record = await eventually(
        lambda: db.fetchrow(
            "SELECT status, reason, outcomes, version FROM integration_run "
            "WHERE status NOT IN ('received', 'applying')"
        ),
        until=lambda run: run is not None,
        within=seconds,
        every=0.1,
        what="a run to finish after `integration resume`",
    )
    return run


async def test_the_check_says_which_words_the_mapping_lacks_and_fails(
    database_url: str, tmp_path: Path
) -> None:
    """A mapping that knows only Scout's old spelling: every row is a problem, said once with
    its count, and the check exits 1 before anything is turned on."""
    async with newcomer(database_url, tmp_path, command_up=False) as me:
        reference = f"{me.sim.base_url}/control/reference"
        example = json.loads((EXAMPLES / "integration.json").read_text())
        (tmp_path / "integration.json").write_text(
            json.dumps({**example, "scout_url": me.sim.base_url})
        )
        await me.run("reference", "load", reference)
        await me.run("integration", "add", "integration.json")
        await me.run("lookups", "add", CODE, "--from-reference", reference)
        strict = json.loads(DEFAULT_UNITS.read_text())
        status = next(s for s in strict["steps"] if s["op"] == "map" and s["field"] == "status")
        del status["case"]
        status["table"] = {"Scheduled": "SCHEDULED"}
        (tmp_path / "strict.json").write_text(json.dumps(strict))
        said = await me.run("mapping", "check", CODE, "--file", "strict.json", expect=1)
    # The command service is not there: the rows are mapped only, and it says so.
    assert "Mapped only, not compared with our data" in said
    assert "the command service at 127.0.0.1:9 did not answer" in said
    assert f"{ROWS:,} rows: problem {ROWS:,}" in said
    assert (
        f"{ROWS:,} × status 'SCHEDULED' is not in the mapping's table (it knows Scheduled); "
        "add it to the table, or ask Scout what it means"
    ) in said
    assert f"{ROWS:,} rows would not be written" in said


async def test_a_medal_table_integration_from_the_same_commands(
    database_url: str, tmp_path: Path
) -> None:
    async with newcomer(database_url, tmp_path) as me:
        finals = [u for u in me.sim.reference()["units"] if "Final" in u["unitName"]][:30]
        for unit in finals:
            me.sim.mark_official(unit["externalId"])
        table = me.sim.medal_table()
        assert len(table) >= 5
        await me.sim.make_run("medals")
        (tmp_path / "medals.json").write_text(
            json.dumps(
                {
                    "code": "games-medals",
                    "event": "AG2026",
                    "name": "Scout: medal table",
                    "scout_url": me.sim.base_url,
                    "scout_job": "medals",
                    "secret": "a-long-enough-secret",
                    "mapping": "scout_medals",
                    "check_seconds": 60,
                }
            )
        )
        await me.run("reference", "load", f"{me.sim.base_url}/control/reference")
        said = await me.run("integration", "add", "medals.json")
        assert "added games-medals (medal_row, event AG2026" in said
        said = await me.run("mapping", "check", "games-medals")
        assert f"{len(table)} rows: accepted {len(table)}" in said
        # With the wrong token the command service refuses the dry run: said, exit 1.
        wrong = Newcomer(
            me.env | {"OMNIUM_GRPC_TOKEN": "not-the-token"},
            tmp_path,
            me.sim,
            me.db,
            me.command_address,
        )
        said = await wrong.run("mapping", "check", "games-medals", expect=1)
        assert "the command service: " in said and "OMNIUM_GRPC_TOKEN" in said
        await me.run("integration", "resume", "games-medals")
        run = await _finished_run(me.db)
        rows = await me.db.fetchval("SELECT count(*) FROM medal_row")
    assert (run["status"], run["outcomes"]) == ("done", {"accepted": len(table)})
    assert rows == len(table)


async def test_bad_files_exit_2_naming_the_line_and_field_and_write_nothing(
    database_url: str, tmp_path: Path
) -> None:
    async with newcomer(database_url, tmp_path) as me:
        (tmp_path / "reference.json").write_text(
            '{\n  "event": {"code": "AG2026", "name": "Games", "timeZone": "Asia/Tokyo"},\n'
            '  "disciplines": [{"code": "ATH", "name": "Athletics"}],\n'
            '  "competitors": [\n'
            '    {"externalId": "SC-P-1", "name": "A", "noc": "Korea"}\n'
            "  ]\n}\n"
        )
        said = await me.run("reference", "load", "reference.json", expect=2)
        assert (
            "reference.json, line 5 (competitors[0].noc): the NOC 'Korea' must be three capital "
            "letters, like KOR"
        ) in said
        assert "Nothing was written." in said
        assert await me.db.fetchval("SELECT count(*) FROM event") == 0

        # An integration for an event not loaded yet names the event's line.
        example = json.loads((EXAMPLES / "integration.json").read_text())
        (tmp_path / "integration.json").write_text(json.dumps(example, indent=2))
        said = await me.run("integration", "add", "integration.json", expect=2)
        assert (
            "integration.json, line 3 (event): there is no event 'AG2026'; load its reference "
            "first (python -m omnium_imports reference load FILE)"
        ) in said
        assert await me.db.fetchval("SELECT count(*) FROM integration") == 0

        # Lookups naming a competitor we do not have name its line; none is added.
        await me.run("reference", "load", str(EXAMPLES / "reference.json"))
        await me.run("integration", "add", "integration.json")
        (tmp_path / "lookups.csv").write_text(
            "scout_id,ours\nSC-T-KOR3,SC-T-0002\nSC-P-9,SC-P-99999\n"
        )
        said = await me.run("lookups", "add", CODE, "lookups.csv", expect=2)
        assert (
            "lookups.csv, line 3 (ours): we have no competitor 'SC-P-99999' in this "
            "integration's event"
        ) in said
        assert await me.db.fetchval("SELECT count(*) FROM integration_lookup") == 0
        said = await me.run("lookups", "add", CODE, str(EXAMPLES / "lookups.csv"))
        assert f"added 2 competitor lookups to {CODE}" in said

        # A mapping with a broken step names the step's line; the version stays.
        (tmp_path / "broken.json").write_text(
            '{\n  "target": "unit",\n  "steps": [\n    {"op": "read", "path": "rsc"}\n  ]\n}\n'
        )
        said = await me.run("mapping", "publish", CODE, "broken.json", expect=2)
        assert (
            "broken.json, line 4 (steps[0]): step 1 (read): it needs 'to': the output field "
            "to write"
        ) in said
        assert await me.db.fetchval("SELECT current_version FROM integration") == 1
        said = await me.run("integration", "show", "no-such-code", expect=2)
        assert "there is no integration 'no-such-code'" in said


async def test_the_python_api_works_on_a_plain_connection(
    database_url: str, tmp_path: Path
) -> None:
    """No omnium_db.init_connection first: the JSON travels as text (asyncpg's DataError)."""
    sim = ScoutSimulator()
    conn = await asyncpg.connect(database_url)
    try:
        ours = await load_reference(conn, sim.reference())
        spec = IntegrationSpec(
            code=CODE,
            event_code="AG2026",
            name="Scout: schedule and results",
            target="unit",
            base_url="http://127.0.0.1:8090",
            job="schedule",
            secret="a-long-enough-secret",
            mapping=mapping_file("scout_units"),
            creates_units=True,
        )
        integration = await register_integration(conn, spec)
        await add_lookups(conn, integration, "competitor", ours)
        # The same mapping again adds no version; a changed one does.
        assert await register_integration(conn, spec) == integration
        changed = mapping_file("scout_units")
        changed["source"] = "Scout (site B)"
        assert await add_version(conn, integration, changed, "site B") == (2, True)
        assert await add_version(conn, integration, changed) == (2, False)
        stored = await conn.fetchval(
            "SELECT spec::text FROM integration_version WHERE integration_id = $1 AND version = 2",
            integration,
        )
        with pytest.raises(SetupError, match="reference first"):
            await register_integration(
                conn, IntegrationSpec(**{**_fields(spec), "event_code": "XX2"})
            )
        with pytest.raises(SetupError, match=r"competitors\[0\]\.noc: the NOC 'Korea'"):
            await load_reference(
                conn,
                {
                    "event": {"code": "AG2026", "name": "G", "timeZone": "Asia/Tokyo"},
                    "disciplines": [],
                    "competitors": [{"externalId": "X", "name": "Y", "noc": "Korea"}],
                },
            )
        lookups = await conn.fetchval(
            "SELECT count(*) FROM integration_lookup WHERE integration_id = $1", integration
        )
    finally:
        await conn.close()
    assert json.loads(stored)["source"] == "Scout (site B)"
    assert lookups == len(ours) == 1_587


def _fields(spec: IntegrationSpec) -> dict[str, object]:
    return {name: getattr(spec, name) for name in spec.__slots__}


async def test_serve_and_no_command_both_start_the_service(
    database_url: str, tmp_path: Path
) -> None:
    settings = {"OMNIUM_DATABASE_URL": database_url, "OMNIUM_GRPC_TOKEN": TOKEN}
    env = terminal_env("127.0.0.1:9", **settings) | {
        "OMNIUM_DOORBELL_PORT": "0",
        "OMNIUM_IMPORTS_PORT": "0",
        "OMNIUM_GRPC_CALLERS": CALLERS_ENV,
        "OMNIUM_LOG_LEVEL": "INFO",
    }
    for argv in ([], ["serve"]):
        log = tmp_path / f"imports-{len(argv)}.log"
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "omnium_imports", *argv, env=env, stdout=out, stderr=out
            )
        try:
            port = await _doorbell_port(log, process)
            async with httpx.AsyncClient() as http:
                health = await http.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
            assert health.status_code == 200, health.text
        finally:
            process.terminate()
            async with asyncio.timeout(30):
                code = await process.wait()
        assert code == 0, log.read_text()
    # With another word it is the command line, and says what it knows.
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "omnium_imports", "intgration", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await process.communicate()
    assert process.returncode == 2
    assert "invalid choice: 'intgration'" in err.decode()


async def _doorbell_port(log: Path, process: asyncio.subprocess.Process) -> int:
    def said() -> re.Match[str] | None:
        found = re.search(r"doorbell on http://[^:]+:(\d+)", _text(log))
        if not found and process.returncode is not None:
            raise AssertionError(f"the service did not start:\n{_text(log)}")
        return found

    found = await eventually(said, within=30, what="the service to say its doorbell port")
    assert found is not None
    return int(found[1])


def _text(log: Path) -> str:
    return log.read_text()
