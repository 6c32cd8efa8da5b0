"""Who may do what, on the operators' console in headless Chromium: scorers given matches and
venue-days, accounts made, changed, turned off and signed out everywhere, and client API keys
the real gateway takes and refuses. One stack for the module."""

from __future__ import annotations

import pytest
from playwright.async_api import expect

from omnium_accounts import SignInRefused, hash_key
from tests.support.admin_console import PASSWORD, Console
from tests.support.gateway import RunningGateway, running_gateway
from tests.support.servers import Servers
from tests.support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


async def test_an_admin_makes_a_scorer_account_and_signs_a_lost_tablet_out(
    console: Console,
) -> None:
    accounts = console.app.console.accounts
    page = await console.page("ada")
    try:
        await page.get_by_role("link", name="Accounts").click()
        await expect(page.get_by_role("heading", name="Accounts")).to_be_visible()
        new = page.locator("#new-account")
        await new.get_by_label("Login").fill("court3")
        await new.get_by_label("Name").fill("Court 3 tablet")
        await new.get_by_label("Role").select_option("scorer")
        await new.get_by_label("Password", exact=True).fill(PASSWORD)
        await new.get_by_label("Password again").fill(PASSWORD + "x")
        await new.get_by_role("button", name="Make the account").click()
        # Two different passwords: nothing made, the form keeps what was typed but them.
        await expect(page.locator("#accounts-error")).to_contain_text("the two passwords differ")
        await expect(new.get_by_label("Login")).to_have_value("court3")
        await new.get_by_label("Password", exact=True).fill(PASSWORD)
        await new.get_by_label("Password again").fill(PASSWORD)
        await new.get_by_role("button", name="Make the account").click()
        await expect(page.get_by_role("status")).to_have_text("Made the scorer account court3.")
        row = page.locator('[data-account="court3"]')
        await expect(row).to_contain_text("Court 3 tablet")

        # The tablet signs in twice (the scorer console's sign-in), then goes missing.
        for _ in range(2):
            await accounts.sign_in("court3", PASSWORD, screen="scorer-console", address="127.0.0.1")
        await page.reload()
        await expect(row.locator("[data-sessions]")).to_contain_text("2 open")
        await row.get_by_role("button", name="Sign court3 out everywhere").click()
        await expect(page.get_by_role("status")).to_contain_text("2 sessions ended")
        await expect(row.locator("[data-sessions]")).to_contain_text("0 open")

        await row.get_by_role("button", name="Turn court3 off").click()
        await expect(page.get_by_role("status")).to_contain_text("Turned court3 off")
        await expect(row.locator("[data-sign-in]")).to_contain_text("Off")
        await expect(row.locator("[data-last-change]")).to_contain_text("off by Ada Admin")
        with pytest.raises(SignInRefused):
            await accounts.sign_in("court3", PASSWORD, screen="scorer-console", address="127.0.0.1")
        await console.shot(page, "accounts")
        await row.get_by_role("button", name="Turn court3 on").click()
        await expect(row.locator("[data-sign-in]")).not_to_contain_text("Off")

        # A new password, and a role: the scorer becomes an operator with its new password.
        await row.get_by_label("New password for court3", exact=True).fill(PASSWORD + " 2")
        await row.get_by_label("Again", exact=True).fill(PASSWORD + " 2")
        await row.get_by_role("button", name="Set the new password for court3").click()
        await expect(page.get_by_role("status")).to_contain_text("Set a new password for court3")
        await row.get_by_label("Role of court3", exact=True).select_option("operator")
        await row.get_by_role("button", name="Change the role of court3").click()
        await expect(page.get_by_role("status")).to_have_text("court3 is now an operator.")
        signed = await accounts.sign_in(
            "court3", PASSWORD + " 2", screen="admin", address="127.0.0.1"
        )
        assert signed.account.role == "operator"

        # Your own account cannot be turned off or demoted from here.
        mine = page.locator('[data-account="ada"]')
        await expect(mine.get_by_role("button", name="Turn ada off")).to_have_count(0)
        status = await page.evaluate(
            """async () => {
                const token = document.querySelector('input[name=csrf_token]').value;
                const body = new URLSearchParams({csrf_token: token});
                return (await fetch('/accounts/ada/off', {method: 'POST', body})).status;
            }"""
        )
        assert status == 400
    finally:
        await page.close()
    views = {v.login: v for v in await accounts.overview()}
    assert not views["ada"].disabled and views["court3"].role == "operator"


async def test_accounts_are_for_admins_only(console: Console) -> None:
    page = await console.page("ana")
    try:
        await expect(page.get_by_role("link", name="Accounts")).to_have_count(0)
        await page.goto(f"{console.url}/accounts")
        await expect(page.get_by_role("heading", name="Only for admins")).to_be_visible()
        await expect(page.locator("main")).to_contain_text("Your account is an operator")
    finally:
        await page.close()


