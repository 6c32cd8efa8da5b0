// Receive omnium's webhooks and verify each with the Standard Webhooks reference library.
//
//   OMNIUM_WEBHOOK_SECRET=whsec_... node webhook-receiver.mjs
//
// Listens on OMNIUM_WEBHOOK_PORT (default 8093). A message whose signature does not verify gets
// 400 and is dropped; a good one gets 204 and its JSON is printed, one line each. With
// OMNIUM_WEBHOOK_MESSAGES=N it stops after N good messages.
import { createServer } from "node:http";
import { Webhook } from "standardwebhooks";

const webhook = new Webhook(process.env.OMNIUM_WEBHOOK_SECRET);
const stopAfter = Number(process.env.OMNIUM_WEBHOOK_MESSAGES ?? "0");
const port = Number(process.env.OMNIUM_WEBHOOK_PORT ?? "8093");
const seen = new Set();

const server = createServer(async (request, response) => {
  const chunks = [];
  for await (const chunk of request) chunks.push(chunk);
  const body = Buffer.concat(chunks).toString("utf8");
  let message;
  try {
    // Checks the signature and that webhook-timestamp is within 5 minutes of now.
    message = webhook.verify(body, request.headers);
  } catch (error) {
    console.error(`refused: ${error.message}`);
    response.writeHead(400).end();
    return;
  }
  response.writeHead(204).end();
  const id = request.headers["webhook-id"];
  if (seen.has(id)) return; // a retried message has the same webhook-id: handle it once
  seen.add(id);
  console.log(JSON.stringify(message));
  if (stopAfter && seen.size >= stopAfter) {
    server.close();
    server.closeAllConnections();
  }
});
server.listen(port, "127.0.0.1", () => console.error(`listening on http://127.0.0.1:${port}/`));
