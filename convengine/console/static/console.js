// The convengine console: plain ES module, no build step. All text goes in with textContent.
const $ = (sel) => document.querySelector(sel);
const KEY = "convengine.console.key";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function headers(extra = {}) {
  const key = $("#api-key").value.trim();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

function showError(message) {
  const box = $("#error");
  box.textContent = message;
  box.hidden = !message;
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers || {}) });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try { const body = await response.json(); message = `${body.errorCode || response.status}: ${body.message}`; } catch (_) { /* not JSON */ }
    showError(message);
    throw new Error(message);
  }
  showError("");
  return response;
}
const getJson = async (path) => (await api(path)).json();

function text(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

// A recorded value: a long one was kept as {truncated, preview}: shown as its start and its length.
function shown(value) {
  if (value && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length === 2
      && typeof value.truncated === "number" && typeof value.preview === "string") {
    return `${value.preview}… (${value.truncated} characters, cut)`;
  }
  return JSON.stringify(value);
}

// Local time to the second; the exact ISO instant in the title.
function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const local = date.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
  return el("time", { datetime: iso, title: iso }, local);
}

const ms = (value) => (value === null || value === undefined ? "?" : value >= 100 ? value.toFixed(0) : value >= 1 ? value.toFixed(1) : value.toFixed(3));
const JAVA_NAMES = "convengine.console.javaNames";
const javaNames = () => $("#java-names").checked;
const stepName = (step) => (javaNames() && step.stepClass ? step.stepClass : step.step);

// --- tabs ---------------------------------------------------------------------------------
function showTab(name) {
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.tab === name);
  for (const panel of document.querySelectorAll(".panel")) panel.hidden = panel.id !== name;
  if (name === "conversations") loadConversations();
  if (name === "chains") loadRuns();
  if (name === "configuration") loadConfiguration();
}

// --- live stream (SSE read through fetch, so the key goes in a header) ----------------------
let liveAbort = null;
const live = { cid: null, active: false, connected: null, done: false };

// Follows the conversation's stream; resolves once the server said CONNECTED (or gave up).
function follow(cid, into, status, onDone) {
  if (liveAbort) liveAbort.abort();
  let connected;
  live.connected = new Promise((resolve) => { connected = resolve; });
  live.cid = cid;
  live.active = true;
  read(cid, into, status, connected, onDone).finally(() => { if (live.cid === cid) live.active = false; connected(); });
  return Promise.race([live.connected, new Promise((resolve) => setTimeout(resolve, 3000))]);
}

async function read(cid, into, status, connected, onDone) {
  const abort = new AbortController();
  liveAbort = abort;
  into.replaceChildren();
  status.textContent = "connecting";
  try {
    const response = await fetch(`/api/v1/conversation/stream/${cid}`, { headers: headers(), signal: abort.signal });
    if (!response.ok) { status.textContent = `stream refused (${response.status})`; return; }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
        liveEvent(block, into, status, connected, onDone);
      }
    }
  } catch (error) {
    if (error.name !== "AbortError") status.textContent = `stream closed: ${error.message}`;
  }
}

function liveEvent(block, into, status, connected, onDone) {
  const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
  if (!data) return;
  let event;
  try { event = JSON.parse(data); } catch (_) { return; }
  if (!event.stage) { status.textContent = "connected"; connected(); return; }
  const payload = event.payload || {};
  if (event.stage === "STEP_ENTER" && payload.step === "load_or_create_conversation") {
    into.replaceChildren();
    live.done = false;
  }
  if (event.stage === "PIPELINE_TIMING") live.done = true;
  status.textContent = live.done ? "turn done" : "turn running";
  const detail = payload.step ? ` ${payload.step}` : payload.callSite ? ` ${payload.callSite}` : "";
  const item = el("li", { class: `live-event stage-${event.stage.split(" ")[0]}` }, `${event.stage}${detail}`);
  if (event.stage === "STEP_SKIPPED") item.append(` (${payload.reason})`);
  if (payload.durationMs !== undefined) item.append(` ${payload.durationMs} ms`);
  into.append(item);
  into.scrollTop = into.scrollHeight;
  if (event.stage === "PIPELINE_TIMING" && onDone) onDone();
}

// --- simulator ------------------------------------------------------------------------------
const sim = { cid: crypto.randomUUID(), context: {}, exchanges: [] };

function newConversation() {
  sim.cid = crypto.randomUUID();
  sim.context = {};
  sim.exchanges = [];
  $("#chat").replaceChildren(chatHint());
  $("#sim-cid").textContent = sim.cid;
  follow(sim.cid, $("#live"), $("#live-status"));
}

