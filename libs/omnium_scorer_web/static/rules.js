// The sport file's rules, as the server sends them (Sport.program()), run on the device so a
// tap shows at once. The server checks every action again and its answer is the one that counts.

export class RuleRefused extends Error {}

const CONSTANTS = { true: true, false: false, True: true, False: false };

function truthy(v) {
  return !(v === null || v === undefined || v === false || v === 0 || v === "");
}

function text(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "boolean") return v ? "True" : "False";
  return String(v);
}

function pyMod(a, b) {
  const r = a % b;
  return r !== 0 && (r < 0) !== (b < 0) ? r + b : r;
}

function same(a, b) {
  if (typeof a === "boolean" || typeof b === "boolean") return Number(a) === Number(b);
  return a === b;
}

const FUNCTIONS = {
  min: (...a) => a.reduce((x, y) => (y < x ? y : x)),
  max: (...a) => a.reduce((x, y) => (y > x ? y : x)),
  abs: (a) => Math.abs(a),
  text: (a) => text(a),
};

const BINARY = {
  "+": (a, b) => a + b,
  "-": (a, b) => a - b,
  "*": (a, b) => a * b,
  "/": (a, b) => a / b,
  "//": (a, b) => Math.floor(a / b),
  "%": pyMod,
};

const COMPARE = {
  "==": same,
  "!=": (a, b) => !same(a, b),
  "<": (a, b) => a < b,
  "<=": (a, b) => a <= b,
  ">": (a, b) => a > b,
  ">=": (a, b) => a >= b,
};

function holder(scope, node) {
  if (node[0] === "sides") {
    const i = evaluate(node[1], scope);
    if (!Number.isInteger(i) || i < 1 || i > scope.sides.length) {
      throw new RuleRefused(`sides[${i}]: there are sides 1 to ${scope.sides.length}`);
    }
    return scope.sides[i - 1];
  }
  return scope[node[1]];
}

export function evaluate(n, scope) {
  switch (n[0]) {
    case "c":
      return n[1];
    case "name":
      return n[1] in scope.match ? scope.match[n[1]] : CONSTANTS[n[1]];
    case "attr": {
      const h = holder(scope, n[1]);
      if (h === null || h === undefined) return null;
      const v = h[n[2]];
      return v === undefined ? null : v;
    }
    case "bin":
      return BINARY[n[1]](evaluate(n[2], scope), evaluate(n[3], scope));
    case "un": {
      const v = evaluate(n[2], scope);
      if (n[1] === "not") return !truthy(v);
      return n[1] === "-" ? -v : +v;
    }
    case "and": {
      let r = true;
      for (const x of n[1]) {
        r = evaluate(x, scope);
        if (!truthy(r)) return r;
      }
      return r;
    }
    case "or": {
      let r = false;
      for (const x of n[1]) {
        r = evaluate(x, scope);
        if (truthy(r)) return r;
      }
      return r;
    }
    case "cmp": {
      let left = evaluate(n[1], scope);
      for (let i = 0; i < n[2].length; i++) {
        const right = evaluate(n[3][i], scope);
        if (!COMPARE[n[2][i]](left, right)) return false;
        left = right;
      }
      return true;
    }
    case "if":
      return truthy(evaluate(n[1], scope)) ? evaluate(n[2], scope) : evaluate(n[3], scope);
    case "call":
      return FUNCTIONS[n[1]](...n[2].map((a) => evaluate(a, scope)));
    default:
      throw new Error(`unknown rule node ${n[0]}`);
  }
}

function store(target, value, scope) {
  if (target[0] === "name") {
    scope.match[target[1]] = value;
    return;
  }
  const h = holder(scope, target[1]);
  if (h !== null && h !== undefined) h[target[2]] = value;
}

function run(statements, scope) {
  for (const s of statements) {
    if (s[0] === "set") store(s[1], evaluate(s[2], scope), scope);
    else if (s[0] === "aug") store(s[2], BINARY[s[1]](evaluate(s[2], scope), evaluate(s[3], scope)), scope);
    else if (s[0] === "if") run(truthy(evaluate(s[1], scope)) ? s[2] : s[3], scope);
  }
}

function template(parts, scope) {
  return parts
    .map((p) => {
      if (typeof p === "string") return p;
      const v = evaluate(p, scope);
      return text(v);
    })
    .join("");
}

