"""Named SQL statements loaded from .sql files (`-- name: <name>` headers), once per process."""

from __future__ import annotations

import re
from pathlib import Path

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


class Queries:
    """Every statement of a folder's .sql files, by name: `queries["lock_units"]`."""

    def __init__(self, statements: dict[str, str]) -> None:
        self._statements = statements

    @classmethod
    def load(cls, folder: Path) -> Queries:
        statements: dict[str, str] = {}
        for path in sorted(folder.glob("*.sql")):
            text = path.read_text(encoding="utf-8")
            parts = _HEADER.split(text)
            # parts = [preamble, name1, body1, name2, body2, ...]
            for name, body in zip(parts[1::2], parts[2::2], strict=True):
                if name in statements:
                    raise ValueError(f"query {name!r} is defined twice (second time in {path})")
                statements[name] = body.strip().rstrip(";")
        return cls(statements)

    def __getitem__(self, name: str) -> str:
        try:
            return self._statements[name]
        except KeyError:
            raise KeyError(f"no query named {name!r}; add it under '-- name: {name}'") from None

    def __contains__(self, name: object) -> bool:
        return name in self._statements

    def names(self) -> list[str]:
        return sorted(self._statements)
