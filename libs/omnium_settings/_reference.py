"""The settings reference, docs/settings.md: a table per section of the Settings class."""

from __future__ import annotations

import re
from dataclasses import fields

from omnium_settings._settings import PREFIX, describe_settings, env_name, sections

HOW_TO_REGENERATE = "make docs"

_INTRO = """\
# Settings

Generated from `omnium_settings.Settings` (libs/omnium_settings) by `{regenerate}`; do not edit by
hand. `tests/unit/test_readme.py` fails when this page and the class disagree.

Every setting is an environment variable read once at start-up; an `OMNIUM_` name that is not a
setting stops the process with a suggestion, so a typo never silently keeps a default. Settings
come in sections, one per service or shared concern; in code a setting is read as
`settings.<section>.<field>` (`settings.imports.scout_page_size`). The variable is `OMNIUM_` + the
field's `env` name, or its own name where it has none, in capitals; a new setting is a field in
its section with its default and a one-line doc, then `{regenerate}`.

{contents}
"""


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def _sections() -> list[tuple[str, str, list[tuple[str, str, str, str]]]]:
    """(title, note, rows) for each section of Settings, in the class's order; the title and
    note come from the section class's docstring, "Title (where it comes from).". A row is
    (variable, default, where code reads it, what it does)."""
    described = {name: (default, doc) for name, default, doc in describe_settings()}
    result: list[tuple[str, str, list[tuple[str, str, str, str]]]] = []
    for section, cls in sections():
        heading = (cls.__doc__ or cls.__name__).strip().removesuffix(".")
        title, _, rest = heading.partition(" (")
        rows = []
        for f in fields(cls):
            name = PREFIX + env_name(f).upper()
            default, doc = described[name]
            rows.append((name, default, f"{section}.{f.name}", doc))
        result.append((title, rest.removesuffix(")"), rows))
    return result


def settings_markdown() -> str:
    """docs/settings.md as it should be: one table per section of the class."""
    parts = _sections()
    contents = "\n".join(f"- [{title}](#{slug(title)})" for title, _, _ in parts)
    out = [_INTRO.format(regenerate=HOW_TO_REGENERATE, contents=contents)]
    for title, note, rows in parts:
        out.append(f"## {title}\n")
        if note:
            out.append(f"({note})\n")
        out.append("| variable | default | in code: `settings.` | what it does |")
        out.append("|---|---|---|---|")
        out.extend(
            f"| `{name}` | `{default}` | `{field}` | {doc} |" for name, default, field, doc in rows
        )
        out.append("")
    return "\n".join(out)
