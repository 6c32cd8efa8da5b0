#!/usr/bin/env bash
# Follow an event's live stream (Server-Sent Events); after a disconnect, resume with
# Last-Event-ID so nothing saved meanwhile is missed.
#
#   OMNIUM_API_KEY=... ./live.sh
#
# It reads OMNIUM_LIVE_EVENTS changes (default 3), drops the connection as a network cut would,
# reconnects with the last id it was sent, reads as many again and stops. A real client loops.
set -euo pipefail
API=${OMNIUM_API_URL:-http://127.0.0.1:8080}
EVENT=${OMNIUM_EVENT:-AG2026}
PER_CONNECTION=${OMNIUM_LIVE_EVENTS:-3}
: "${OMNIUM_API_KEY:?set OMNIUM_API_KEY (make run prints one)}"
last_id=""

follow() {
  local count=$PER_CONNECTION id="" name="" data="" line
  local resume=()
  [ -n "$last_id" ] && resume=(-H "Last-Event-ID: $last_id")
  # -N: no buffering, each event as it comes. The stream ends when this loop stops reading.
  while IFS= read -r line; do
    line=${line%$'\r'}
    case $line in
      :*) continue ;;                       # a comment: the stream is quiet, not dead
      id:*) id=${line#id: } ;;
      event:*) name=${line#event: } ;;
      data:*) data=${line#data: } ;;
      "")
        if [ -n "$data" ]; then
          [ -n "$id" ] && last_id=$id
          echo "event ${id:--} ${name:-message}"
          echo "  $data"
          if [ "$name" != gap ] && [ "$name" != error ]; then
            count=$((count - 1))
            [ "$count" -eq 0 ] && return 0
          fi
        fi
        id="" name="" data=""
        ;;
    esac
  done < <(curl --silent --show-error --fail-with-body -N -H "Accept: text/event-stream" \
    -H "X-API-Key: $OMNIUM_API_KEY" "${resume[@]}" "$API/v1/events/$EVENT/live")
  echo "the stream ended early" >&2
  return 1
}

follow
echo "disconnected; resuming after $last_id"
sleep 1 # changes saved now are not lost: the stream replays them
follow
