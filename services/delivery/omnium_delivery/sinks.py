"""Dev stack only: a local SFTP server and webhook receiver that take the demo clients' files.

`python -m omnium_delivery.sinks --folder .omnium/dev/sftp --keys .omnium/dev/sftp-keys` — each
SFTP user writes into its own folder (`<folder>/<user>/`); the webhook receiver checks each
signature and prints one line per message, so a newcomer can watch deliveries arrive.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
from pathlib import Path

import asyncssh
from aiohttp import web

from omnium_delivery._webhook import secret_key

log = logging.getLogger("sinks")


def ensure_keys(keys: Path) -> tuple[str, Path]:
    """The sink's host key and the demo clients' key, generated once and kept: (the host's
    public key to pin, the client's private key file)."""
    keys.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "client_key"):
        path = keys / name
        if not path.exists():
            asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(path))
            path.chmod(0o600)
    host = asyncssh.read_private_key(str(keys / "host_key"))
    return host.export_public_key().decode().strip(), keys / "client_key"


async def serve_sftp(folder: Path, keys: Path, host: str, port: int) -> asyncssh.SSHAcceptor:
    ensure_keys(keys)
    client = asyncssh.read_private_key(str(keys / "client_key"))
    authorized = asyncssh.import_authorized_keys(client.export_public_key().decode())

    class Sftp(asyncssh.SFTPServer):
        def __init__(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
            user = chan.get_extra_info("username") or "anonymous"
            root = folder / user
            root.mkdir(parents=True, exist_ok=True)
            super().__init__(chan, chroot=str(root).encode())

        def posix_rename(self, oldpath: bytes, newpath: bytes) -> None:
            super().posix_rename(oldpath, newpath)
            # Only a log line: the file is in place whatever happens to it.
            with contextlib.suppress(OSError, ValueError):
                path = Path(self.map_path(newpath).decode())
                digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
                size = path.stat().st_size
                print(f"sftp: {path.relative_to(folder)} ({size} bytes, sha256 {digest}...)")

    acceptor = await asyncssh.listen(
        host,
        port,
        server_host_keys=[str(keys / "host_key")],
        authorized_client_keys=authorized,
        sftp_factory=Sftp,
        allow_scp=False,
    )
    print(f"sftp: listening on {host}:{port}, files under {folder}/<client>/")
    return acceptor


def webhook_app(secret: str) -> web.Application:
    key = secret_key(secret)

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        headers = request.headers
        signed = f"{headers.get('webhook-id')}.{headers.get('webhook-timestamp')}.".encode() + body
        expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        good = hmac.compare_digest(expected, headers.get("webhook-signature", ""))
        try:
            data = json.loads(body).get("data", {})
        except ValueError:
            data = {}
        print(
            f"webhook {request.match_info['client']}: {data.get('file_name')} "
            f"v{data.get('version')} ({len(body)} bytes, signature "
            f"{'good' if good else 'WRONG'})"
        )
        return web.json_response({"ok": good}, status=200 if good else 401)

    app = web.Application()
    app.router.add_post("/hooks/{client}", hook)
    return app


async def main(args: argparse.Namespace) -> None:
    acceptor = await serve_sftp(Path(args.folder), Path(args.keys), args.host, args.sftp_port)
    runner = web.AppRunner(webhook_app(args.secret), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, args.host, args.webhook_port).start()
    print(f"webhook: listening on http://{args.host}:{args.webhook_port}/hooks/<client>")
    try:
        await asyncio.Event().wait()
    finally:
        acceptor.close()
        await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--folder", required=True)
    parser.add_argument("--keys", required=True)
    parser.add_argument("--secret-file", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--sftp-port", type=int, default=8022)
    parser.add_argument("--webhook-port", type=int, default=8092)
    logging.basicConfig(level=logging.WARNING)
    arguments = parser.parse_args()
    arguments.secret = Path(arguments.secret_file).read_text().strip()
    arguments.folder = str(Path(arguments.folder).resolve())
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(arguments))
