// The scorer console: sign in, pick a match, tap; every tap is queued on the device first and
// shown at once, then synced in order. The server's answer is the truth.
import * as queue from "/score/static/queue.js";
import { checkStorage, wireStorageWarning } from "/score/static/storage.js";
import { clockMinute, clockText } from "/score/static/clock.js";
import { RuleRefused, apply, matchText, newState, sideValues } from "/score/static/rules.js";
import { askConfirm, askDetails, closeSheets } from "/score/static/sheet.js";

const $ = (id) => document.getElementById(id);
const ui = {
  user: JSON.parse(localStorage.getItem("omnium-user") || "null"),
  unitId: null,
  server: null, // the last MatchState the server sent for the open match
  pending: [],
  chosenSide: 1,
  // Actions the server refused (not saved), newest first: kept on the device until the scorer
  // taps Seen, on every screen, so a refusal for a match no longer theirs is not missed.
  refused: JSON.parse(localStorage.getItem("omnium-refused") || "[]"),
  syncing: false,
  online: navigator.onLine,
  pollSeconds: 2,
  signedOut: false, // the person signed out in this tab: the sign-in screen asks nothing
  receipt: null, // the last action tapped here: { client_id, label, state, reason }
};

function device() {
  let id = localStorage.getItem("omnium-device");
  if (!id) {
    id = `d${crypto.getRandomValues(new Uint32Array(2)).join("")}`;
    localStorage.setItem("omnium-device", id);
  }
  return id;
}

function nextClientId() {
  const n = Number(localStorage.getItem("omnium-counter") || "0") + 1;
  localStorage.setItem("omnium-counter", String(n));
  return `${device()}:${n}`;
}

function say(text) {
  const el = $("message");
  el.textContent = text;
  el.hidden = !text;
}

async function api(path, options = {}) {
  const headers = { "Content-Type": "application/json" };
  if (ui.user && ui.user.csrf) headers["X-CSRF-Token"] = ui.user.csrf;
  const asked = ui.user;
  const response = await fetch(path, { credentials: "same-origin", ...options, headers });
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  // On a slow network an answer to a call made before signing in can come after it: only the
  // sign-in the call was made with is over. A call made signed out says nothing new: asking
  // again would ask forever (every idle phone at every venue).
  if (response.status === 401 && body && body.sign_in && asked && ui.user === asked) {
    ui.user = null;
    localStorage.removeItem("omnium-user");
    route();
  }
  return { status: response.status, ok: response.ok, body };
}

// -- views -------------------------------------------------------------------------------

function show(view) {
  for (const id of ["sign-in", "pick", "score"]) $(id).hidden = id !== view;
  $("who").textContent = ui.user ? ui.user.name : "";
  $("sign-out").hidden = !ui.user;
}