function chatHint() {
  return el("p", { id: "chat-hint", class: "muted" }, "Nothing said yet: type a message below (“hello”, or what a user of the loaded pack would ask) and press Send. ",
    "Each reply shows the intent, state and what changed in the context; the steps appear live on the right, ",
    "and “open in browser” shows the full turn view. Input params go to the engine as the caller's inputParams.");
}

function contextDiff(before, after) {
  const lines = [];
  const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
  for (const key of [...keys].sort()) {
    const a = JSON.stringify(before[key]); const b = JSON.stringify(after[key]);
    if (a === b) continue;
    if (a !== undefined) lines.push(el("div", { class: "del" }, `- ${key}: ${a}`));
    if (b !== undefined) lines.push(el("div", { class: "add" }, `+ ${key}: ${b}`));
  }
  return lines.length ? el("div", { class: "diff" }, lines) : el("div", { class: "diff muted" }, "context unchanged");
}

async function send(event) {
  event.preventDefault();
  const message = $("#message").value;
  let params;
  try { params = JSON.parse($("#params").value || "{}"); } catch (error) { showError(`input params are not JSON: ${error.message}`); return; }
  if (!live.active || live.cid !== sim.cid) await follow(sim.cid, $("#live"), $("#live-status"));
  const userNode = el("div", { class: "msg user" }, message);
  $("#chat-hint")?.remove();
  $("#chat").append(userNode);
  $("#message").value = "";
  const started = performance.now();
  let body;
  try {
    body = await (await api("/api/v1/conversation/message", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ message, conversationId: sim.cid, inputParams: params, ...($("#user-id").value.trim() ? { userId: $("#user-id").value.trim() } : {}) }),
    })).json();
  } catch (_) { userNode.remove(); return; }
  const took = Math.round(performance.now() - started);
  let context = {};
  try { context = JSON.parse(body.context || "{}"); } catch (_) { /* keep empty */ }
  const reply = body.payload ? text(body.payload.value) : "";
  const botNode = el("div", { class: "msg bot" }, reply,
    el("div", { class: "meta" }, `intent ${body.intent} · state ${body.state} · ${took} ms`),
    contextDiff(sim.context, context));
  $("#chat").append(botNode);
  sim.exchanges.push({ userNode, botNode, context: sim.context });
  sim.context = context;
  $("#chat").scrollTop = $("#chat").scrollHeight;
}

async function undo() {
  const last = sim.exchanges.at(-1);
  if (!last) { showError("nothing to undo"); return; }
  await api(`/api/v1/conversation/${sim.cid}/undo`, { method: "POST" });
  sim.exchanges.pop();
  last.userNode.classList.add("undone");
  last.botNode.classList.add("undone");
  sim.context = last.context;
}

// --- conversations --------------------------------------------------------------------------
async function loadConversations(event) {
  if (event) event.preventDefault();
  const query = new URLSearchParams({ q: $("#search").value });
  if ($("#feedback-filter").value) query.set("feedback", $("#feedback-filter").value);
  for (const bound of ["since", "until"]) {  // the inputs hold local time: sent as UTC
    if ($(`#${bound}`).value) query.set(bound, new Date($(`#${bound}`).value).toISOString());
  }
  const rows = await getJson(`/console/api/conversations?${query}`);
  const body = $("#conversation-list tbody");
  body.replaceChildren(...rows.map((r) => el("tr", { "data-cid": r.conversationId, onclick: () => openConversation(r.conversationId) },
    el("td", {}, el("code", {}, r.conversationId)), el("td", {}, r.userId || el("span", { class: "muted", title: "the caller sent no userId" }, "—")), el("td", {}, r.intent),
    el("td", {}, r.state), el("td", {}, r.status), el("td", {}, when(r.updatedAt || r.createdAt)), el("td", {}, r.feedback || ""))));
}

let openCid = null;
let openTurnNumber = null;

async function openConversation(cid) {
  openCid = cid;
  showTab("conversations");
  $("#conversation").hidden = false;
  $("#conv-id").textContent = cid;
  $("#export-text").hidden = true;
  const data = await getJson(`/console/api/conversations/${cid}/turns`);
  $("#turns").replaceChildren(...data.turns.map((t) => el("li", {
    class: t.undone ? "undone" : "", "data-turn": t.turn, onclick: () => openTurn(cid, t.turn),
  }, `turn ${t.turn}: “${t.user ?? ""}” → ${t.after ? `${t.after.intent}/${t.after.state}` : "failed"}`,
    t.undone ? " (undone)" : "", t.totalMs ? ` · ${ms(t.totalMs)} ms` : "")));
  if (data.turns.length) openTurn(cid, data.turns.at(-1).turn);
  return data.turns.length;
}