async def test_an_admin_makes_a_client_key_the_gateway_takes_and_turns_it_off(
    console: Console, servers: Servers
) -> None:
    async with running_gateway(
        console.day.database_url,
        servers.redis_url,
        gateway_anonymous_reads=False,
        gateway_keys_reload_seconds=0.2,
    ) as gw:
        page = await console.page("ada")
        try:
            await page.get_by_role("link", name="API keys").click()
            form = page.locator("#make-key")
            await form.get_by_label("Client").fill("dailyhunt")
            await form.get_by_label("Requests a second").fill("fast")
            await form.get_by_role("button", name="Make the key").click()
            await expect(page.locator("#keys-error")).to_contain_text("'fast' is not a number")
            await form.get_by_label("Requests a second").fill("50")
            await form.get_by_label("Burst").fill("200")
            await form.get_by_role("button", name="Make the key").click()
            shown = page.locator("#new-key [data-key]")
            await expect(shown).to_be_visible()
            key = (await shown.text_content() or "").strip()
            assert len(key) >= 24
            row = page.locator('[data-key-name="dailyhunt"]')
            await expect(row).to_contain_text("50 a second, bursts of 200")
            await expect(row).to_contain_text("by Ada Admin")
            await console.shot(page, "api-keys")
            # The gateway lets it in without a restart, and refuses it once it is off.
            await eventually(lambda: _answers(gw, key, 200), what="the new key let in")
            await row.get_by_role("button", name="Turn the key dailyhunt off").click()
            await expect(page.get_by_role("status")).to_contain_text("Turned the key dailyhunt off")
            await expect(row.locator("[data-state]")).to_contain_text("Off")
            await eventually(lambda: _answers(gw, key, 401), what="the key refused")
            # Shown once: a reload shows the list, never the key.
            await page.reload()
            assert key not in await page.content()
        finally:
            await page.close()
    stored = await console.day.db.fetchval("SELECT key_hash FROM api_key WHERE name = 'dailyhunt'")
    assert stored == hash_key(key)


async def _answers(gw: RunningGateway, key: str, status: int) -> bool:
    return bool((await gw.get("/v1/events", headers={"X-API-Key": key})).status_code == status)


async def test_an_operator_gives_a_scorer_a_match_and_a_venue_day_and_hands_one_over(
    console: Console,
) -> None:
    db = console.day.db
    units = await db.fetch(
        "SELECT u.id::text AS id, u.code, u.name, u.venue, "
        "       (u.start_at AT TIME ZONE e.time_zone)::date::text AS day "
        "  FROM unit u JOIN event e ON e.id = u.event_id "
        " WHERE u.venue IS NOT NULL AND u.start_at IS NOT NULL ORDER BY u.start_at, u.code LIMIT 2"
    )
    first, second = units
    await console.app.console.accounts.create("ben", "Ben Ode", "scorer", PASSWORD)
    page = await console.page("ana")
    try:
        await page.get_by_role("link", name="Scorers").click()
        await expect(page.get_by_role("heading", name="Scorers", exact=True)).to_be_visible()
        await expect(page.locator("[data-assignment=on]")).to_be_visible()
        form = page.locator("#assign-form")
        # A unit code that is not there: nothing written, the form keeps what was typed.
        await form.get_by_label("Scorer", exact=True).select_option("sam")
        await form.get_by_label("Match: its unit code").fill("NOSUCHUNIT")
        await form.get_by_role("button", name="Assign").click()
        await expect(page.locator("#scorers-error")).to_contain_text(
            "Nothing was changed: unit: AG2026 has no unit 'NOSUCHUNIT'"
        )
        await expect(form.get_by_label("Match: its unit code")).to_have_value("NOSUCHUNIT")
        await form.get_by_label("Match: its unit code").fill(first["code"])
        await form.get_by_role("button", name="Assign").click()
        await expect(page.get_by_role("status")).to_have_text(
            f"Sam Scorer (sam) scores {first['name']}."
        )
        await form.get_by_label("Scorer", exact=True).select_option("sam")
        await form.get_by_label("Venue").fill(second["venue"])
        await form.get_by_label("Day").fill(second["day"])
        await form.get_by_role("button", name="Assign").click()
        await expect(page.get_by_role("status")).to_have_text(
            f"Sam Scorer (sam) scores {second['venue']} on {second['day']}."
        )
        # Handed over mid-Games: Ben alone scores the first match now.
        await form.get_by_label("Scorer", exact=True).select_option("ben")
        await form.get_by_label("Match: its unit code").fill(first["code"])
        await form.get_by_label("Hand over").check()
        await form.get_by_role("button", name="Assign").click()
        await expect(page.get_by_role("status")).to_have_text(
            f"Ben Ode (ben) scores {first['name']}; handed over from 1 other scorer(s)."
        )
        rows = page.locator("table.assignments tbody tr")
        await expect(rows).to_have_count(2)
        await expect(rows.nth(0)).to_contain_text("Ben Ode")
        await expect(rows.nth(0)).to_contain_text(first["code"])
        await expect(rows.nth(1)).to_contain_text(f"{second['venue']} · {second['day']}")
        await console.shot(page, "scorers")
        await rows.nth(1).get_by_role("button").click()
        await expect(page.get_by_role("status")).to_have_text(
            f"sam no longer scores {second['venue']} on {second['day']}."
        )
        await expect(rows).to_have_count(1)
    finally:
        await page.close()
    assigned = await db.fetch(
        "SELECT a.login, s.unit_id::text, s.assigned_by FROM scorer_assignment s "
        "JOIN account a ON a.id = s.account_id"
    )
    assert [tuple(r) for r in assigned] == [("ben", first["id"], "Ana Operator")]
    changes = await db.fetch(
        "SELECT login, change, by_name FROM account_change "
        "WHERE change LIKE 'assigned%' OR change LIKE 'unassigned%' ORDER BY id"
    )
    assert [tuple(c) for c in changes] == [
        ("sam", f"assigned {first['code']}", "Ana Operator"),
        ("sam", f"assigned {second['venue']} on {second['day']}", "Ana Operator"),
        ("ben", f"assigned {first['code']}", "Ana Operator"),
        ("sam", f"unassigned {second['venue']} on {second['day']}", "Ana Operator"),
    ]
    # Viewers read the other screens, but who scores what is for operators and admins.
    page = await console.page("vic")
    try:
        await expect(page.get_by_role("link", name="Scorers")).to_have_count(0)
        await page.goto(f"{console.url}/scorers")
        await expect(page.get_by_role("heading", name="Only for operators")).to_be_visible()
    finally:
        await page.close()
