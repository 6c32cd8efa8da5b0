// Keeps the console's own files on the device, so a reload with no network still opens it.
// Only the pages and scripts: actions and match reads always go to the network.
const CACHE = "omnium-scorer-v1";
const SHELL = [
  "/score/",
  "/score/static/app.js",
  "/score/static/clock.js",
  "/score/static/queue.js",
  "/score/static/rules.js",
  "/score/static/sheet.js",
  "/score/static/storage.js",
  "/score/static/style.css",
];

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(self.clients.claim());
});

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  const shell = url.pathname === "/score/" || url.pathname.startsWith("/score/static/");
  if (event.request.method !== "GET" || url.origin !== self.location.origin || !shell) return;
  const key = url.pathname === "/score/" ? "/score/" : url.pathname;
  // Network first, so a new version arrives; the kept copy when there is no network.
  event.respondWith(
    fetch(event.request)
      .then((response) => {
        if (response.ok) {
          const copy = response.clone();
          caches.open(CACHE).then((cache) => cache.put(key, copy));
        }
        return response;
      })
      .catch(() => caches.match(key)),
  );
});
