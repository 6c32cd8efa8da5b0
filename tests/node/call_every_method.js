// Calls every method of every service in protos/ with @grpc/grpc-js, as another team would:
// the .proto files loaded as they are, no generated code. Reads a JSON job on stdin
// ({"targets": {"omnium.command.v1.CommandService": "127.0.0.1:1234", ...}, "token": "...",
//   "requests": {"omnium.command.v1.CommandService/GetTimeline": {...}, ...}}), prints one
// JSON line per call: service, method, status code name, details, and the answer (or, for a
// server stream, its messages).
"use strict";
const fs = require("fs");
const path = require("path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const root = path.resolve(__dirname, "..", "..", "protos");
const files = [];
(function walk(dir) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) walk(full);
    else if (entry.name.endsWith(".proto")) files.push(path.relative(root, full));
  }
})(root);

const definition = protoLoader.loadSync(files, {
  includeDirs: [root],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
});
const loaded = grpc.loadPackageDefinition(definition);
const job = JSON.parse(fs.readFileSync(0, "utf8"));
const codeName = Object.fromEntries(Object.entries(grpc.status).map(([k, v]) => [v, k]));

function lookup(name) {
  return name.split(".").reduce((node, part) => node[part], loaded);
}

function call(client, method, spec, request, metadata) {
  const deadline = new Date(Date.now() + 10000);
  return new Promise((resolve) => {
    if (spec.responseStream) {
      // A watch never ends by itself: its first message is the answer, then we hang up.
      const messages = [];
      const stream = client[method](request, metadata, { deadline: new Date(Date.now() + 2000) });
      stream.on("data", (message) => {
        messages.push(message);
        stream.cancel();
      });
      stream.on("error", (err) => {
        const ours = err.code === grpc.status.CANCELLED && messages.length > 0;
        resolve({ code: ours ? "OK" : codeName[err.code], details: ours ? "" : err.details, answer: messages });
      });
      stream.on("end", () => resolve({ code: "OK", details: "", answer: messages }));
    } else {
      client[method](request, metadata, { deadline }, (err, answer) => {
        if (err) resolve({ code: codeName[err.code], details: err.details, answer: null });
        else resolve({ code: "OK", details: "", answer });
      });
    }
  });
}

(async () => {
  for (const [key, value] of Object.entries(definition)) {
    if (!value || typeof value !== "object" || value.format) continue; // messages and enums
    const service = key;
    const target = job.targets[service];
    if (!target) {
      console.log(JSON.stringify({ service, method: null, code: "NO_TARGET", details: "" }));
      continue;
    }
    const Client = lookup(service);
    const client = new Client(target, grpc.credentials.createInsecure());
    const metadata = new grpc.Metadata();
    metadata.set("authorization", `Bearer ${job.token}`);
    for (const [method, spec] of Object.entries(value)) {
      const request = job.requests[`${service}/${method}`] || {};
      const result = await call(client, method, spec, request, metadata);
      console.log(JSON.stringify({ service, method, ...result }));
    }
    client.close();
  }
})();
