// Live parts of the console: card health and run progress, polled from the JSON endpoints.
// Plain ES module, no build step. Pages work without it; it only keeps them fresh.

// An action's answer (?said=...) is shown once: a later reload or bookmark does not repeat it.
const here = new URL(location.href);
if (here.searchParams.has("said")) {
  here.searchParams.delete("said");
  history.replaceState(null, "", here.pathname + here.search + here.hash);
}

for (const section of document.querySelectorAll("[data-live]")) watch(section);

// Turning an integration off, or cancelling what cannot be taken back, asks first.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset?.confirm;
  if (question && !confirm(question)) event.preventDefault();
});

function watch(section) {
  const every = Math.max(0.2, parseFloat(section.dataset.every || "2")) * 1000;
  const status = section.querySelector("[data-live-status]");
  let timer = null;
  let busy = false;

  async function poll() {
    clearTimeout(timer);
    if (busy) return;
    busy = true;
    section.dataset.tries = String(Number(section.dataset.tries || "0") + 1);
    section.setAttribute("aria-busy", "true");
    const slow = setTimeout(() => say("Loading…", false), 400);
    try {
      const response = await fetch(section.dataset.src, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      if (response.status === 401) {
        location.assign("/sign-in?next=" + encodeURIComponent(location.pathname + location.search));
        return;
      }
      const body = await response.json();
      if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
      APPLY[section.dataset.live](section, body);
      say("", false);
      section.dataset.polls = String(Number(section.dataset.polls || "0") + 1);
    } catch (error) {
      const text = String(error.message);
      say(text.startsWith("Failed to read") ? text : `Failed to read: ${text}`, true);
    } finally {
      clearTimeout(slow);
      busy = false;
      section.removeAttribute("aria-busy");
      timer = setTimeout(poll, every);
    }
  }

  function say(message, failed) {
    if (!status) return;
    status.hidden = !message;
    status.querySelector("[data-live-text]").textContent = message;
    status.querySelector("[data-live-retry]").hidden = !failed;
    status.classList.toggle("failed", failed);
  }

  status?.querySelector("[data-live-retry]").addEventListener("click", poll);
  timer = setTimeout(poll, every);
}

function setText(root, selector, text) {
  const el = root.querySelector(selector);
  if (el && el.textContent !== text) el.textContent = text;
}

function setBar(root, run) {
  const bar = root.querySelector("[data-bar]");
  if (!bar) return;
  bar.max = run.bar_max;
  bar.value = run.bar_value;
  bar.className = `bar-${run.status}`;
  bar.textContent = `${run.percent}%`;
  setText(root, "[data-batches]", run.bar_text);
}

function setRun(root, run) {
  setText(root, "[data-word]", run.word);
  setText(root, "[data-reason]", run.reason);
  setText(root, "[data-rows]", String(run.rows));
  setText(root, "[data-rows-why]", run.rows_why);
  setText(root, "[data-took]", run.took);
  root.className = root.className.replace(/status-\S+/, `status-${run.status}`);
  setBar(root, run);
}

function setHealth(card, who, health) {
  const line = card.querySelector(`[data-health="${who}"]`);
  line.classList.toggle("ok", health.ok);
  line.classList.toggle("waiting", !health.ok && health.waiting);
  line.classList.toggle("bad", !health.ok && !health.waiting);
  setText(line, "[data-word]", health.word);
  setText(line, "[data-when]", health.at ? `· ${health.ago}` : "");
  setText(line, "[data-detail]", health.detail);
}

const APPLY = {
  integrations(section, body) {
    const shown = [...section.querySelectorAll("[data-card]")].map((c) => c.dataset.card);
    const codes = body.integrations.map((c) => c.code);
    if (shown.join() !== codes.join()) return location.reload();
    for (const c of body.integrations) {
      const card = section.querySelector(`[data-card="${CSS.escape(c.code)}"]`);
      if (card.className.includes(`state-${c.state}`) === false) return location.reload();
      card.classList.toggle("green", c.green);
      card.classList.toggle("not-green", !c.green);
      card.classList.toggle("starting", c.starting);
      setText(card, "[data-verdict]", c.verdict);
      setHealth(card, "scout", c.scout);
      setHealth(card, "omnium", c.omnium);
      const alerts = card.querySelector("[data-alerts]");
      const items = c.alerts.map((a) => {
        const li = document.createElement("li");
        li.className = "alert";
        li.textContent = `${a.message} (${a.ago})`;
        return li;
      });
      if (alerts.textContent.trim() !== items.map((i) => i.textContent).join("").trim()) {
        alerts.replaceChildren(...items);
      }
      setText(card, "[data-waiting]", String(c.waiting));
      card.querySelector("[data-waiting]").classList.toggle("some", c.waiting > 0);
      // A new run, one that ended, a pause started or overtaken: the card is drawn anew.
      if (card.dataset.runs !== c.runs_key) return location.reload();
      if (c.last_run) setBar(card.querySelector("[data-last-run]"), c.last_run);
    }
    const count = document.querySelector("[data-waiting-count]");
    if (count) {
      const total = body.integrations.reduce((sum, c) => sum + c.waiting, 0);
      setText(count.parentElement, "[data-waiting-count]", String(total));
      count.classList.toggle("some", total > 0);
    }
  },
  runs(section, body) {
    const rows = section.querySelectorAll("[data-run]");
    const first = body.runs[0];
    if ((first && !section.querySelector(`[data-run="${first.id}"]`)) || (!first && rows.length)) {
      return location.reload();
    }
    for (const run of body.runs) {
      const row = section.querySelector(`[data-run="${run.id}"]`);
      if (!row) continue;
      const was = (row.className.match(/status-(\S+)/) || [])[1];
      // A pause by a check (or its end) changes the banner above the table: draw it anew.
      if (was !== run.status && [was, run.status].includes("paused_by_guard")) {
        return location.reload();
      }
      setRun(row, run);
    }
  },
  delivery(section, body) {
    // A client added or removed: the screen is drawn anew; otherwise its figures are updated.
    if (section.dataset.clients !== body.clients.map((c) => c.code).join()) {
      return location.reload();
    }
    for (const c of body.clients) {
      const card = section.querySelector(`[data-client="${CSS.escape(c.code)}"]`);
      const colour = `card ${c.colour === "green" ? "green" : "not-green"}`;
      const drawn = colour + (c.colour === "quiet" ? " starting" : "");
      if (card.className !== drawn) card.className = drawn;
      setText(card, "[data-verdict]", c.verdict);
      setText(card, "[data-share-value]", c.share);
      setText(card, "[data-in-time]", c.in_time);
      setText(card, "[data-delay]", c.sends ? `half within ${c.p50}; 95 in 100 within ${c.p95}` : "—");
      setText(card, "[data-misses-count]", String(c.misses));
      setText(card, "[data-misses-words]", c.misses_words);
    }
  },
  run(section, body) {
    const run = body.run;
    const head = section.querySelector(`[data-run="${run.id}"]`);
    setRun(head, run);
    // Once the run ends, its changes, kept, held and refused rows are ready: show them.
    if (section.dataset.running === "yes" && !run.running) location.reload();
    if (section.dataset.running === "no" && run.running) location.reload();
  },
};

// The unit picker: a search (name, team, discipline, day) that lists matching units; picking one
// fills in its unit code, so nobody types 34 characters.
for (const picker of document.querySelectorAll("[data-unit-picker]")) pick(picker);

function pick(picker) {
  const query = picker.querySelector("[data-picker-query]");
  const found = picker.querySelector("[data-picker-found]");
  const choices = picker.querySelector("[data-picker-choices]");
  const target = document.getElementById(picker.dataset.target);
  let timer = null;
  let asked = 0;

  async function search() {
    const words = query.value.trim();
    const mine = ++asked;
    if (words.length < 2) {
      found.textContent = "";
      choices.replaceChildren();
      return;
    }
    found.textContent = "Searching…";
    try {
      const response = await fetch(`/api/units?q=${encodeURIComponent(words)}`, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      const body = await response.json();
      if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
      if (mine !== asked) return; // a newer search is on its way
      choices.replaceChildren(...body.units.map(choice));
      const shown = body.units.length;
      found.textContent = !shown ? `No unit matches “${words}”.`
        : body.found > shown ? `Showing ${shown} of ${body.found}: add a team, a discipline or a day.`
        : `Found ${shown}: pick one.`;
      found.classList.remove("error");
    } catch (error) {
      found.textContent = `Failed to read the units: ${error.message}. Type to try again.`;
      found.classList.add("error");
    }
  }

  function choice(unit) {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = unit.label;
    button.dataset.code = unit.code;
    button.addEventListener("click", () => {
      target.value = unit.code;
      found.textContent = `Chosen: ${unit.label}`;
      choices.replaceChildren();
    });
    item.append(button);
    return item;
  }

  query.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(search, 250);
  });
}

// A held row's lookup: the unit picker is there while the kind chosen is "unit", at once.
for (const kind of document.querySelectorAll("select[data-lookup-kind]")) {
  const show = () => {
    for (const part of kind.form.querySelectorAll("[data-for-kind]")) {
      part.hidden = part.dataset.forKind !== kind.value;
    }
  };
  kind.addEventListener("change", show);
  show();
}