async function listFinishedTurn(cid, listed) {  // a turn's last event streams before its commit: read until it is listed
  for (let tries = 0; tries < 20; tries++) {
    if (await openConversation(cid) > listed) return;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

async function openTurn(cid, number) {
  for (const li of document.querySelectorAll("#turns li")) li.classList.toggle("selected", li.dataset.turn === String(number));
  openTurnNumber = number;
  const t = await getJson(`/console/api/conversations/${cid}/turns/${number}`);
  const after = t.after || {};
  $("#turn").replaceChildren(
    el("h3", {}, `Turn ${t.turn}`), el("p", { class: "muted" }, "started ", when(t.startedAt)),
    el("p", {}, `user: ${t.user ?? ""}`), el("p", {}, `reply: ${text(t.reply)}`),
    el("p", { class: "state-change" }, `state before ${t.before.intent}/${t.before.state} → after ${after.intent}/${after.state} (${after.status ?? "failed"})`),
    t.inputParams ? el("p", { class: "input-params" }, `input params: ${JSON.stringify(t.inputParams)}`) : "",
    t.error ? el("p", { class: "error" }, `error: ${t.error}`) : "",
    el("h4", {}, "Context changes"), el("div", { id: "context-changes" }, recordedChanges(t)),
    el("h4", {}, "Where the time went"), waterfallNode(t.waterfall),
    el("h4", {}, "Steps"), el("div", { id: "steps" }, t.steps.map(stepNode)),
    el("h4", {}, "Rules"), t.rules.length ? el("table", {}, el("tbody", {}, t.rules.map((r) => el("tr", {},
      el("td", {}, r.kind), el("td", {}, r.where), el("td", {}, `rule ${r.ruleId}`), el("td", {}, r.phase),
      el("td", {}, r.pattern || ""), el("td", {}, `${r.action}${r.actionValue ? ` ${r.actionValue}` : ""}`))))) : el("p", { class: "muted" }, "no rule matched"),
    el("h4", {}, "LLM calls"), el("div", { id: "llm-calls" }, t.llmCalls.length ? t.llmCalls.map(llmNode) : el("p", { class: "muted" }, "none")),
    el("h4", {}, "Tool calls"), el("div", { id: "tool-calls" }, t.toolCalls.length ? t.toolCalls.map((c) => el("div", { class: "tool-call" },
      el("strong", {}, c.tool), el("pre", {}, `args: ${text(c.args)}`),
      el("pre", {}, c.error ? `error: ${c.error}` : `result: ${text(c.result)}`))) : el("p", { class: "muted" }, "none")),
    el("h4", {}, "Script output"), el("div", { id: "script-output" }, (t.scriptOutput || []).length ? t.scriptOutput.map((o) => el("div", { class: "script-output" },
      el("strong", {}, `${o.flow}/${o.node}`), el("pre", {}, o.stdout),
      o.error ? el("pre", { class: "error" }, `error: ${o.error}`) : "")) : el("p", { class: "muted" }, "no python node printed")));
}

function recordedChanges(t) {
  const c = t.contextChanges;
  if (!c) return el("div", { class: "diff muted" }, t.after ? "context unchanged" : "the turn failed: nothing was kept");
  const lines = [];
  for (const [key, value] of Object.entries(c.added || {})) lines.push(el("div", { class: "add" }, `+ ${key}: ${shown(value)}`));
  for (const [key, pair] of Object.entries(c.changed || {})) {
    lines.push(el("div", { class: "del" }, `- ${key}: ${shown(pair.before)}`));
    lines.push(el("div", { class: "add" }, `+ ${key}: ${shown(pair.after)}`));
  }
  for (const key of c.removed || []) lines.push(el("div", { class: "del" }, `- ${key} (removed)`));
  if (c.moreKeys) lines.push(el("div", { class: "muted" }, `… and ${c.moreKeys} more key(s)`));
  return el("div", { class: "diff" }, lines);
}

function stepNode(step) {
  const classes = `step ${step.status === "SKIPPED" ? "skipped" : ""} ${step.status === "ERROR" ? "error" : ""}`;
  const label = step.status === "SKIPPED" ? `${stepName(step)} — skipped: ${step.skipped ?? "no reason recorded"}`
    : `${stepName(step)} — ${ms(step.durationMs)} ms${step.error ? ` — error: ${step.error}` : ""}`;
  return el("details", { class: classes, "data-step": step.step }, el("summary", {}, label),
    step.stages.map((s) => el("div", { class: "stage" }, el("strong", {}, s.stage), " ", el("span", {}, JSON.stringify(s.payload)))));
}

// One row per step that ran, its bar placed where it ran within the turn; the time outside steps last.
function waterfallNode(w) {
  if (!w || !w.totalMs) return el("p", { class: "muted" }, "no timing recorded for this turn");
  const scale = Math.max(w.totalMs, w.stepsMs);
  const row = (label, start, length, cls) => el("div", { class: "wf-row" },
    el("span", { class: "wf-label" }, label),
    el("span", { class: "wf-track" }, el("span", { class: `wf-bar ${cls}`, "data-ms": String(length),
      style: `left:${(100 * start / scale).toFixed(2)}%;width:${Math.max(100 * length / scale, 0.3).toFixed(2)}%` })),
    el("span", { class: "wf-ms" }, `${ms(length)} ms`));
  return el("div", { id: "waterfall", "data-total-ms": String(w.totalMs) },
    w.bars.map((b) => row(stepName(b), b.startMs, b.durationMs, b.status === "ERROR" ? "error" : "")),
    row("engine (outside steps)", w.stepsMs, w.engineMs ?? 0, "engine"),
    el("div", { class: "wf-row wf-total" }, el("span", { class: "wf-label" }, "turn"), el("span", { class: "wf-track" }),
      el("span", { class: "wf-ms" }, `${ms(w.totalMs)} ms`)));
}

function llmNode(call) {
  const usage = Object.entries(call.usage || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "no token usage reported";
  return el("details", { class: "llm-call", open: "" },
    el("summary", {}, `${call.callSite} in ${call.step} · ${call.latencyMs} ms · ${usage}${call.ok ? "" : ` · failed: ${call.error}`}`),
    call.logged ? [el("div", {}, "prompt"), el("pre", { class: "prompt" }, call.prompt || ""),
      el("div", {}, "reply"), el("pre", { class: "reply" }, call.reply ?? "")]
      : el("p", { class: "muted" }, "prompt and reply not logged: start the server with CONVENGINE_LLM__LOG_CALLS=true (setting llm.log_calls)"));
}

async function exportConversation() {
  if (!openCid) return;
  const yaml = await (await api(`/console/api/conversations/${openCid}/export`)).text();
  const box = $("#export-text");
  box.textContent = yaml;
  box.hidden = false;
  const link = el("a", { href: URL.createObjectURL(new Blob([yaml], { type: "application/yaml" })),
    download: `conversation-${openCid.slice(0, 8)}.conv.yaml` });
  document.body.append(link);
  link.click();
  link.remove();
}

// --- configuration ---------------------------------------------------------------------------
async function graphImage(img, path) {
  const blob = await (await api(path)).blob();
  img.src = URL.createObjectURL(blob);
  img.dataset.zoom = "1";
  img.style.width = "";
}

// Zoom: fit (the picture no wider than the page) or 1.5×/2×… its drawn size, scrolled inside its box.
function zoom(img, factor) {
  const level = factor === 0 ? 1 : Math.min(Math.max(Number(img.dataset.zoom || 1) * factor, 0.25), 6);
  img.dataset.zoom = String(level);
  img.classList.toggle("zoomed", factor !== 0);
  img.style.width = factor === 0 ? "" : `${Math.round(img.naturalWidth * level)}px`;
}

async function loadConfiguration() {
  const config = await getJson("/console/api/config");
  $("#warnings").replaceChildren(...(config.warnings.length ? config.warnings.map((w) => el("li", {}, w)) : [el("li", { class: "muted" }, "none")]));
  graphImage($("#state-graph"), "/console/api/config/state-graph.svg");
  graphImage($("#turn-graph"), "/console/api/config/turn-graph.svg");
  graphImage($("#workflow-graph"), "/console/api/config/workflows.svg");
  $("#tables").replaceChildren(...Object.entries(config.tables).map(([name, rows]) => {
    const columns = rows.length ? Object.keys(rows[0]) : [];
    return el("details", { class: "table", "data-table": name }, el("summary", {}, `${name} (${rows.length})`),
      el("table", {}, el("thead", {}, el("tr", {}, columns.map((c) => el("th", {}, c)))),
        el("tbody", {}, rows.map((row) => el("tr", {}, columns.map((c) => el("td", {}, text(row[c]))))))));
  }));
}

// --- chain runs (the public chains API: an admin key or a key with the chains scope sees every run) -------
let openRunId = null;

async function loadRuns(event) {
  if (event) event.preventDefault();
  const query = new URLSearchParams();
  if ($("#run-status").value) query.set("status", $("#run-status").value);
  const rows = await getJson(`/api/v1/chains/runs?${query}`);
  $("#run-list tbody").replaceChildren(...rows.map((r) => el("tr", { "data-run": r.runId, onclick: () => openRun(r.runId) },
    el("td", {}, el("code", {}, r.runId)), el("td", {}, r.chain), el("td", {}, r.status), el("td", {}, r.currentStep || ""),
    el("td", {}, r.dueAt || ""), el("td", {}, r.updatedAt || r.createdAt || ""))));
}

async function openRun(runId) {
  openRunId = runId;
  const run = await getJson(`/api/v1/chains/runs/${runId}`);
  $("#run").hidden = false;
  $("#run-id").textContent = run.runId;
  $("#run-state").textContent = `${run.chain} · ${run.status}${run.currentStep ? ` at ${run.currentStep}` : ""} · version ${run.version}`;
  $("#run-error").textContent = run.error || "";
  $("#resume-form").hidden = run.status !== "WAITING";
  $("#open-run-conversation").onclick = (event) => { event.preventDefault(); openConversation(run.conversationId); };
  $("#run-steps").replaceChildren(...run.steps.map((s) => el("li", { class: s.status === "FAILED" ? "undone" : "", "data-step": s.step },
    el("strong", {}, s.step), ` (${s.type}) ${s.status}`,
    s.error ? el("pre", {}, s.error) : null, s.output !== null ? el("pre", {}, text(s.output)) : null)));
}

async function resumeRun(event) {
  event.preventDefault();
  let answer;
  try { answer = JSON.parse($("#answer").value || "null"); } catch (error) { showError(`the answer is not JSON: ${error.message}`); return; }
  await api(`/api/v1/chains/runs/${openRunId}/resume`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ answer }) });
  await openRun(openRunId);
  await loadRuns();
}

