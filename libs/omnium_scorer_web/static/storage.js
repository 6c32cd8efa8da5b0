// What the device can keep (D10): the storage warning, compact, and hidden when the scorer
// says so (remembered on the device, until the reasons change; the header's chip opens it).
import * as queue from "/score/static/queue.js";

const $ = (id) => document.getElementById(id);
const HIDDEN_KEY = "omnium-storage-hidden";

// Below this much room a day of scoring may not fit; actions are small, a match's copy is not.
const ROOM_FLOOR_BYTES = 10 * 1024 * 1024;

// Each reason the device may lose what it keeps, in plain words: [code, headline, more]. The
// headline is short, so on a phone the buttons stay near the top; the rest opens on a tap.
async function storageDoubts() {
  try {
    await queue.openDb();
  } catch {
    return [
      [
        "no-storage",
        "This browser will not keep data on this device (a private window?).",
        "Actions are lost if the page closes before they are saved. Use a normal window.",
      ],
    ];
  }
  const doubts = [];
  const storage = navigator.storage;
  let persisted = false;
  try {
    if (storage && storage.persisted) persisted = await storage.persisted();
    if (!persisted && storage && storage.persist) persisted = await storage.persist();
  } catch {
    persisted = false;
  }
  if (!persisted) {
    // Chrome's incognito and Safari's private windows refuse the grant and do not say they are
    // private (on purpose): the refusal is the one sign, so its words name them.
    doubts.push([
      "not-kept",
      "This browser may delete actions before they are saved.",
      "It has not promised to keep what this page stores: Safari deletes it after 7 days " +
        "without a visit, and a private or guest window when it closes. Keep this page open " +
        "until every action shows saved; for live scoring use a certified setup in a normal " +
        "window.",
    ]);
  }
  try {
    const estimate = storage && storage.estimate ? await storage.estimate() : null;
    if (estimate && estimate.quota - estimate.usage < ROOM_FLOOR_BYTES) {
      const free = Math.max(0, (estimate.quota - estimate.usage) / (1024 * 1024)).toFixed(1);
      doubts.push([
        "small",
        `This browser lets this page keep only ${free} MB more on this device.`,
        "Actions may not fit. Free some space on the device, or use a certified setup.",
      ]);
    }
  } catch {
    // No estimate: nothing more to say than the grant already did.
  }
  return doubts;
}

export async function checkStorage() {
  const doubts = await storageDoubts();
  const el = $("storage-warning");
  el.dataset.reasons = doubts.map(([code]) => code).join(" ");
  $("storage-reasons").replaceChildren(
    ...doubts.map(([code, headline, more]) => {
      const details = Object.assign(document.createElement("details"), { className: `reason ${code}` });
      details.append(Object.assign(document.createElement("summary"), { textContent: headline }), ` ${more}`);
      return details;
    }),
  );
  const reasons = el.dataset.reasons;
  const hidden = Boolean(reasons) && localStorage.getItem(HIDDEN_KEY) === reasons;
  el.hidden = !doubts.length || hidden;
  $("storage-chip").hidden = !doubts.length || !hidden;
}

// Hide: the headline stays one tap away, in the header; Show brings the whole warning back.
export function wireStorageWarning() {
  $("storage-hide").addEventListener("click", () => {
    localStorage.setItem(HIDDEN_KEY, $("storage-warning").dataset.reasons || "");
    $("storage-warning").hidden = true;
    $("storage-chip").hidden = false;
  });
  $("storage-chip").addEventListener("click", () => {
    localStorage.removeItem(HIDDEN_KEY);
    $("storage-warning").hidden = false;
    $("storage-chip").hidden = true;
  });
}
