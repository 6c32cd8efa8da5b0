// The device's queue: every action stays in IndexedDB, with its client id, until the server
// confirms it. A reload keeps it; sync sends it in the order it was tapped.

const DB_NAME = "omnium-scorer";
const QUEUE = "queue";
const MATCHES = "matches";

let opening = null;

export function openDb() {
  if (!opening) {
    opening = new Promise((resolve, reject) => {
      const request = indexedDB.open(DB_NAME, 1);
      request.onupgradeneeded = () => {
        const db = request.result;
        const queue = db.createObjectStore(QUEUE, { keyPath: "n", autoIncrement: true });
        queue.createIndex("client_id", "client_id", { unique: true });
        db.createObjectStore(MATCHES, { keyPath: "unit_id" });
      };
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => reject(request.error);
    });
  }
  return opening;
}

function done(tx) {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

function result(request) {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

export async function add(action) {
  const db = await openDb();
  const tx = db.transaction(QUEUE, "readwrite");
  tx.objectStore(QUEUE).add(action);
  await done(tx);
}

// Every queued action, in the order it was tapped.
export async function all() {
  const db = await openDb();
  return result(db.transaction(QUEUE).objectStore(QUEUE).getAll());
}

export async function remove(clientId) {
  const db = await openDb();
  const tx = db.transaction(QUEUE, "readwrite");
  const store = tx.objectStore(QUEUE);
  const key = await result(store.index("client_id").getKey(clientId));
  if (key !== undefined) store.delete(key);
  await done(tx);
}

export async function keepMatch(state) {
  const db = await openDb();
  const tx = db.transaction(MATCHES, "readwrite");
  tx.objectStore(MATCHES).put(state);
  await done(tx);
}

export async function match(unitId) {
  const db = await openDb();
  return result(db.transaction(MATCHES).objectStore(MATCHES).get(unitId));
}
