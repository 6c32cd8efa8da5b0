"""The settings object: every number from the design documents is a field with that default.

Settings come in sections, one per service or shared concern (`settings.imports.scout_page_size`,
`settings.grpc.deadline_seconds`). Each field is still one environment variable with the name it
always had: `OMNIUM_` + the field's `env` name (its own name where none is given) in capitals, so
`ImportsSettings.port` is `OMNIUM_IMPORTS_PORT`. Those flat names are unique across sections, and
`from_env(...)`, `replace(...)` and `value(...)` take them too.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import ipaddress
import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from omnium_settings import _services as service
from omnium_settings import _shared as shared
from omnium_settings._errors import SettingsError
from omnium_settings._parse import parse_value
from omnium_settings._scoring import ScoringSettings

PREFIX = "OMNIUM_"


@dataclass(frozen=True, slots=True)
class Settings:
    """One process's settings. Build it once with `Settings.from_env()` and pass it down."""

    server: shared.ServerSettings = field(default_factory=shared.ServerSettings)
    database: shared.DatabaseSettings = field(default_factory=shared.DatabaseSettings)
    grpc: shared.GrpcSettings = field(default_factory=shared.GrpcSettings)
    telemetry: shared.TelemetrySettings = field(default_factory=shared.TelemetrySettings)
    command: service.CommandSettings = field(default_factory=service.CommandSettings)
    imports: service.ImportsSettings = field(default_factory=service.ImportsSettings)
    delivery: service.DeliverySettings = field(default_factory=service.DeliverySettings)
    live: service.LiveSettings = field(default_factory=service.LiveSettings)
    gateway: service.GatewaySettings = field(default_factory=service.GatewaySettings)
    scoring: ScoringSettings = field(default_factory=ScoringSettings)
    admin: service.AdminSettings = field(default_factory=service.AdminSettings)
    sign_in: shared.SignInSettings = field(default_factory=shared.SignInSettings)
    dev: shared.DevSettings = field(default_factory=shared.DevSettings)

    @property
    def session_cookie_secure(self) -> bool:
        """Whether the session cookie is Secure: as set, else wherever production runs."""
        if self.sign_in.session_cookie_secure is None:
            return self.server.environment == "production"
        return self.sign_in.session_cookie_secure

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read OMNIUM_* from `environ` (the process environment by default) over the defaults;
        `overrides` by flat name (`scout_page_size=100`) over both.

        An OMNIUM_ name that is not a setting fails: a typo must not silently keep a default.
        """
        env = os.environ if environ is None else environ
        known = _flat_fields()
        values: dict[str, Any] = {}
        for name, raw in env.items():
            if not name.startswith(PREFIX):
                continue
            key = name[len(PREFIX) :].lower()
            if key not in known:
                guess = difflib.get_close_matches(key, known, n=1)
                hint = f" Did you mean {PREFIX}{guess[0].upper()}?" if guess else ""
                raise SettingsError(f"{name} is not a setting omnium knows.{hint}")
            values[key] = parse_value(name, raw, known[key][1].type)
        values.update(overrides)
        return cls().replace(**values)

    def replace(self, **changes: Any) -> Settings:
        """A copy with settings changed, by flat name (`grpc_token=...`); checked again."""
        by_section: dict[str, dict[str, Any]] = {}
        for name, value in changes.items():
            section, f = _field(name)
            by_section.setdefault(section, {})[f.name] = value
        sections = {
            section: dataclasses.replace(getattr(self, section), **values)
            for section, values in by_section.items()
        }
        settings = dataclasses.replace(self, **sections)
        settings.check()
        return settings

    def value(self, name: str) -> Any:
        """One setting by its flat name (`gateway_port`), for code that picks settings by name."""
        section, f = _field(name)
        return getattr(getattr(self, section), f.name)

    def check(self) -> None:
        _check_networks("OMNIUM_TRUSTED_PROXIES", self.server.trusted_proxies)
        _check_networks("OMNIUM_OUTBOUND_ALLOWED_NETWORKS", self.server.outbound_allowed_networks)
        _check_telemetry(self.telemetry)
        _check_grpc(self.grpc)
        _check_provider_door(self.scoring)
        _check_scorer_watch(self.scoring)
        _check_public_url(self.gateway.public_url)
        _check_cors(self.gateway)
        database = self.database
        if database.migrate_lock_timeout_seconds <= 0 or database.migrate_lock_tries < 1:
            raise SettingsError(
                "OMNIUM_MIGRATE_LOCK_TIMEOUT_SECONDS must be above 0 and "
                "OMNIUM_MIGRATE_LOCK_TRIES at least 1 (0 would let a migration queue every "
                "write behind it for as long as it waits)."
            )
        if database.schema_ahead_allowed < 0:
            raise SettingsError(
                f"OMNIUM_SCHEMA_AHEAD_ALLOWED is {database.schema_ahead_allowed}; use 0 (only "
                "the schema this release made) or more."
            )
        if self.live.redis_connections < 5:
            raise SettingsError(
                f"OMNIUM_LIVE_REDIS_CONNECTIONS is {self.live.redis_connections}; live push "
                "needs 4 for replays and one for each Games it reads, so use 5 or more."
            )

    def require_database_url(self) -> str:
        if not self.server.database_url:
            raise SettingsError(
                "OMNIUM_DATABASE_URL is not set. Start the dev stack with 'make run', "
                "or point it at a PostgreSQL server (postgresql://user@host:port/db)."
            )
        return self.server.database_url


def _check_public_url(url: str | None) -> None:
    """The address clients are told in the OpenAPI document must be one they can call."""
    if url is None:
        return
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise SettingsError(
            f"OMNIUM_GATEWAY_PUBLIC_URL is {url!r}; give the API's address as clients reach it, "
            "with its scheme and no query, e.g. https://api.example.org or "
            "https://example.org/omnium."
        )


def _check_networks(variable: str, networks: tuple[str, ...]) -> None:
    for cidr in networks:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise SettingsError(
                f"{variable} has {cidr!r}, which is not an address or a CIDR range; write each "
                "as an address (192.0.2.7, ::1) or a range (10.0.0.0/8, fd00::/8)."
            ) from None


_ORIGIN = re.compile(
    r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?$|^https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$"
)


def _check_cors(gateway: service.GatewaySettings) -> None:
    for origin in gateway.cors_origins:
        if origin != "*" and not _ORIGIN.match(origin):
            raise SettingsError(
                f"OMNIUM_GATEWAY_CORS_ORIGINS has {origin!r}, which is not a web origin: write "
                "each as scheme://host[:port] with no path or trailing slash "
                "(https://fans.example.org, http://localhost:3000), or * alone."
            )
    if "*" in gateway.cors_origins and not gateway.anonymous_reads:
        raise SettingsError(
            "OMNIUM_GATEWAY_CORS_ORIGINS has *, which opens only the reads anyone may make "
            "without a key, but OMNIUM_GATEWAY_ANONYMOUS_READS is false, so there are none: "
            "list the origins that may send a key instead."
        )
    if gateway.cors_max_age_seconds < 0 or gateway.stream_token_seconds < 1:
        raise SettingsError(
            "OMNIUM_GATEWAY_CORS_MAX_AGE_SECONDS must be 0 or more, and "
            "OMNIUM_GATEWAY_STREAM_TOKEN_SECONDS at least 1."
        )


def _check_provider_door(scoring: ScoringSettings) -> None:
    rates = (scoring.provider_rate_per_second, scoring.provider_wrong_key_per_minute)
    bursts = (scoring.provider_burst, scoring.provider_wrong_key_burst)
    if min(rates) <= 0 or min(bursts) < 1:
        raise SettingsError(
            "OMNIUM_PROVIDER_RATE_PER_SECOND and OMNIUM_PROVIDER_WRONG_KEY_PER_MINUTE must be "
            "above 0, and OMNIUM_PROVIDER_BURST and OMNIUM_PROVIDER_WRONG_KEY_BURST at least 1: "
            "a token bucket with nothing in it refuses every provider push."
        )
    if min(scoring.provider_max_bytes, scoring.provider_day_max_bytes) < 1:
        raise SettingsError(
            "OMNIUM_PROVIDER_MAX_BYTES and OMNIUM_PROVIDER_DAY_MAX_BYTES must be at least 1; "
            "to turn a provider off, set enabled = false in its file."
        )


def _check_scorer_watch(scoring: ScoringSettings) -> None:
    caps = (scoring.scorer_watch_per_session, scoring.scorer_watch_per_address)
    if min(caps) < 0 or scoring.scorer_watch_retry_after_seconds < 1:
        raise SettingsError(
            "OMNIUM_SCORER_WATCH_PER_SESSION and OMNIUM_SCORER_WATCH_PER_ADDRESS must be 0 (no "
            "cap) or more, and OMNIUM_SCORER_WATCH_RETRY_AFTER_SECONDS at least 1."
        )


def _check_telemetry(telemetry: shared.TelemetrySettings) -> None:
    if telemetry.exporter not in ("none", "console", "otlp"):
        raise SettingsError(
            f"OMNIUM_TELEMETRY_EXPORTER is {telemetry.exporter!r}; use none, console or otlp."
        )
    if not 0.0 <= telemetry.sample_ratio <= 1.0:
        raise SettingsError(
            f"OMNIUM_TELEMETRY_SAMPLE_RATIO is {telemetry.sample_ratio}; use a share "
            "from 0 (no new trace) to 1 (every one), such as 0.01 for one in a hundred."
        )


def _check_grpc(grpc: shared.GrpcSettings) -> None:
    if not 1 <= grpc.retry_attempts <= 5:
        raise SettingsError(
            f"OMNIUM_GRPC_RETRY_ATTEMPTS is {grpc.retry_attempts}; gRPC tries a call "
            "1 to 5 times, so use a number from 1 (never again) to 5."
        )
    if (
        grpc.retry_first_backoff_seconds <= 0
        or grpc.retry_max_backoff_seconds <= 0
        or grpc.retry_backoff_multiplier <= 0
    ):
        raise SettingsError(
            "OMNIUM_GRPC_RETRY_FIRST_BACKOFF_SECONDS, OMNIUM_GRPC_RETRY_MAX_BACKOFF_SECONDS "
            "and OMNIUM_GRPC_RETRY_BACKOFF_MULTIPLIER must be above 0 (gRPC refuses the "
            "retry policy otherwise); set OMNIUM_GRPC_RETRY_ATTEMPTS=1 for no tries again."
        )
    if grpc.tokens:
        raise SettingsError(
            f"OMNIUM_GRPC_TOKENS lists {len(grpc.tokens)} token(s) without names, and is "
            "no longer read: each token now belongs to a named caller with a role, so the "
            "log can say who called. Replace it with OMNIUM_GRPC_CALLERS, one "
            "name:role:token item per caller, e.g. "
            "OMNIUM_GRPC_CALLERS=admin-console:operator-console:<token>,"
            "imports:service:<token>; give each process its own token in "
            "OMNIUM_GRPC_TOKEN. The roles are in docs/callers.md."
        )
    if bool(grpc.tls_cert_file) != bool(grpc.tls_key_file):
        raise SettingsError(
            "Set both OMNIUM_GRPC_TLS_CERT_FILE and OMNIUM_GRPC_TLS_KEY_FILE for TLS, or neither."
        )
    if grpc.tls_client_auth and not (grpc.tls_ca_file and grpc.tls_cert_file):
        raise SettingsError(
            "OMNIUM_GRPC_TLS_CLIENT_AUTH needs OMNIUM_GRPC_TLS_CA_FILE (to check callers) "
            "and OMNIUM_GRPC_TLS_CERT_FILE and OMNIUM_GRPC_TLS_KEY_FILE (to serve and to "
            "present as a caller)."
        )


def sections() -> Iterator[tuple[str, type[Any]]]:
    """(attribute, class) of each section, in the order of the Settings class."""
    for f in fields(Settings):
        yield f.name, f.default_factory  # type: ignore[misc]


def env_name(f: dataclasses.Field[Any]) -> str:
    """A section field's flat name: its variable without OMNIUM_, in lower case."""
    return str(f.metadata.get("env") or f.name)


@functools.cache
def _flat_fields() -> dict[str, tuple[str, dataclasses.Field[Any]]]:
    """flat name -> (section, field), for every field of every section."""
    flat: dict[str, tuple[str, dataclasses.Field[Any]]] = {}
    for section, cls in sections():
        for f in fields(cls):
            name = env_name(f)
            if name in flat:
                raise RuntimeError(f"two settings read {PREFIX}{name.upper()}")
            flat[name] = (section, f)
    return flat


def _field(name: str) -> tuple[str, dataclasses.Field[Any]]:
    """(section, field) of a flat name; a SettingsError with the nearest name when unknown."""
    known = _flat_fields()
    if name not in known:
        guess = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {guess[0]}?" if guess else ""
        raise SettingsError(f"{name} is not a setting omnium knows.{hint}")
    return known[name]


def describe_settings() -> list[tuple[str, str, str]]:
    """(variable, default, what it does) for every setting, for docs/settings.md."""
    return [
        (PREFIX + name.upper(), repr(f.default), f.metadata.get("doc", ""))
        for name, (_, f) in _flat_fields().items()
    ]
