// The console's Replay view: recorded conversations replayed against a draft or a version
// (POST /api/v1/versions/replay), with the changed conversations and their per-turn differences.
// Kept apart from console.js; all text goes in with textContent.
const $ = (sel) => document.querySelector(sel);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const short = (value) => (typeof value === "string" ? value : JSON.stringify(value));

function headers() {
  const key = $("#api-key").value.trim();
  return key ? { "Content-Type": "application/json", Authorization: `Bearer ${key}` } : { "Content-Type": "application/json" };
}

function body() {
  const out = { last: Number($("#replay-last").value) || 50 };
  const target = $("#replay-target").value.trim();
  if (target) out[$("#replay-kind").value] = Number(target);
  if ($("#replay-intent").value.trim()) out.intent = $("#replay-intent").value.trim();
  if ($("#replay-feedback").value) out.feedback = $("#replay-feedback").value;
  return out;
}

function conversation(c) {
  return el("details", { class: "replay-conversation", open: "" },
    el("summary", {}, `${c.conversationId} — ${c.diffs.length} of ${c.turns} turns differ`),
    el("table", {}, el("thead", {}, el("tr", {}, ["Turn", "User", "What", "Recorded", "Draft"].map((h) => el("th", {}, h)))),
      el("tbody", {}, c.diffs.flatMap((t) => t.differences.map((d) => el("tr", {},
        el("td", {}, t.turn), el("td", {}, t.user), el("td", {}, d.aspect),
        el("td", { class: "wrap" }, short(d.recorded)), el("td", { class: "wrap" }, short(d.replayed))))))));
}

function show(report) {
  const what = report.draft ? `draft ${report.version}` : `version ${report.version}`;
  const changed = report.replayed.filter((c) => c.diffs.length);
  $("#replay-summary").textContent = `${report.replayed.length} conversations replayed against ${what}: `
    + `${changed.length} changed, ${report.notReplayable.length} not replayable`;
  $("#replay-changed").replaceChildren(...changed.map(conversation));
  const missing = report.notReplayable.map((m) => el("li", {}, `${m.conversationId}: ${m.reason}`));
  $("#replay-missing").replaceChildren(...(missing.length ? missing : [el("li", {}, "none")]));
}

async function run(event) {
  event.preventDefault();
  $("#replay-summary").textContent = "replaying…";
  const response = await fetch("/api/v1/versions/replay", { method: "POST", headers: headers(), body: JSON.stringify(body()) });
  const data = await response.json();
  if (!response.ok) { $("#replay-summary").textContent = `${data.errorCode || response.status}: ${data.message}`; return; }
  show(data);
}

$("#replay-form").addEventListener("submit", run);
