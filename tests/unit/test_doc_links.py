"""Every relative link in the READMEs and docs/ leads to a file that exists (and its heading)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parents[2]

# Generated, installed or local data: not the project's own pages.
SKIPPED_FOLDERS = {"node_modules", "artifacts", "omnium_contract", "__pycache__"}

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_INLINE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def markdown_pages() -> list[Path]:
    pages = []
    for folder, subfolders, files in os.walk(REPO):
        subfolders[:] = [
            name for name in subfolders if not name.startswith(".") and name not in SKIPPED_FOLDERS
        ]
        pages.extend(Path(folder) / name for name in files if name.endswith(".md"))
    return sorted(pages)


def links(text: str) -> list[str]:
    prose = _CODE_SPAN.sub("", _FENCE.sub("", text))
    return _INLINE.findall(prose) + _REFERENCE.findall(prose)


def anchors(text: str) -> set[str]:
    """The anchors GitHub makes of a page's headings (a repeated one gets -1, -2...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
        base = re.sub(r"[^\w\- ]", "", plain.strip().lower()).replace(" ", "-")
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(f"{base}-{count}" if count else base)
    return found


def broken_links(page: Path) -> list[str]:
    text = page.read_text()
    broken = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http:, https:, mailto: — not a file here
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not linked.exists():
            broken.append(f"{target}: no such file ({os.path.relpath(linked, REPO)})")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
            broken.append(f"{target}: {linked.name} has no heading with the anchor #{anchor}")
    return broken


def test_the_pages_are_found() -> None:
    names = {page.relative_to(REPO).as_posix() for page in markdown_pages()}
    assert {"README.md", "docs/settings.md", "services/imports/README.md"} <= names


def test_every_relative_link_leads_somewhere() -> None:
    broken = {
        page.relative_to(REPO).as_posix(): found
        for page in markdown_pages()
        if (found := broken_links(page))
    }
    assert broken == {}, "fix these links (paths are relative to the page's folder)"


def test_a_wrong_link_is_caught(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# There\n## Public API cache (gateway)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#public-api-cache-gateway) [gone](gone.md) [off](there.md#nowhere)\n"
        "```\n[in a fence](fence.md)\n```\n"
    )
    assert [problem.split(":")[0] for problem in broken_links(page)] == [
        "gone.md",
        "there.md#nowhere",
    ]
    assert links("see [a](a.md), `[not](code.md)`, [b](https://x.org) and [c](#top)") == [
        "a.md",
        "https://x.org",
        "#top",
    ]
    assert anchors("# Top\n## Public API cache (gateway)\n## Top\n") == {
        "top",
        "public-api-cache-gateway",
        "top-1",
    }
