"""Real SFTP servers for the delivery tests: asyncssh's, in process, and OpenSSH's own sshd."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from tests.support.waiting import eventually


@dataclass(slots=True)
class SftpServer:
    host: str
    port: int
    host_key: str  # the public key a client pins
    client_key: Path  # the private key a client signs in with
    username: str
    folder: Path  # where files land, as a client names it
    root: Path  # the same folder on this machine
    # asyncssh server only: cut the connection during the next N uploads.
    cut_uploads: list[int] = field(default_factory=lambda: [0])
    uploads: list[str] = field(default_factory=list)
    connections: list[Any] = field(default_factory=list)  # asyncssh server only

    def sftp_settings(self, **over: Any) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "username": self.username,
            "client_key": str(self.client_key),
            "host_key": self.host_key,
            "folder": str(self.folder),
            **over,
        }


def new_keys(folder: Path) -> tuple[asyncssh.SSHKey, Path, asyncssh.SSHKey, Path]:
    """A host key and a client key, each written in OpenSSH format (0600)."""
    folder.mkdir(parents=True, exist_ok=True)
    host = asyncssh.generate_private_key("ssh-ed25519")
    client = asyncssh.generate_private_key("ssh-ed25519")
    host_path, client_path = folder / "host_key", folder / "client_key"
    for key, path in ((host, host_path), (client, client_path)):
        key.write_private_key(str(path))
        path.chmod(0o600)
    return host, host_path, client, client_path


def public(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


@contextlib.asynccontextmanager
async def asyncssh_server(tmp_path: Path, username: str = "media") -> AsyncIterator[SftpServer]:
    """An asyncssh SFTP server on a loopback port, chrooted to tmp_path/sftp."""
    root = tmp_path / "sftp"
    root.mkdir()
    host, _, client, client_path = new_keys(tmp_path / "keys")
    server = SftpServer("127.0.0.1", 0, public(host), client_path, username, Path("."), root)

    class Sftp(asyncssh.SFTPServer):
        def __init__(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
            super().__init__(chan, chroot=str(root).encode())
            server.connections.append(chan.get_connection())

        def write(self, file_obj: object, offset: int, data: bytes) -> int:
            if server.cut_uploads[0] > 0:
                # Half the bytes reach the disk, then the connection drops, as a network cut.
                server.cut_uploads[0] -= 1
                super().write(file_obj, offset, data[: len(data) // 2])
                self.connection.abort()
                raise asyncssh.SFTPFailure("connection cut")
            return super().write(file_obj, offset, data)  # type: ignore[no-any-return]

        def posix_rename(self, oldpath: bytes, newpath: bytes) -> None:
            server.uploads.append(os.path.basename(newpath.decode()))
            super().posix_rename(oldpath, newpath)

    acceptor = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_host_keys=[host],
        authorized_client_keys=asyncssh.import_authorized_keys(public(client)),
        sftp_factory=Sftp,
        allow_scp=False,
    )
    server.port = acceptor.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        acceptor.close()
        await acceptor.wait_closed()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def openssh_server(tmp_path: Path) -> AsyncIterator[SftpServer]:
    """Debian's OpenSSH sshd on a loopback port, as the current user, with its own host key,
    an authorized_keys file for a generated client key and internal-sftp; no chroot."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    # sshd refuses to start without its privilege separation folder (the package's service
    # makes it at boot; here nothing has).
    await asyncio.to_thread(Path("/run/sshd").mkdir, mode=0o755, exist_ok=True)
    keys = tmp_path / "sshd"
    host, host_path, client, client_path = new_keys(keys)
    (keys / "authorized_keys").write_text(public(client) + "\n")
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    port = _free_port()
    user = os.environ.get("USER") or ("root" if os.getuid() == 0 else os.getlogin())
    config = keys / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"ListenAddress 127.0.0.1:{port}",
                f"HostKey {host_path}",
                f"AuthorizedKeysFile {keys / 'authorized_keys'}",
                f"PidFile {keys / 'sshd.pid'}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "PermitRootLogin prohibit-password",
                "StrictModes no",
                "UsePAM no",
                "Subsystem sftp internal-sftp",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    proc = await asyncio.create_subprocess_exec(
        sshd,
        "-D",
        "-e",
        "-f",
        str(config),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:

        async def listening() -> bool:
            if proc.returncode is not None:
                err = (await proc.stderr.read()).decode() if proc.stderr else ""
                raise RuntimeError(f"sshd stopped at start: {err}")
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return True

        await eventually(listening, within=10, ignoring=(OSError,), what="sshd to listen")
        yield SftpServer("127.0.0.1", port, public(host), client_path, user, inbox, inbox)
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                proc.kill()
                await proc.wait()