async function route() {
  const m = location.hash.match(/^#\/match\/([0-9a-f-]{36})$/);
  if (!ui.user) {
    // Once, for a session this browser may already hold; after Sign out there is none.
    const ask = navigator.onLine && !ui.signedOut;
    const me = ask ? await api("/score/api/me").catch(() => null) : null;
    if (me && me.ok) {
      ui.user = me.body;
      localStorage.setItem("omnium-user", JSON.stringify(ui.user));
    } else if (!ui.user) {
      show("sign-in");
      return;
    }
  }
  if (m) {
    await openMatch(m[1]);
    return;
  }
  ui.unitId = null;
  show("pick");
  const list = await api("/score/api/matches").catch(() => null);
  const ul = $("matches");
  ul.replaceChildren();
  if (!list || !list.ok) {
    ul.append(Object.assign(document.createElement("li"), { textContent: "Cannot read the matches now: no network? Try again." }));
    return;
  }
  for (const match of list.body.matches || []) {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = `#/match/${match.unit_id}`;
    a.dataset.unit = match.unit_id;
    a.textContent = `${match.name} · ${match.sport} · ${match.status}${match.summary ? ` · ${match.summary}` : ""}`;
    li.append(a);
    ul.append(li);
  }
  if (!ul.children.length) {
    const none = list.body.assigned_only
      ? "No matches are assigned to you. An operator gives scorers their matches on the console (Scorers)."
      : "No matches to score.";
    ul.append(Object.assign(document.createElement("li"), { className: "none", textContent: none }));
  }
  filterMatches();
}

function filterMatches() {
  const words = $("filter").value.toLowerCase().split(/\s+/).filter(Boolean);
  for (const li of $("matches").children) {
    const text = li.textContent.toLowerCase();
    li.hidden = !words.every((w) => text.includes(w));
  }
}

async function openMatch(unitId) {
  closeSheets();
  ui.unitId = unitId;
  ui.server = (await queue.match(unitId)) || null;
  show("score");
  await refreshPending();
  render();
  await readMatch();
}

async function readMatch() {
  if (!ui.unitId) return;
  try {
    // The standing actions only when the copy here is older than the match: they are what an
    // undo not sent yet is shown from, and a long match has hundreds.
    // A copy of an earlier seq asks only for what changed after it.
    const have = ui.server?.standing ? ui.server.standing_seq || 0 : 0;
    const stale = !ui.server || ui.server.standing_seq !== ui.server.seq;
    const ask = stale ? `&standing=1&after=${have}` : "";
    const got = await api(`/score/api/matches/${ui.unitId}?recent=20${ask}`);
    if (got.ok) {
      setServer(got.body);
      setOnline(true);
    } else if (got.status === 404) {
      say(got.body.error);
    }
  } catch {
    setOnline(false);
  }
}

async function setServer(state) {
  if (!state || state.unit_id !== ui.unitId) return;
  if (ui.server && ui.server.seq > state.seq && !state.recent?.length) return;
  const recent = state.recent && state.recent.length ? state.recent : ui.server?.recent || [];
  // Answers to actions leave out the sport's buttons and rules: they do not change.
  const sport = state.sport_actions && state.sport_actions.actions ? state.sport_actions : ui.server?.sport_actions;
  // The standing actions, and the seq they were read at: once the match moves on they are out
  // of date (an undo is then shown only when the server has taken it) until the next read.
  let fresh = Array.isArray(state.standing) && state.standing_seq !== undefined;
  let standing = fresh ? state.standing : ui.server?.standing || null;
  if (fresh && state.standing_after) {
    // Only what changed after the copy here: drop what was undone since, add what came.
    const base = ui.server?.standing;
    if (base && ui.server.standing_seq === state.standing_after) {
      const undone = new Set(state.undone_since || []);
      standing = [...base.filter((a) => !undone.has(a.seq)), ...state.standing];
    } else {
      fresh = false; // the copy here moved meanwhile: the next read brings it up to date
      standing = ui.server?.standing || null;
    }
  }
  const standingSeq = fresh ? state.standing_seq : ui.server?.standing_seq;
  ui.server = { ...state, recent, sport_actions: sport, standing, standing_seq: standingSeq };
  await queue.keepMatch(ui.server);
  render();
}

async function refreshPending() {
  ui.pending = await queue.all();
  const count = ui.pending.length;
  $("waiting").textContent = `${count} waiting`;
  $("waiting").dataset.count = String(count);
  // What the warning is about, counted: what this device holds that the server has not.
  const kept = $("kept-here");
  kept.dataset.count = String(count);
  kept.textContent = count
    ? `${count === 1 ? "1 action is" : `${count} actions are`} waiting on this device, not saved yet.`
    : "No actions are waiting on this device.";
}

function setOnline(online) {
  ui.online = online;
  $("net").textContent = online ? "online" : "offline: actions are kept here";
  $("net").dataset.online = String(online);
}

// -- the score, at once --------------------------------------------------------------------

function shown() {
  const server = ui.server;
  if (!server || !server.sport_actions) return null;
  const sport = server.sport_actions;
  const sides = server.sides.length || 2;
  let state = server.state && server.state.sides ? server.state : newState(sport, sides);
  const notes = new Map();
  // What the match is made of, as the server will replay it for an undo: the standing actions
  // (when the copy here is of this seq), then each action waiting here.
  let made = server.standing && server.standing_seq === server.seq ? [...server.standing] : null;
  for (const item of ui.pending.filter((p) => p.unit_id === ui.unitId)) {
    if (item.kind === "undo") {
      if (!made) {
        notes.set(item.client_id, "waiting for the server to take it back");
      } else if (!made.length) {
        notes.set(item.client_id, "will be refused: there is nothing to undo in this match");
      } else {
        const taken = made.pop();
        state = made.reduce((s, action) => apply(sport, s, action), newState(sport, sides));
        notes.set(item.client_id, `takes back ${describe(taken, sport)}`);
      }
      continue;
    }
    try {
      state = apply(sport, state, item);
      made?.push(item);
    } catch (e) {
      if (!(e instanceof RuleRefused)) throw e;
      notes.set(item.client_id, `will be refused: ${e.message}`);
    }
  }
  return { sport, state, notes };
}

function render() {
  if (!ui.unitId) return;
  const server = ui.server;
  const view = shown();
  $("match-name").textContent = server ? server.name : "…";
  $("status").textContent = server ? `${server.status} · action ${server.seq}` : "";
  drawReceipt();
  const board = $("board");
  board.replaceChildren();
  if (!view) {
    board.textContent = "Reading the match…";
    return;
  }
  drawContext(view);
  const values = sideValues(view.sport, view.state);
  const pendingHere = ui.pending.some((p) => p.unit_id === ui.unitId);
  values.forEach((v, i) => {
    const meta = server.sides[i] || {};
    const div = document.createElement("div");
    div.className = `side${pendingHere ? " pending" : ""}${view.sport.sides !== 2 && ui.chosenSide === i + 1 ? " chosen" : ""}`;
    div.innerHTML = `<div class="name"></div><div class="score" id="score-${i + 1}"></div><div class="result"></div><div class="rank"></div>`;
    div.querySelector(".name").textContent = sideName(i + 1);
    div.querySelector(".score").textContent = v.score || "–";
    div.querySelector(".result").textContent = v.result || "";
    div.querySelector(".rank").textContent = v.rank ? `rank ${v.rank}` : "";
    div.addEventListener("click", () => {
      ui.chosenSide = i + 1;
      render();
    });
    board.append(div);
  });
  // Whether an undo tapped now is shown at once (the standing actions here are of this seq).
  $("undo").dataset.predicted = String(Boolean(server.standing && server.standing_seq === server.seq));
  $("finished").hidden = !view.state.finished;
  $("finished").textContent = view.state.finished ? "Match finished" : "";
  drawButtons(view.sport, values.length);
  drawLog(view);
  drawRefused();
}

// The team on a side, as people call it: its name, else its NOC, else "Side n".
function sideName(side) {
  const meta = ui.server?.sides?.[side - 1] || {};
  return meta.name || meta.noc || `Side ${side}`;
}

// The short name a button has room for.
function sideShort(side) {
  const meta = ui.server?.sides?.[side - 1] || {};
  return meta.noc || meta.name || `Side ${side}`;
}

// -- the match's context: period and clock, from the state shown ----------------------------

function drawContext(view) {
  const shows = view.sport.console || {};
  $("period").textContent = shows.period ? matchText(view.sport, view.state, shows.period) : "";
  $("clock").textContent = shows.clock ? clockText(view.state.match) : "";
  $("context").hidden = !shows.period && !shows.clock;
}

// -- saved ✓: the last action tapped here, as the server confirms it -------------------------

const RECEIPT = {
  waiting: (r) => `${r.label} — sending…`,
  kept: (r) => `${r.label} — kept on this device, not saved yet`,
  saved: (r) => `${r.label} — saved ✓`,
  refused: (r) => `${r.label} — not saved: ${r.reason}`,
  dropped: (r) => `${r.label} — taken back before it was sent`,
};

function setReceipt(clientId, state, reason = "") {
  if (!ui.receipt || ui.receipt.client_id !== clientId) return;
  ui.receipt = { ...ui.receipt, state, reason };
  drawReceipt();
}

function drawReceipt() {
  const el = $("receipt");
  const r = ui.receipt && ui.receipt.unit_id === ui.unitId ? ui.receipt : null;
  el.hidden = !r;
  if (!r) return;
  el.dataset.state = r.state;
  el.textContent = RECEIPT[r.state](r);
}

function drawRefused() {
  $("refused").replaceChildren(...ui.refused.map((r) => Object.assign(document.createElement("li"), { textContent: `Not saved: ${r.label} — ${r.reason}` })));
  $("refusals").hidden = !ui.refused.length;
}

function keepRefused() {
  localStorage.setItem("omnium-refused", JSON.stringify(ui.refused));
  drawRefused();
}

function drawButtons(sport, sides) {
  const box = $("buttons");
  const key = `${sport.code}:${sides}`;
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  box.replaceChildren();
  const two = sides === 2;
  box.classList.toggle("many", !two);
  const picker = $("side-picker");
  picker.hidden = two;
  picker.replaceChildren();
  if (!two) {
    for (let i = 1; i <= sides; i++) {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = sideName(i);
      b.dataset.side = String(i);
      b.setAttribute("aria-pressed", String(ui.chosenSide === i));
      b.addEventListener("click", () => {
        ui.chosenSide = i;
        for (const other of picker.children) other.setAttribute("aria-pressed", String(other === b));
        render();
      });
      picker.append(b);
    }
  }
  const confirmed = sport.console?.confirm || [];
  const button = (action, side) => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = action.label;
    if (side) {
      b.append(Object.assign(document.createElement("small"), { className: "team", textContent: sideShort(side) }));
    }
    b.dataset.action = action.name;
    if (action.group === "clock" || !action.side) b.classList.add("event");
    if (confirmed.includes(action.name)) b.classList.add("danger");
    if (side) b.dataset.side = String(side);
    b.addEventListener("click", () => tap(action, side || (action.side ? ui.chosenSide : 0)));
    return b;
  };
  if (two) {
    const columns = [1, 2].map((side) => {
      const col = document.createElement("div");
      col.className = "column";
      for (const action of sport.actions.filter((a) => a.side)) col.append(button(action, side));
      return col;
    });
    const shared = document.createElement("div");
    shared.className = "shared";
    for (const action of sport.actions.filter((a) => !a.side)) shared.append(button(action, 0));
    box.append(...columns, shared);
  } else {
    for (const action of sport.actions) box.append(button(action, 0));
  }
}

