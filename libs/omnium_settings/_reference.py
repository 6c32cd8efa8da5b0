"""The settings reference, docs/settings.md, written from the Settings class and its sections."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from dataclasses import fields

from omnium_settings._settings import PREFIX, Settings, describe_settings

HOW_TO_REGENERATE = "make docs"

# A section of the class opens with a comment `# -- Title (where it comes from) ----`.
_SECTION = re.compile(r"^\s*# -- (?P<title>.+?) -+\s*$")

_INTRO = """\
# Settings

Generated from `omnium_settings.Settings` (libs/omnium_settings) by `{regenerate}`; do not edit by
hand. `tests/unit/test_readme.py` fails when this page and the class disagree.

Every setting is an environment variable read once at start-up; an `OMNIUM_` name that is not a
setting stops the process with a suggestion, so a typo never silently keeps a default. The
variable is `OMNIUM_` + the field's name in capitals; a new setting is a field with its default
and a one-line doc, then `{regenerate}`.

{contents}
"""


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def sections() -> list[tuple[str, str, list[tuple[str, str, str]]]]:
    """(title, note, rows) for each commented section of the class, in the class's order."""
    source = textwrap.dedent(inspect.getsource(Settings))
    lines = source.splitlines()
    described = {row[0]: row for row in describe_settings()}
    names = {f.name for f in fields(Settings) if PREFIX + f.name.upper() in described}
    cls = ast.parse(source).body[0]
    assert isinstance(cls, ast.ClassDef)
    field_lines = [
        (node.lineno, node.target.id)
        for node in cls.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id in names
    ]
    headings = [
        (number, match["title"])
        for number, line in enumerate(lines, start=1)
        if (match := _SECTION.match(line))
    ]
    result: list[tuple[str, str, list[tuple[str, str, str]]]] = []
    for index, (start, heading) in enumerate(headings):
        end = headings[index + 1][0] if index + 1 < len(headings) else len(lines) + 1
        title, _, rest = heading.partition(" (")
        note = rest.removesuffix(")") if rest else ""
        rows = [
            described[PREFIX + name.upper()] for number, name in field_lines if start < number < end
        ]
        result.append((title, note, rows))
    placed = sum(len(rows) for _, _, rows in result)
    if placed != len(names):
        raise RuntimeError(
            f"{len(names) - placed} settings sit before the first '# -- Title --' comment of "
            "Settings; put every field under a section comment."
        )
    return result


def settings_markdown() -> str:
    """docs/settings.md as it should be: one table per section of the class."""
    parts = sections()
    contents = "\n".join(f"- [{title}](#{slug(title)})" for title, _, _ in parts)
    out = [_INTRO.format(regenerate=HOW_TO_REGENERATE, contents=contents)]
    for title, note, rows in parts:
        out.append(f"## {title}\n")
        if note:
            out.append(f"({note})\n")
        out.append("| variable | default | what it does |")
        out.append("|---|---|---|")
        out.extend(f"| `{name}` | `{default}` | {doc} |" for name, default, doc in rows)
        out.append("")
    return "\n".join(out)
