"""The README and docs/settings.md stay true: the two commands, every setting and its default."""

from __future__ import annotations

from pathlib import Path

from omnium_settings import describe_settings, settings_markdown

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
SETTINGS_PAGE = (REPO / "docs" / "settings.md").read_text()


def test_the_two_commands_are_there() -> None:
    assert "make run" in README and "make test" in README


def test_the_readme_is_read_in_ten_minutes() -> None:
    """Detail belongs in each service's README; the root one stays under 250 lines."""
    assert len(README.splitlines()) < 250


def test_the_readme_sends_readers_to_the_settings_page() -> None:
    assert "(docs/settings.md)" in README


def test_the_settings_page_is_what_the_settings_class_makes() -> None:
    assert settings_markdown() == SETTINGS_PAGE, (
        "docs/settings.md is not what omnium_settings.Settings makes now: run `make docs` "
        "(python -m omnium_settings --markdown > docs/settings.md) and commit the page."
    )


def test_every_setting_is_listed_with_its_default() -> None:
    missing = [
        name
        for name, default, _ in describe_settings()
        if f"| `{name}` | `{default}` |" not in SETTINGS_PAGE
    ]
    assert missing == []