function describe(item, sport) {
  const action = sport?.actions.find((a) => a.name === item.kind);
  const label = item.kind === "undo" ? "Undo" : action ? action.label : item.kind;
  const side = item.side ? ` · ${sideName(item.side)}` : "";
  const fields = Object.entries(item.fields || {}).filter(([, v]) => v !== null && v !== "").map(([k, v]) => `${k} ${v}`).join(", ");
  return `${label}${side}${fields ? ` (${fields})` : ""}`;
}

function drawLog(view) {
  const log = $("log");
  const items = [];
  for (const item of [...ui.pending].reverse()) {
    if (item.unit_id !== ui.unitId) continue;
    const li = document.createElement("li");
    li.className = "waiting-item";
    li.dataset.clientId = item.client_id;
    const note = view.notes.get(item.client_id);
    li.textContent = `${describe(item, view.sport)} — waiting${note ? `: ${note}` : ""}`;
    items.push(li);
  }
  for (const saved of ui.server.recent || []) {
    const li = document.createElement("li");
    li.className = saved.undone_by ? "undone" : "";
    li.textContent = `#${saved.seq} ${describe(saved, view.sport)} — saved ✓ by ${saved.actor_name}`;
    items.push(li);
  }
  log.replaceChildren(...items);
}

// -- tapping ---------------------------------------------------------------------------------