function scope(state, program, extra = {}) {
  return {
    match: state.match,
    sides: state.sides,
    rules: program.rules,
    side: null,
    other: null,
    player: null,
    action: null,
    ...extra,
  };
}

// A text the sport file writes over the match values (its [console] period), for this state.
export function matchText(sport, state, parts) {
  return template(parts, scope({ ...state, match: { ...sport.program.match, ...state.match } }, sport.program));
}

export function newState(sport, sides) {
  const program = sport.program;
  const count = sport.sides || sides;
  return {
    sport: sport.code,
    match: { ...program.match },
    sides: Array.from({ length: count }, () => ({ ...program.side })),
    players: {},
    ranks: Array(count).fill(null),
    finished: false,
    winner: null,
  };
}

export function summary(sport, state) {
  return sideValues(sport, state).map((v) => v.score).join(" - ");
}

export function apply(sport, state, action) {
  const program = sport.program;
  const rule = sport.actions.find((a) => a.name === action.kind);
  const code = program.actions[action.kind];
  if (!rule || !code) throw new RuleRefused(`${sport.name} has no action '${action.kind}'`);
  if (state.finished) {
    throw new RuleRefused(`the match is over (${summary(sport, state)}): undo the last action to correct it`);
  }
  const next = structuredClone(state);
  // A match begun under an older version of the file lacks the values added since.
  next.match = { ...program.match, ...next.match };
  next.sides = next.sides.map((side) => ({ ...program.side, ...side }));
  const sides = next.sides;
  let side = null;
  let other = null;
  if (rule.side) {
    if (!action.side || action.side < 1 || action.side > sides.length) {
      throw new RuleRefused(`${rule.label}: say which side (1 to ${sides.length})`);
    }
    side = sides[action.side - 1];
    other = sides.length === 2 ? sides[2 - action.side] : null;
  }
  const values = {};
  for (const f of rule.fields) {
    const v = (action.fields || {})[f.name];
    if (v === undefined || v === null || v === "") {
      if (f.required) throw new RuleRefused(`${rule.label}: ${f.label} is missing`);
      values[f.name] = f.default ?? null;
    } else {
      values[f.name] = v;
    }
  }
  values.at = (action.client_at || 0) / 1000;
  const key = rule.side && values.player ? `${action.side}:${values.player}` : null;
  const fresh = { ...program.player };
  const player = key && next.players[key] ? next.players[key] : fresh;
  const s = scope(next, program, { side, other, player, action: values });
  for (const [test, reason] of code.require) {
    if (!truthy(evaluate(test, s))) throw new RuleRefused(template(reason, s));
  }
  run(code.effects, s);
  if (key && JSON.stringify(player) !== JSON.stringify(program.player)) next.players[key] = player;
  settle(sport, next);
  return next;
}

function settle(sport, state) {
  const program = sport.program;
  const s = scope(state, program);
  if (program.ranking) state.ranks = ranks(sport, state);
  if (truthy(evaluate(program.finish, s))) {
    state.finished = true;
    state.winner = program.winner ? evaluate(program.winner, s) : null;
    if (!program.ranking && state.winner) {
      state.ranks = state.sides.map((_, i) => (i + 1 === state.winner ? 1 : 2));
    }
  }
}

function ranks(sport, state) {
  const ranking = sport.program.ranking;
  const marks = [];
  state.sides.forEach((side, index) => {
    const s = scope(state, sport.program, { side });
    if (ranking.only && !truthy(evaluate(ranking.only, s))) return;
    marks.push([evaluate(ranking.by, s), index]);
  });
  marks.sort((a, b) => (ranking.desc ? b[0] - a[0] : a[0] - b[0]));
  const out = Array(state.sides.length).fill(null);
  marks.forEach(([mark, index], position) => {
    const tied = position > 0 && marks[position - 1][0] === mark;
    out[index] = tied ? out[marks[position - 1][1]] : position + 1;
  });
  return out;
}

export function sideValues(sport, state) {
  const program = sport.program;
  return state.sides.map((side, index) => {
    const other = state.sides.length === 2 ? state.sides[1 - index] : null;
    const s = scope(state, program, { side, other });
    return {
      order: index + 1,
      score: template(program.score, s),
      result: program.result ? template(program.result, s) : "",
      rank: (state.ranks || [])[index] || 0,
    };
  });
}
