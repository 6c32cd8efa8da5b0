// Follow an event's live stream (Server-Sent Events); after a disconnect, resume with
// Last-Event-ID so nothing saved meanwhile is missed.
//
//   OMNIUM_API_KEY=... node live.mjs
//
// It reads OMNIUM_LIVE_EVENTS changes (default 3), drops the connection as a network cut would,
// reconnects with the last id it was sent, reads as many again and stops. A real client loops.
// (A browser's EventSource does the resuming by itself, but cannot send X-API-Key.)
const API = process.env.OMNIUM_API_URL ?? "http://127.0.0.1:8080";
const EVENT = process.env.OMNIUM_EVENT ?? "AG2026";
const PER_CONNECTION = Number(process.env.OMNIUM_LIVE_EVENTS ?? "3");

async function follow(lastEventId, count) {
  const headers = { "X-API-Key": process.env.OMNIUM_API_KEY };
  if (lastEventId) headers["Last-Event-ID"] = lastEventId;
  const abort = new AbortController();
  const response = await fetch(`${API}/v1/events/${EVENT}/live`, { headers, signal: abort.signal });
  if (!response.ok) throw new Error(`the live stream answered ${response.status}`);
  const decoder = new TextDecoderStream();
  let buffer = "";
  let event = {};
  for await (const chunk of response.body.pipeThrough(decoder)) {
    buffer += chunk;
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, "");
      buffer = buffer.slice(end + 1);
      if (line.startsWith(":")) continue; // a comment: the stream is quiet, not dead
      if (line !== "") {
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        event[name] = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        continue;
      }
      if ("data" in event) {
        if ("id" in event) lastEventId = event.id;
        const data = JSON.parse(event.data);
        console.log(`event ${event.id ?? "-"} ${event.event ?? "message"}`);
        if (event.event === "gap") {
          console.log(`  gap: ${data.message}`);
        } else if (event.event !== "error") {
          console.log(`  ${data.code}: ${data.changes.map((c) => c.field).join(", ")}`);
          count -= 1;
        }
        if (count === 0) {
          abort.abort();
          return lastEventId;
        }
      }
      event = {};
    }
  }
  return lastEventId;
}

const last = await follow(null, PER_CONNECTION);
console.log(`disconnected; resuming after ${last}`);
await new Promise((resolve) => setTimeout(resolve, 1000)); // the stream replays what is saved now
await follow(last, PER_CONNECTION);
