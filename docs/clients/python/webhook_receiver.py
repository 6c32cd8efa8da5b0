"""Receive omnium's webhooks and verify each with the Standard Webhooks reference library.

    OMNIUM_WEBHOOK_SECRET=whsec_... python webhook_receiver.py

Listens on OMNIUM_WEBHOOK_PORT (default 8093). A message whose signature does not verify gets
400 and is dropped; a good one gets 204 and its JSON is printed, one line each. With
OMNIUM_WEBHOOK_MESSAGES=N it stops after N good messages.
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

WEBHOOK = Webhook(os.environ["OMNIUM_WEBHOOK_SECRET"])
STOP_AFTER = int(os.environ.get("OMNIUM_WEBHOOK_MESSAGES", "0"))
seen: set[str] = set()


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            # Checks the signature and that webhook-timestamp is within 5 minutes of now.
            message = WEBHOOK.verify(body, headers)
        except WebhookVerificationError as exc:
            print(f"refused: {exc}", file=sys.stderr, flush=True)
            self.send_response(400)
            self.end_headers()
            return
        self.send_response(204)
        self.end_headers()
        # A retried message has the same webhook-id: handle it once.
        if headers["webhook-id"] in seen:
            return
        seen.add(headers["webhook-id"])
        print(json.dumps(message), flush=True)

    def log_message(self, format: str, *args: object) -> None:
        return None


def main() -> int:
    port = int(os.environ.get("OMNIUM_WEBHOOK_PORT", "8093"))
    with HTTPServer(("127.0.0.1", port), Receiver) as server:
        print(f"listening on http://127.0.0.1:{port}/", file=sys.stderr, flush=True)
        while not STOP_AFTER or len(seen) < STOP_AFTER:
            server.handle_request()
    return 0


if __name__ == "__main__":
    sys.exit(main())
