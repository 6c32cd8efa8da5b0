"""Read an event's schedule with an API key, then ask again with its ETag: 304, nothing sent.

OMNIUM_API_KEY=... python schedule.py
"""

from __future__ import annotations

import os
import sys

import httpx

API = os.environ.get("OMNIUM_API_URL", "http://127.0.0.1:8080")
EVENT = os.environ.get("OMNIUM_EVENT", "AG2026")


def main() -> int:
    headers = {"X-API-Key": os.environ["OMNIUM_API_KEY"]}
    with httpx.Client(base_url=API, headers=headers, timeout=10) as http:
        first = http.get(f"/v1/events/{EVENT}/schedule")
        if first.is_error:
            # Every error answer is JSON whose "error" says what to do.
            print(f"{first.status_code}: {first.json()['error']}", file=sys.stderr)
            return 1
        units = first.json()["units"]
        etag = first.headers["ETag"]
        print(f"200: {len(units)} units, ETag {etag}")
        for unit in units[:3]:
            print(f"  {unit['start_at']}  {unit['code']}  {unit['status']}  {unit['name']}")
        # Keep the body and its ETag; ask again with If-None-Match until the data changes.
        again = http.get(f"/v1/events/{EVENT}/schedule", headers={"If-None-Match": etag})
        if again.status_code == 304:
            print("304: not modified, keep the copy you have")
        else:
            again.raise_for_status()
            print(f"200: changed meanwhile, new ETag {again.headers['ETag']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