async function loadInfo() {
  try {
    const info = await getJson("/console/api/info");
    $("#info").textContent = `config ${info.configVersion} · ${info.database}`;
    if (!info.llmCallsLogged) {
      $("#info").append(" · ", el("span", { id: "llm-log-hint", title: "Prompts and replies are kept in ce_llm_call_log only when logging is on: start the server with CONVENGINE_LLM__LOG_CALLS=true (or llm.log_calls: true in the settings)" },
        "LLM calls not logged (set CONVENGINE_LLM__LOG_CALLS=true)"));
    }
  } catch (_) { /* the error line says why */ }
}

// --- start ------------------------------------------------------------------------------------
$("#api-key").value = sessionStorage.getItem(KEY) || "";
$("#api-key").addEventListener("change", () => { sessionStorage.setItem(KEY, $("#api-key").value.trim()); loadInfo(); newConversation(); });
for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showTab(tab.dataset.tab));
$("#send-form").addEventListener("submit", send);
$("#undo").addEventListener("click", () => undo().catch(() => {}));
$("#reset").addEventListener("click", newConversation);
$("#search-form").addEventListener("submit", loadConversations);
$("#run-form").addEventListener("submit", (event) => loadRuns(event).catch(() => {}));
$("#resume-form").addEventListener("submit", (event) => resumeRun(event).catch(() => {}));
$("#export").addEventListener("click", () => exportConversation().catch(() => {}));
$("#follow-conversation").addEventListener("click", () => {  // its turns as they run, the list refreshed after each
  const cid = openCid;
  if (cid) follow(cid, $("#conv-live"), $("#conv-live-status"),
    () => listFinishedTurn(cid, $("#turns").children.length).catch(() => {}));
});
$("#java-names").checked = localStorage.getItem(JAVA_NAMES) === "true";
$("#java-names").addEventListener("change", () => {
  localStorage.setItem(JAVA_NAMES, String(javaNames()));
  if (openCid && openTurnNumber) openTurn(openCid, openTurnNumber).catch(() => {});
});
for (const button of document.querySelectorAll("button.zoom")) {
  button.addEventListener("click", () => zoom($(`#${button.dataset.graph}`), Number(button.dataset.factor)));
}
$("#user-id").value = sessionStorage.getItem("convengine.console.user") || "console-tester";
$("#user-id").addEventListener("change", () => { sessionStorage.setItem("convengine.console.user", $("#user-id").value.trim()); newConversation(); });
$("#open-sim-conversation").addEventListener("click", (event) => { event.preventDefault(); openConversation(sim.cid); });
newConversation();
loadInfo();
document.body.dataset.ready = "true";
