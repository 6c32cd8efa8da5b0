#!/usr/bin/env bash
# Read an event's schedule with an API key, then ask again with its ETag: 304, nothing sent.
#
#   OMNIUM_API_KEY=... ./schedule.sh
set -euo pipefail
API=${OMNIUM_API_URL:-http://127.0.0.1:8080}
EVENT=${OMNIUM_EVENT:-AG2026}
: "${OMNIUM_API_KEY:?set OMNIUM_API_KEY (make run prints one)}"
headers=$(mktemp)
trap 'rm -f "$headers"' EXIT

# --fail-with-body: an error answer exits non-zero; its JSON ({"error": ...}) says why.
curl --silent --show-error --fail-with-body --compressed \
  -H "X-API-Key: $OMNIUM_API_KEY" -D "$headers" -o schedule.json \
  "$API/v1/events/$EVENT/schedule" || { cat schedule.json >&2; echo >&2; exit 1; }
etag=$(grep -i '^etag:' "$headers" | cut -d' ' -f2- | tr -d '\r')
echo "200: $(wc -c <schedule.json) bytes in schedule.json, ETag $etag"

# Ask again with the ETag: 304 and no body until the schedule changes.
status=$(curl --silent --show-error --compressed -o /dev/null -w '%{http_code}' \
  -H "X-API-Key: $OMNIUM_API_KEY" -H "If-None-Match: $etag" \
  "$API/v1/events/$EVENT/schedule")
case $status in
  304) echo "304: not modified, keep the copy you have" ;;
  200) echo "200: changed meanwhile; read it again" ;;
  *) echo "unexpected answer $status" >&2; exit 1 ;;
esac