function tap(action, side) {
  const view = shown();
  const shows = view?.sport.console || {};
  const title = `${action.label}${side ? ` · ${sideName(side)}` : ""}`;
  if ((shows.confirm || []).includes(action.name)) {
    const where = [$("period").textContent, $("clock").textContent].filter(Boolean).join(" · ");
    askConfirm(`${title}?`, where, action.label, () => enqueue({ kind: action.name, side, fields: {} }));
    return;
  }
  const needs = action.fields.some((f) => f.required);
  const asked = (shows.ask || []).includes(action.name);
  if (needs || asked || ($("ask").checked && action.fields.length)) {
    const filled = {};
    if (shows.minute && shows.clock && view) filled[shows.minute] = clockMinute(view.state.match);
    askDetails(title, action, { numbers: shows.numbers || [], filled }, (fields) =>
      enqueue({ kind: action.name, side, fields }),
    );
    return;
  }
  enqueue({ kind: action.name, side, fields: {} });
}

async function enqueue(partial) {
  const item = { client_id: nextClientId(), unit_id: ui.unitId, client_at: Date.now(), ...partial };
  await queue.add(item);
  const label = describe(item, ui.server?.sport_actions);
  ui.receipt = { client_id: item.client_id, unit_id: item.unit_id, label, state: ui.online ? "waiting" : "kept" };
  await refreshPending();
  render();
  syncSoon();
}

async function undoLast() {
  const mine = ui.pending.filter((p) => p.unit_id === ui.unitId);
  const last = mine[mine.length - 1];
  if (last && last.kind !== "undo") {
    // Not sent yet: taking it back is simply not sending it.
    await queue.remove(last.client_id);
    setReceipt(last.client_id, "dropped");
    await refreshPending();
    render();
    return;
  }
  await enqueue({ kind: "undo", side: 0, fields: {} });
}

