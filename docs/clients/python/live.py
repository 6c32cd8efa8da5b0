"""Follow an event's live stream (Server-Sent Events); after a disconnect, resume with
Last-Event-ID so nothing saved meanwhile is missed.

    OMNIUM_API_KEY=... python live.py

It reads OMNIUM_LIVE_EVENTS changes (default 3), drops the connection as a network cut would,
reconnects with the last id it was sent, reads as many again and stops. A real client loops.
"""

from __future__ import annotations

import json
import os
import sys
import time

import httpx

API = os.environ.get("OMNIUM_API_URL", "http://127.0.0.1:8080")
EVENT = os.environ.get("OMNIUM_EVENT", "AG2026")
PER_CONNECTION = int(os.environ.get("OMNIUM_LIVE_EVENTS", "3"))


def follow(http: httpx.Client, last_event_id: str | None, count: int) -> str | None:
    """Read `count` changes from the stream (after `last_event_id`); the last id seen."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    url = f"/v1/events/{EVENT}/live"
    with http.stream("GET", url, headers=headers) as response:
        response.raise_for_status()
        event: dict[str, str] = {}
        for line in response.iter_lines():
            if line.startswith(":"):
                continue  # a comment: the stream is quiet, not dead
            if line:
                name, _, value = line.partition(":")
                event[name] = value.removeprefix(" ")
                continue
            if "data" in event:
                if "id" in event:
                    last_event_id = event["id"]
                data = json.loads(event["data"])
                print(f"event {event.get('id', '-')} {event.get('event', 'message')}", flush=True)
                if event.get("event") == "gap":
                    print(f"  gap: {data['message']}", flush=True)
                elif event.get("event") != "error":
                    fields = ", ".join(c["field"] for c in data["changes"])
                    print(f"  {data['code']}: {fields}", flush=True)
                    count -= 1
                if count == 0:
                    return last_event_id
            event = {}
    return last_event_id


def main() -> int:
    headers = {"X-API-Key": os.environ["OMNIUM_API_KEY"]}
    timeout = httpx.Timeout(10, read=60)  # the stream sends a comment at least every 15 s
    with httpx.Client(base_url=API, headers=headers, timeout=timeout) as http:
        last = follow(http, None, PER_CONNECTION)
        print(f"disconnected; resuming after {last}", flush=True)
        time.sleep(1)  # changes saved now are not lost: the stream replays them
        follow(http, last, PER_CONNECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
