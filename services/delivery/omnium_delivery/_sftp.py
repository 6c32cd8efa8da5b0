"""SFTP: one kept connection per client, pinned host key, write aside then rename into place."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
from collections.abc import Mapping
from datetime import UTC, datetime

import asyncssh

from omnium_delivery._transport import ClientSettingsError, Outgoing, SendResult, backoff
from omnium_settings import Settings

log = logging.getLogger(__name__)


class SftpTransport:
    """Uploads each file to a temporary name, fsyncs it, then renames it over the final name,
    so the client never sees half a file. An unknown or changed host key is refused before
    any byte is sent."""

    def __init__(self, settings: Settings, client_code: str, config: Mapping[str, object]) -> None:
        self.settings = settings
        self.client_code = client_code
        sftp = config.get("sftp")
        if not isinstance(sftp, Mapping):
            raise ClientSettingsError(
                f"client {client_code}: an sftp client needs an 'sftp' section "
                "(host, port, username, client_key or password, host_key, folder)"
            )
        self.host = str(sftp.get("host") or "")
        self.port = int(sftp.get("port") or 22)
        self.username = str(sftp.get("username") or "")
        self.password = sftp.get("password")
        self.client_key = sftp.get("client_key")
        self.folder = str(sftp.get("folder") or ".")
        host_key = sftp.get("host_key")
        if not self.host or not self.username:
            raise ClientSettingsError(
                f"client {client_code}: sftp.host and sftp.username are needed"
            )
        if not host_key:
            raise ClientSettingsError(
                f"client {client_code}: sftp.host_key is needed (the server's public key, "
                "'ssh-ed25519 AAAA...'): omnium sends files only to a server it can recognise"
            )
        try:
            self.trusted = asyncssh.import_public_key(str(host_key))
        except (asyncssh.KeyImportError, ValueError) as exc:
            raise ClientSettingsError(
                f"client {client_code}: sftp.host_key is not a public key ({exc})"
            ) from None
        if not self.client_key and not self.password:
            raise ClientSettingsError(
                f"client {client_code}: give sftp.client_key (a private key file) or sftp.password"
            )
        self.conn: asyncssh.SSHClientConnection | None = None
        self.sftp: asyncssh.SFTPClient | None = None

    async def _connect(self) -> asyncssh.SFTPClient:
        if self.sftp is not None:
            return self.sftp
        self.conn = await asyncssh.connect(
            self.host,
            port=self.port,
            username=self.username,
            password=self.password,
            client_keys=[self.client_key] if self.client_key else [],
            known_hosts=([self.trusted], [], []),
            agent_path=None,
            config=[],
            connect_timeout=self.settings.delivery.sftp_connect_timeout_seconds,
            # The connection is kept between files: keepalives find a dead one early.
            keepalive_interval=30,
            keepalive_count_max=3,
        )
        self.sftp = await self.conn.start_sftp_client()
        return self.sftp

    async def _upload(self, item: Outgoing) -> None:
        sftp = await self._connect()
        final = posixpath.join(self.folder, item.file_name)
        part = posixpath.join(self.folder, f".{item.file_name}.{item.version}.part")
        async with sftp.open(part, "wb") as handle:
            await handle.write(item.body)
            with contextlib.suppress(asyncssh.SFTPOpUnsupported):
                await handle.fsync()
        try:
            await sftp.posix_rename(part, final)
        except asyncssh.SFTPOpUnsupported:
            # Without posix-rename the final name must be cleared first (a short gap, no half
            # file): servers that lack it are rare.
            with contextlib.suppress(asyncssh.SFTPNoSuchFile):
                await sftp.remove(final)
            await sftp.rename(part, final)

    async def _try(self, item: Outgoing, attempt: int) -> SendResult | str:
        """One try: its result, or what went wrong (worth another try)."""
        try:
            async with asyncio.timeout(self.settings.delivery.sftp_timeout_seconds):
                await self._upload(item)
            return SendResult("delivered", attempt, None, datetime.now(UTC))
        except asyncssh.HostKeyNotVerifiable as exc:
            await self.close()
            return SendResult(
                "refused",
                attempt,
                f"the server at {self.host}:{self.port} did not show the pinned host key "
                f"({exc}); nothing was sent. If the client changed its key, put the new one "
                "in sftp.host_key.",
                alert="host_key",
            )
        except asyncssh.PermissionDenied as exc:
            await self.close()
            return f"sign-in to {self.host}:{self.port} as {self.username} refused: {exc}"
        except TimeoutError:
            await self.close()
            return f"{self.host}:{self.port} did not answer in time"
        except (OSError, asyncssh.Error, EOFError) as exc:
            await self.close()
            return f"upload to {self.host}:{self.port} failed: {str(exc) or type(exc).__name__}"

    async def send(self, item: Outgoing) -> SendResult:
        tries = max(1, self.settings.delivery.sftp_tries)
        error = ""
        for attempt in range(1, tries + 1):
            kept = self.sftp is not None
            outcome = await self._try(item, attempt)
            if isinstance(outcome, str) and kept and attempt == 1:
                # The kept connection was closed by the server while idle: connect again at
                # once, without spending a try or a wait on it.
                outcome = await self._try(item, attempt)
            if isinstance(outcome, SendResult):
                return outcome
            error = outcome
            log.warning("sftp %s: try %s of %s: %s", self.client_code, attempt, tries, error)
            if attempt < tries:
                await asyncio.sleep(
                    backoff(self.settings.delivery.sftp_retry_base_seconds, attempt)
                )
        return SendResult("failed", tries, error, alert="send_failed")

    async def close(self) -> None:
        sftp, conn = self.sftp, self.conn
        self.sftp = self.conn = None
        if sftp is not None:
            sftp.exit()
        if conn is not None:
            conn.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 1)
