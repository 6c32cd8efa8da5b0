"""The README stays true: the two commands, and every setting with its default."""

from __future__ import annotations

from pathlib import Path

from omnium_settings import describe_settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_the_two_commands_are_there() -> None:
    assert "make run" in README and "make test" in README


def test_every_setting_is_listed_with_its_default() -> None:
    missing = [
        name
        for name, default, _ in describe_settings()
        if f"| `{name}` | `{default}` |" not in README
    ]
    assert missing == []
