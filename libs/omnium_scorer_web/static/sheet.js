// The sheet a tap opens at the bottom of the screen, in view on any phone: an action's details
// (asked at once where the sport file's [console] says so), or a match event asked about once.
const $ = (id) => document.getElementById(id);

export function closeSheets() {
  $("details").hidden = true;
  $("confirm").hidden = true;
}

function sheetButtons(saveLabel, cancelLabel, saveClass) {
  const row = Object.assign(document.createElement("div"), { className: "sheet-actions" });
  const cancel = Object.assign(document.createElement("button"), { type: "button", className: "cancel", textContent: cancelLabel });
  const save = Object.assign(document.createElement("button"), { type: "submit", className: saveClass, textContent: saveLabel });
  cancel.addEventListener("click", closeSheets);
  row.append(cancel, save);
  return row;
}

function fieldInput(f, numbers) {
  if (f.type === "choice") {
    const select = document.createElement("select");
    for (const c of f.choices) select.append(new Option(c.replaceAll("_", " "), c));
    return select;
  }
  const input = document.createElement("input");
  if (f.type === "int" || f.type === "number") {
    input.type = "number";
    input.inputMode = f.type === "int" ? "numeric" : "decimal";
    input.step = f.type === "int" ? "1" : "any";
    if (f.min !== undefined) input.min = f.min;
    if (f.max !== undefined) input.max = f.max;
  } else if (numbers.includes(f.name)) {
    // A shirt number: digits on the keyboard, still text (the sport file keeps it text).
    input.inputMode = "numeric";
    input.autocomplete = "off";
  }
  if (f.default !== undefined) input.value = f.default;
  return input;
}

// `filled`: values to start from (the minute, from the clock); `onSave(fields)` when saved.
export function askDetails(title, action, { numbers = [], filled = {} }, onSave) {
  closeSheets();
  const form = $("details");
  form.replaceChildren(Object.assign(document.createElement("strong"), { textContent: title }));
  const grid = Object.assign(document.createElement("div"), { className: "sheet-fields" });
  for (const f of action.fields) {
    const label = Object.assign(document.createElement("label"), { textContent: f.label });
    const input = fieldInput(f, numbers);
    if (filled[f.name] !== undefined && filled[f.name] !== null) input.value = String(filled[f.name]);
    input.name = f.name;
    input.required = !!f.required;
    label.append(input);
    grid.append(label);
  }
  form.append(grid, sheetButtons("Save", "Cancel", "primary"));
  form.onsubmit = (event) => {
    event.preventDefault();
    const fields = {};
    for (const f of action.fields) {
      const raw = form.elements[f.name].value;
      if (raw === "") continue;
      fields[f.name] = f.type === "int" || f.type === "number" ? Number(raw) : raw;
    }
    closeSheets();
    onSave(fields);
  };
  form.hidden = false;
  form.querySelector("input, select")?.focus({ preventScroll: true });
}

// Once, before a match event that cannot be taken back by a tap on the same button.
export function askConfirm(question, context, yesLabel, onYes) {
  closeSheets();
  const form = $("confirm");
  form.replaceChildren(
    Object.assign(document.createElement("strong"), { textContent: question }),
    Object.assign(document.createElement("p"), { textContent: context }),
    sheetButtons(yesLabel, "Not yet", "danger"),
  );
  form.onsubmit = (event) => {
    event.preventDefault();
    closeSheets();
    onYes();
  };
  form.hidden = false;
}
