"""OMNIUM_GRPC_CALLERS read into callers: a plain start-up error for each way it can be wrong,
two tokens for a caller being rotated, and who a command is recorded as."""

from __future__ import annotations

import pytest

from omnium.common.v1 import actor_pb2
from omnium_grpc import ROLES, Caller, Callers
from omnium_settings import Settings, SettingsError

PERSON = actor_pb2.Actor(
    kind=actor_pb2.Actor.KIND_PERSON, name="Ana Silva", source_code="account:3", screen="x"
)


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@pytest.mark.parametrize(
    ("items", "said"),
    [
        (["stats-team:reader"], "write each caller as name:role:token"),
        (["just-a-secret-token"], "an item of 1 part(s)"),
        (["stats-team:readers:s3cret"], "the role 'readers', which omnium does not know"),
        (
            ["feed:provider:a1", "feed:reader:a2"],
            "gives caller 'feed' two roles (provider and reader)",
        ),
        (["a:reader:same", "b:reader:same"], "gives callers 'a' and 'b' the same token"),
    ],
)
def test_a_wrong_callers_list_stops_start_up_in_plain_words(items: list[str], said: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Callers.parse(items)
    assert said in str(raised.value)
    assert "s3cret" not in str(raised.value) and "just-a-secret" not in str(raised.value)


def test_a_server_needing_tokens_with_no_callers_says_what_to_set() -> None:
    with pytest.raises(SettingsError) as raised:
        Callers.from_settings(Settings.from_env({}), server="command")
    assert "command: OMNIUM_GRPC_CALLERS is empty" in str(raised.value)
    assert (
        Callers.from_settings(Settings.from_env({}, grpc_auth_required=False), server="x") is None
    )


def test_a_caller_listed_twice_has_both_tokens_while_one_is_rotated() -> None:
    callers = Callers.parse(["feed:provider:old", "feed:provider:new", "stats:reader:s"])
    found = [callers.identify(_bearer(t)) for t in ("old", "new", "s", "gone")]
    assert [c.name if isinstance(c, Caller) else c for c in found] == [
        "feed",
        "feed",
        "stats",
        "the bearer token is not one this service accepts",
    ]
    assert callers.identify(None) == (
        "this call needs 'authorization: Bearer <token>'; no token was sent"
    )


def test_who_a_command_is_recorded_as_depends_on_the_role() -> None:
    feed = Caller("results-feed", ROLES["provider"])
    console = Caller("admin-console", ROLES["operator-console"])
    imports = Caller("imports", ROLES["service"])
    posing = feed.recorded(PERSON)
    assert (posing.kind, posing.name, posing.source_code, posing.screen) == (
        actor_pb2.Actor.KIND_PROVIDER,
        "results-feed",
        "caller:results-feed",
        "x",
    )
    assert console.recorded(PERSON) == PERSON
    robot = actor_pb2.Actor(kind=actor_pb2.Actor.KIND_INTEGRATION, name="integration:scout")
    assert console.recorded(robot).name == "admin-console"
    assert imports.recorded(robot) == robot
    assert imports.recorded(actor_pb2.Actor()) == actor_pb2.Actor()
