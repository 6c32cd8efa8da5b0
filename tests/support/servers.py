"""Where the test PostgreSQL and Redis are."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit


@dataclass(frozen=True, slots=True)
class Servers:
    database_url: str
    redis_url: str

    def url_for(self, database: str) -> str:
        parts = urlsplit(self.database_url)
        return urlunsplit(parts._replace(path=f"/{database}"))

    @property
    def admin_url(self) -> str:
        return self.url_for("postgres")
