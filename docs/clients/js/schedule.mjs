// Read an event's schedule with an API key, then ask again with its ETag: 304, nothing sent.
//
//   OMNIUM_API_KEY=... node schedule.mjs
const API = process.env.OMNIUM_API_URL ?? "http://127.0.0.1:8080";
const EVENT = process.env.OMNIUM_EVENT ?? "AG2026";
const headers = { "X-API-Key": process.env.OMNIUM_API_KEY };
const url = `${API}/v1/events/${EVENT}/schedule`;

const first = await fetch(url, { headers });
if (!first.ok) throw new Error(`${url} answered ${first.status}: ${await first.text()}`);
const { units } = await first.json();
const etag = first.headers.get("ETag");
console.log(`200: ${units.length} units, ETag ${etag}`);
for (const unit of units.slice(0, 3)) {
  console.log(`  ${unit.start_at}  ${unit.code}  ${unit.status}  ${unit.name}`);
}

// Keep the body and its ETag; ask again with If-None-Match until the data changes.
const again = await fetch(url, { headers: { ...headers, "If-None-Match": etag } });
if (again.status === 304) {
  console.log("304: not modified, keep the copy you have");
} else if (again.ok) {
  console.log(`200: changed meanwhile, new ETag ${again.headers.get("ETag")}`);
} else {
  throw new Error(`${url} answered ${again.status}`);
}
