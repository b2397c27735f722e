// The console's Analytics tab (GET /api/v1/stats): summary figures, SVG charts per day drawn here
// (no library, nothing from the network) and a table per intent and per state. All text goes in as text.
const $ = (sel) => document.querySelector(sel);
const SVG = "http://www.w3.org/2000/svg";
const W = 560, H = 210, PAD = { left: 48, right: 12, top: 26, bottom: 34 };
const COLORS = ["#4a6fd1", "#f0b429", "#c0392b", "#2e8b57"];
const DAY_MS = 86400000;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  for (const child of children.flat()) if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

async function stats(by) {
  const params = new URLSearchParams({ by });
  for (const [name, id] of [["since", "#stats-since"], ["until", "#stats-until"]]) {
    const value = $(id).value;
    if (value) params.set(name, `${value}T00:00:00Z`);  // days are UTC, as the server counts them
  }
  const intent = $("#stats-intent").value.trim();
  if (intent) params.set("intent", intent);
  const key = $("#api-key").value.trim();
  const response = await fetch(`/api/v1/stats?${params}`, { headers: key ? { Authorization: `Bearer ${key}` } : {} });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try { const body = await response.json(); message = `${body.errorCode || response.status}: ${body.message || JSON.stringify(body.detail)}`; } catch (_) { /* not JSON */ }
    $("#error").textContent = message;
    $("#error").hidden = false;
    throw new Error(message);
  }
  return response.json();
}

const pct = (rate) => (rate === null || rate === undefined ? "–" : `${(rate * 100).toFixed(1)}%`);
const cost = (value) => value.toFixed(4);
const int = (value) => value.toLocaleString("en-US");

// --- summary and tables -------------------------------------------------------------------
const FIGURES = [
  ["conversations", "Conversations", (t) => int(t.conversations)],
  ["turns", "Turns", (t) => int(t.turns)],
  ["containment", "Containment", (t) => `${pct(t.containmentRate)} (${int(t.contained)})`],
  ["dropped-off", "Dropped off", (t) => int(t.droppedOff)],
  ["handoffs", "Handoffs", (t) => int(t.handoffs)],
  ["fallback", "Fallback rate", (t) => `${pct(t.fallbackRate)} (${int(t.fallbackTurns)})`],
  ["unknown", "UNKNOWN rate", (t) => `${pct(t.unknownRate)} (${int(t.unknownTurns)})`],
  ["feedback", "Feedback up / down", (t) => `${int(t.feedbackUp)} / ${int(t.feedbackDown)}`],
  ["llm-calls", "LLM calls", (t) => int(t.llmCalls)],
  ["tokens", "Tokens in / out", (t) => `${int(t.inputTokens)} / ${int(t.outputTokens)}`],
  ["cost", "Estimated cost", (t) => cost(t.estimatedCost)],
];

const COLUMNS = [
  ["conversations", "conv.", (r) => int(r.conversations)], ["turns", "turns", (r) => int(r.turns)],
  ["droppedOff", "drop-off", (r) => int(r.droppedOff)], ["handoffs", "handoffs", (r) => int(r.handoffs)],
  ["contained", "contained", (r) => `${int(r.contained)} (${pct(r.containmentRate)})`],
  ["fallbackRate", "fallback", (r) => pct(r.fallbackRate)], ["unknownRate", "UNKNOWN", (r) => pct(r.unknownRate)],
  ["feedbackUp", "up", (r) => int(r.feedbackUp)], ["feedbackDown", "down", (r) => int(r.feedbackDown)],
  ["llmCalls", "LLM calls", (r) => int(r.llmCalls)], ["inputTokens", "tokens in", (r) => int(r.inputTokens)],
  ["outputTokens", "tokens out", (r) => int(r.outputTokens)], ["estimatedCost", "est. cost", (r) => cost(r.estimatedCost)],
];

function summary(total) {
  return FIGURES.map(([id, label, show]) => el("div", { class: "figure", "data-metric": id },
    el("span", { class: "figure-label" }, label), el("span", { class: "figure-value" }, show(total))));
}

function table(dimension, rows, total) {
  const head = el("tr", {}, el("th", {}, dimension), COLUMNS.map(([, label]) => el("th", {}, label)));
  const line = (name, row, cls) => el("tr", { class: cls, "data-key": name },
    el("td", {}, name), COLUMNS.map(([field, , show]) => el("td", { "data-field": field }, show(row))));
  return el("table", { class: "stats-table", id: `stats-by-${dimension}` }, el("thead", {}, head),
    el("tbody", {}, rows.map((row) => line(row[dimension] ?? "(not recorded)", row, "")), line("total", total, "total")));
}

// --- charts -------------------------------------------------------------------------------
function days(rows) {
  const found = rows.map((r) => r.day).filter(Boolean).sort();
  const since = $("#stats-since").value || found[0];
  const until = $("#stats-until").value ? new Date(Date.parse(`${$("#stats-until").value}T00:00:00Z`) - DAY_MS).toISOString().slice(0, 10) : found[found.length - 1];
  if (!since || !until) return [];
  const out = [];
  for (let at = Date.parse(`${since}T00:00:00Z`); at <= Date.parse(`${until}T00:00:00Z`) && out.length < 400; at += DAY_MS) {
    out.push(new Date(at).toISOString().slice(0, 10));
  }
  return out;
}