// -- syncing, in order -------------------------------------------------------------------------

let timer = null;
function syncSoon() {
  clearTimeout(timer);
  timer = setTimeout(sync, 0);
}

async function sync() {
  // Signed out, nothing can be saved: what waits is sent after the next sign-in.
  if (ui.syncing || !ui.user) return;
  ui.syncing = true;
  try {
    for (;;) {
      const items = (await queue.all()).slice(0, 100);
      if (!items.length) break;
      let got;
      try {
        got = await api("/score/api/sync", {
          method: "POST",
          body: JSON.stringify({ actions: items.map(({ n, ...rest }) => rest) }),
        });
      } catch {
        setOnline(false);
        if (ui.receipt?.state === "waiting") setReceipt(ui.receipt.client_id, "kept");
        break;
      }
      setOnline(true);
      if (!got.ok) {
        if (got.body && got.body.error) say(got.body.error);
        if (ui.receipt?.state === "waiting") setReceipt(ui.receipt.client_id, "kept");
        break;
      }
      let stop = false;
      for (const answer of got.body.answers) {
        if (answer.outcome === "try_again") {
          say(answer.reason);
          stop = true;
          break;
        }
        const item = items.find((i) => i.client_id === answer.client_id);
        const saved = answer.outcome === "saved" || answer.outcome === "duplicate";
        setReceipt(answer.client_id, saved ? "saved" : "refused", answer.reason);
        if (answer.outcome === "refused" && item) {
          ui.refused.unshift({ label: describe(item, ui.server?.sport_actions), reason: answer.reason });
          ui.refused = ui.refused.slice(0, 5);
          keepRefused();
        }
        await queue.remove(answer.client_id);
      }
      await refreshPending();
      if (got.body.state) await setServer(got.body.state);
      if (stop || got.body.answers.length < items.length) break;
    }
  } finally {
    ui.syncing = false;
    await refreshPending();
    render();
  }
  if (ui.unitId && !ui.pending.length) await readMatch();
}

// -- start ---------------------------------------------------------------------------------------

async function start() {
  if ("serviceWorker" in navigator) {
    navigator.serviceWorker.register("/score/sw.js", { scope: "/score/" }).catch(() => {});
  }
  setOnline(navigator.onLine);
  wireStorageWarning();
  await checkStorage();
  await refreshPending();
  $("sign-in-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    const got = await api("/score/api/sign-in", {
      method: "POST",
      body: JSON.stringify({ login: form.login.value, password: form.password.value }),
    }).catch(() => null);
    if (!got) return say("No network: sign in when it is back.");
    if (!got.ok) return say(got.body?.error || "Sign-in failed.");
    ui.user = got.body;
    ui.signedOut = false;
    localStorage.setItem("omnium-user", JSON.stringify(ui.user));
    say("");
    await route();
    syncSoon();
  });
  $("undo").addEventListener("click", undoLast);
  $("refused-seen").addEventListener("click", () => {
    ui.refused = [];
    keepRefused();
  });
  drawRefused();
  $("filter").addEventListener("input", filterMatches);
  $("sign-out").addEventListener("click", async () => {
    if (ui.pending.length && !confirm(`${ui.pending.length} actions are not saved yet. Sign out anyway? They stay on this device and are sent after the next sign-in.`)) return;
    await api("/score/api/sign-out", { method: "POST" }).catch(() => null);
    ui.user = null;
    ui.signedOut = true;
    localStorage.removeItem("omnium-user");
    location.hash = "#/";
    route();
  });
  window.addEventListener("hashchange", route);
  window.addEventListener("online", () => {
    setOnline(true);
    syncSoon();
  });
  window.addEventListener("offline", () => setOnline(false));
  setInterval(() => {
    if (!ui.user) return;
    if (ui.pending.length) sync();
    else if (ui.unitId && navigator.onLine) readMatch();
  }, (ui.user?.poll_seconds || 2) * 1000);
  // The clock moves on the screen; nothing is asked of the network for it.
  setInterval(() => {
    const view = ui.unitId && !$("score").hidden ? shown() : null;
    if (view?.sport.console?.clock) $("clock").textContent = clockText(view.state.match);
  }, 1000);
  await route();
  syncSoon();
  document.body.dataset.ready = "true";
}

start();