function niceMax(value) {
  if (value <= 0) return 1;
  const step = 10 ** Math.floor(Math.log10(value));
  for (const m of [1, 2, 5, 10]) if (value <= m * step) return m * step;
  return 10 * step;
}

// One chart: a series is [label, values per day, "bar" | "line"]; format prints the y axis.
function chart(title, axis, series, format) {
  const box = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": title });
  const plotW = W - PAD.left - PAD.right, plotH = H - PAD.top - PAD.bottom;
  const top = niceMax(Math.max(0, ...series.flatMap(([, values]) => values.filter((v) => v !== null))));
  const x = (i) => PAD.left + (axis.length <= 1 ? plotW / 2 : (i * plotW) / (axis.length - 1));
  const y = (v) => PAD.top + plotH - (v / top) * plotH;
  for (const [value, label] of [[0, format(0)], [top / 2, format(top / 2)], [top, format(top)]]) {
    box.append(svg("line", { x1: PAD.left, x2: W - PAD.right, y1: y(value), y2: y(value), class: "grid" }));
    box.append(svg("text", { x: PAD.left - 6, y: y(value) + 4, "text-anchor": "end", class: "axis" }, label));
  }
  const every = Math.max(1, Math.ceil(axis.length / Math.floor(plotW / 52)));  // a label needs ~40 units
  axis.forEach((day, i) => {
    if (i % every === 0) box.append(svg("text", { x: x(i), y: H - PAD.bottom + 22, "text-anchor": "middle", class: "axis day" }, day.slice(5)));
  });
  const bars = series.filter(([, , kind]) => kind === "bar");
  const slot = axis.length ? plotW / Math.max(axis.length, 1) : plotW;
  const barW = Math.max(1, Math.min(18, (slot * 0.8) / Math.max(bars.length, 1)));
  series.forEach(([label, values, kind], s) => {
    const color = COLORS[s % COLORS.length];
    if (kind === "bar") {
      const b = bars.findIndex(([l]) => l === label);
      values.forEach((v, i) => {
        if (!v) return;
        const left = x(i) - (barW * bars.length) / 2 + b * barW;
        box.append(svg("rect", { x: left, y: y(v), width: barW, height: PAD.top + plotH - y(v), fill: color, class: "bar", "data-series": label, "data-day": axis[i], "data-value": v }));
      });
    } else {
      const points = values.map((v, i) => (v === null ? null : `${x(i)},${y(v)}`)).filter(Boolean);
      box.append(svg("polyline", { points: points.join(" "), fill: "none", stroke: color, "stroke-width": 2, class: "line", "data-series": label }));
    }
    box.append(svg("rect", { x: PAD.left + s * 130, y: 6, width: 10, height: 10, fill: color }));
    box.append(svg("text", { x: PAD.left + s * 130 + 14, y: 15, class: "legend" }, label));
  });
  return el("figure", { class: "chart-box" }, el("figcaption", {}, title), box);
}

function charts(rows) {
  const axis = days(rows);
  const byDay = new Map(rows.map((r) => [r.day, r]));
  const per = (field) => axis.map((day) => (byDay.has(day) ? byDay.get(day)[field] : 0));
  const rate = (field) => axis.map((day) => (byDay.has(day) ? byDay.get(day)[field] : null));
  const count = (v) => int(Math.round(v));
  const percent = (v) => `${Math.round(v * 100)}%`;
  return [
    chart("Turns and conversations per day", axis, [["turns", per("turns"), "bar"], ["conversations", per("conversations"), "bar"]], count),
    chart("Containment per day", axis, [["containment", rate("containmentRate"), "line"]], percent),
    chart("Fallback and UNKNOWN rate per day", axis, [["fallback", rate("fallbackRate"), "line"], ["UNKNOWN", rate("unknownRate"), "line"]], percent),
    chart("Feedback per day", axis, [["thumbs up", per("feedbackUp"), "bar"], ["thumbs down", per("feedbackDown"), "bar"]], count),
    chart("Tokens per day", axis, [["tokens in", per("inputTokens"), "bar"], ["tokens out", per("outputTokens"), "bar"]], count),
    chart("Estimated cost per day", axis, [["est. cost", per("estimatedCost"), "line"]], (v) => v.toFixed(v >= 10 ? 0 : 2)),
  ];
}

async function loadAnalytics() {
  const [daily, intents, states] = await Promise.all([stats("day"), stats("intent"), stats("state")]);
  $("#error").hidden = true;
  $("#stats-summary").replaceChildren(...summary(daily.total));
  $("#stats-charts").replaceChildren(...charts(daily.rows));
  $("#stats-tables").replaceChildren(el("h2", {}, "Per intent"), table("intent", intents.rows, intents.total),
    el("h2", {}, "Per state"), table("state", states.rows, states.total));
  $("#analytics").dataset.loaded = String(Date.now());
}

const since = new Date(Date.now() - 29 * DAY_MS);
$("#stats-since").value = since.toISOString().slice(0, 10);
$("#stats-form").addEventListener("submit", (event) => { event.preventDefault(); loadAnalytics().catch(() => {}); });
document.querySelector('.tab[data-tab="analytics"]').addEventListener("click", () => loadAnalytics().catch(() => {}));
