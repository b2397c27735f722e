"""Write the notebooks under notebooks/, executed, with their outputs (run again after editing this file).

The setup every notebook shares lives in ``convengine.testing.notebooks`` (one import, one call);
graphs are drawn there as SVG by the web console's renderer, so the stored pictures need no network.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent.parent / "notebooks"

SETUP = '''from convengine import Engine, ScriptedLLM
from convengine.testing.notebooks import chain_graph, flow_graph, notebook_setup, state_graph, turn_graph

nb = notebook_setup()  # the example packs (importable), and a temporary folder for databases
EXAMPLES, workdir = nb.examples, nb.workdir'''

QUICKSTART = [
    new_markdown_cell("# Quickstart\n\nA pack becomes a conversation. This notebook opens an engine on an embedded "
                      "SQLite file with the support-desk example pack (no LLM, no API key), talks to it, reads the "
                      "audit trail and draws the turn graph."),
    new_code_cell(SETUP),
    new_code_cell('''from support_desk_tasks import TASKS

engine = Engine.open(f"sqlite:///{workdir / 'quickstart.db'}", pack=EXAMPLES / "support_desk.yaml", tasks=TASKS)
cid = None
for message in ["hello", "I want to cancel my order", "it arrived damaged", "yes"]:
    result = engine.process(message, cid)
    cid = result.conversation_id
    print(f"{message!r:32} -> {result.intent}/{result.state}: {result.payload.value}")
assert (result.intent, result.state) == ("CANCEL_ORDER", "CANCELLED")'''),
    new_markdown_cell("## The audit trail\n\nEvery step writes audit events; here are the last turn's, without the "
                      "step enter/exit markers."),
    new_code_cell('''events = engine.audit(cid)
last_turn = [e for e in events if e.payload.get("step") != "load_or_create_conversation"]
starts = [i for i, e in enumerate(events) if e.stage == "STEP_ENTER" and e.payload["step"] == "load_or_create_conversation"]
rows = [(e.stage, e.step or "", str(e.payload)[:70]) for e in events[starts[-1]:]
        if e.stage not in ("STEP_ENTER", "STEP_EXIT", "STEP_SKIPPED")]
width = max(len(r[0]) for r in rows)
for stage, step, payload in rows:
    print(f"{stage:<{width}}  {step:<22} {payload}")
assert any(stage == "PENDING_ACTION_EXECUTED" for stage, _, _ in rows)'''),
    new_markdown_cell("## The step trace and the graph\n\nEvery turn is one run of this LangGraph graph; "
                      "conditional edges are dashed."),
    new_code_cell('''trace = engine.trace(cid)
print(len(trace["steps"]), "steps across", sum(1 for s in trace["steps"] if s["step"] == "load_or_create_conversation"), "turns")
steps_run = {s["step"] for s in trace["steps"]}
turn_graph(engine, highlight=steps_run)  # the steps this conversation ran are highlighted'''),
    new_code_cell("engine.close()"),
]

RULES = [
    new_markdown_cell("# Rules and the state graph\n\nRules move a conversation between states; `ce_state_graph` "
                      "says which moves are allowed. With `HARD_BLOCK` a forbidden move keeps the state the turn "
                      "started in."),
    new_code_cell(SETUP),
    new_code_cell('''pack = {
    "settings": {"flow": {"dialogue-act": {"resolute": "REGEX_ONLY"}, "state-graph": {"mode": "HARD_BLOCK"}}},
    "ce_intent": [{"intent_code": "TICKET", "description": "a support ticket"}],
    "ce_intent_classifier": [{"intent_code": "TICKET", "state_code": "NEW", "rule_type": "CONTAINS",
                              "pattern": "ticket", "priority": 1}],
    "ce_rule": [
        {"intent_code": "TICKET", "state_code": "NEW", "rule_type": "REGEX", "match_pattern": r"\\bassign\\b",
         "action": "SET_STATE", "action_value": "ASSIGNED"},
        {"intent_code": "TICKET", "state_code": "ASSIGNED", "rule_type": "REGEX", "match_pattern": r"\\bsolved\\b",
         "action": "SET_STATE", "action_value": "RESOLVED"},
        {"intent_code": "TICKET", "state_code": "NEW", "rule_type": "REGEX", "match_pattern": r"\\bclose\\b",
         "action": "SET_STATE", "action_value": "RESOLVED"},
        {"intent_code": "TICKET", "state_code": "ANY", "rule_type": "JSON_PATH",
         "match_pattern": "$[?(@.inputParams.priority == 'high')]", "action": "SET_INPUT_PARAM",
         "action_value": '{"escalate": true}'},
    ],
    "ce_state_graph": [
        {"intent_code": "TICKET", "from_state": "UNKNOWN", "to_state": "NEW"},
        {"intent_code": "TICKET", "from_state": "NEW", "to_state": "ASSIGNED"},
        {"intent_code": "TICKET", "from_state": "ASSIGNED", "to_state": "RESOLVED"},
    ],
    "ce_response": [
        {"intent_code": "TICKET", "state_code": s, "exact_text": f"Ticket is {s.lower()}. escalate={{{{escalate}}}}"}
        for s in ("NEW", "ASSIGNED", "RESOLVED")
    ] + [{"intent_code": "UNKNOWN", "state_code": "UNKNOWN", "exact_text": "Say 'open a ticket'."}],
}
engine = Engine.open(f"sqlite:///{workdir / 'rules.db'}", pack=pack)
state_graph(engine)  # ce_state_graph transitions (solid) and the rules' SET_STATE moves (dashed)'''),
    new_markdown_cell("The rule `close` moves NEW straight to RESOLVED (dashed), which the state graph does not "
                      "allow; with `HARD_BLOCK` that move is refused."),
    new_code_cell('''first = engine.process("open a ticket", input_params={"priority": "high"})
print(first.state, "|", first.payload.value)'''),
    new_code_cell('''blocked = engine.process("close it now", first.conversation_id)
print(blocked.state, "|", blocked.payload.value)
violations = [e.payload for e in engine.audit(first.conversation_id) if e.stage == "STATE_GRAPH_VIOLATION"]
print(violations[-1])
assert blocked.state == "NEW" and violations[-1]["toState"] == "RESOLVED"'''),
    new_code_cell('''for message in ("assign to Kim", "it is solved"):
    result = engine.process(message, first.conversation_id)
    print(f"{message!r:18} -> {result.state}")
assert result.state == "RESOLVED"
engine.close()'''),
]

SLOTS = [
    new_markdown_cell("# Slot filling with a scripted model\n\nThe loan pack collects three fields with the "
                      "`SCHEMA_EXTRACTION` call site, asks for confirmation, applies a one-field edit without an "
                      "LLM call, and submits. `ScriptedLLM` plays the model offline; every call is logged."),
    new_code_cell(SETUP),
    new_code_cell('''from loan_application_scripted import LLM
from loan_application_tasks import TASKS

engine = Engine.open(f"sqlite:///{workdir / 'slots.db'}", pack=EXAMPLES / "loan_application.yaml", llm=LLM, tasks=TASKS)
cid = None
for message in ["I'd like a loan", "my name is Ann Lee", "25k over 3 years", "change the amount to 30000", "yes"]:
    LLM.reset_log()
    result = engine.process(message, cid)
    cid = result.conversation_id
    print(f"{message!r:30} {result.state:10} calls={LLM.sites()}\\n    {result.payload.value}")
assert result.state == "SUBMITTED"'''),
    new_code_cell('''fields = {k: result.context[k] for k in ("customerName", "amount", "termMonths")}
print(fields)
assert fields == {"customerName": "Ann Lee", "amount": 30000, "termMonths": 36}'''),
    new_markdown_cell("The states the pack moves through (rules' SET_STATE moves are dashed):"),
    new_code_cell('''state_graph(engine)'''),
    new_code_cell("engine.close()"),
]

TOOLS = [
    new_markdown_cell("# Tools and the planner loop\n\nTools are `ce_mcp_tool` rows backed by Python handlers (or "
                      "SQL templates, HTTP specs, MCP servers). The planner (call site `MCP_PLANNER`) chooses the next "
                      "tool until it can answer; each step is a pass through the `mcp_planner` and `mcp_tool_call` "
                      "nodes."),
    new_code_cell(SETUP),
    new_code_cell('''pack = {
    "settings": {"flow": {"dialogue-act": {"resolute": "REGEX_ONLY"}}},
    "ce_intent": [{"intent_code": "ORDER_HELP", "description": "questions about an order"}],
    "ce_intent_classifier": [{"intent_code": "ORDER_HELP", "state_code": "ANALYZE", "rule_type": "CONTAINS",
                              "pattern": "order", "priority": 1}],
    "ce_mcp_tool": [
        {"tool_code": "order.status", "tool_group": "HTTP_API", "intent_code": "ORDER_HELP", "state_code": "ANALYZE",
         "description": "Current status of an order"},
        {"tool_code": "order.trace", "tool_group": "HTTP_API", "intent_code": "ORDER_HELP", "state_code": "ANALYZE",
         "description": "Async callback trace of an order"},
    ],
    "ce_mcp_planner": [{"intent_code": "ORDER_HELP", "state_code": "ANALYZE", "system_prompt": "Diagnose orders.",
                        "user_prompt": "{{user_input}} | observations: {{mcp_observations}}"}],
    "ce_rule": [{"phase": "POST_AGENT_MCP", "intent_code": "ORDER_HELP", "state_code": "ANALYZE",
                 "rule_type": "JSON_PATH", "match_pattern": "$[?(@.context.mcp.finalAnswer)]",
                 "action": "SET_STATE", "action_value": "DONE"}],
    "ce_response": [{"intent_code": "ORDER_HELP", "state_code": "DONE", "exact_text": "{{context.mcp.finalAnswer}}"},
                    {"intent_code": "ORDER_HELP", "state_code": "ANALYZE", "exact_text": "Still looking."},
                    {"intent_code": "UNKNOWN", "state_code": "UNKNOWN", "exact_text": "Ask about an order."}],
}
tools = {
    "order.status": lambda args: {"orderId": args["orderId"], "status": "SUBMITTED", "summary": "waiting for callback"},
    "order.trace": lambda args: {"orderId": args["orderId"], "callbacks": [], "summary": "no callback received"},
}
planner = ScriptedLLM({"MCP_PLANNER": [
    {"action": "CALL_TOOL", "tool_code": "order.status", "args": {"orderId": "A7"}, "answer": None, "operation_tag": None},
    {"action": "CALL_TOOL", "tool_code": "order.trace", "args": {"orderId": "A7"}, "answer": None, "operation_tag": None},
    {"action": "ANSWER", "tool_code": None, "args": {}, "operation_tag": None,
     "answer": "Order A7 is submitted but its callback never arrived; it needs a manual retry."},
]})
engine = Engine.open(f"sqlite:///{workdir / 'tools.db'}", pack=pack, tools=tools, llm=planner)
result = engine.process("why is order A7 stuck?")
print(result.state, "|", result.payload.value)
assert result.state == "DONE"'''),
    new_code_cell('''for observation in result.context["mcp"]["observations"]:
    print(observation["toolCode"], "->", observation["json"]["summary"])
steps = [s["step"] for s in engine.trace(result.conversation_id)["steps"]]
print("planner visits:", steps.count("mcp_planner"), "tool calls:", steps.count("mcp_tool_call"))
assert steps.count("mcp_tool_call") == 2'''),
    new_markdown_cell("The planner loop in the turn graph: `mcp_planner` and `mcp_tool_call` (highlighted) "
                      "alternate until the planner answers."),
    new_code_cell('''turn_graph(engine, highlight=["mcp_planner", "mcp_tool_call"])'''),
    new_code_cell("engine.close()"),
]


KNOWLEDGE = [
    new_markdown_cell('''# An FAQ assistant over a knowledge base

Knowledge bases hold documents split into passages. When no intent matches, the engine answers
from them (`knowledge.fallback`), with the sources in the payload; intents still win when they
match. This notebook ingests the Markdown and HTML files of `examples/faq/`, asks questions,
shows every score behind an answer, and resolves an intent with a `SEMANTIC` classifier.
Offline: `HashingEmbeddings` stands in for a real embeddings model (any LangChain `Embeddings` works).'''),
    new_code_cell(SETUP),
    new_code_cell('''import yaml

from convengine.knowledge import HashingEmbeddings

engine = Engine.open(f"sqlite:///{workdir / 'faq.db'}", pack=EXAMPLES / "faq_assistant.yaml",
                     embeddings=HashingEmbeddings())
print(engine.knowledge.ingest("faq", [EXAMPLES / "faq"]))
engine.knowledge.list()'''),
    new_markdown_cell('''## Questions answered from the documents, and handing over to intents'''),
    new_code_cell('''for question in ["hello", "my item arrived damaged", "what are your opening hours on saturday",
                 "do you sell pizza", "I want to talk to a person"]:
    result = engine.process(question)
    sources = [(s["source"].split("/")[-1], s["score"]) for s in result.payload.sources or []]
    print(f"{question!r} -> {result.intent}: {result.text[:80]!r} {sources}")'''),
    new_markdown_cell('''## Why that answer

The audit of a fallback turn holds the query, every candidate and its scores: `lexical` (the share of the
question's content words the passage contains), `vector` (cosine similarity) and the fused `score` the
threshold `min_score` applies to.'''),
    new_code_cell('''result = engine.process("my item arrived damaged")
[event] = [e for e in engine.audit(result.conversation_id) if e.stage == "KNOWLEDGE_FALLBACK_ANSWERED"]
for candidate in event.payload["candidates"]:
    print({**candidate, "source": candidate["source"].rsplit("/", 1)[-1]})'''),
    new_markdown_cell("The steps that turn ran, highlighted in the turn graph:"),
    new_code_cell('''turn_graph(engine, highlight={s["step"] for s in engine.trace(result.conversation_id)["steps"]})'''),
    new_markdown_cell('''## A SEMANTIC intent classifier

A classifier row of `rule_type: SEMANTIC` lists example phrases; a message close enough to one of them
(by embedding similarity, here at least 0.6) resolves the intent even when no pattern matches.'''),
    new_code_cell('''pack = yaml.safe_load((EXAMPLES / "faq_assistant.yaml").read_text())
pack["ce_intent"].append({"intent_code": "CANCEL_ORDER", "description": "Cancel an order", "priority": 30})
pack["ce_intent_classifier"].append({"intent_code": "CANCEL_ORDER", "rule_type": "SEMANTIC", "priority": 30,
                                     "pattern": '{"examples": ["cancel my order", "please stop my order"], "threshold": 0.6}'})
pack["ce_response"].append({"intent_code": "CANCEL_ORDER", "state_code": "ANY", "output_format": "TEXT",
                            "response_type": "EXACT", "exact_text": "Which order should I cancel?"})
engine.close()
engine = Engine.open(f"sqlite:///{workdir / 'semantic.db'}", pack=pack, embeddings=HashingEmbeddings())
result = engine.process("stop the order please")
print(result.intent, "-", result.text)
[scores] = [e.payload for e in engine.audit(result.conversation_id) if e.stage == "INTENT_CLASSIFIER_SEMANTIC_SCORES"]
scores'''),
    new_code_cell('''engine.close()'''),
]


FLOWS = [
    new_markdown_cell('''# Conversation flows

A flow is a graph of typed nodes (`message`, `entity`, `service`, `python`, `subflow`, `decision`,
`handoff`, `agent`...) stored in `ce_flow`, `ce_flow_node` and `ce_flow_edge`. This notebook runs the loan
assistant of `examples/flows_assistant.yaml`: the bot speaks first, a form reprompts, "hello" in the
middle digresses and comes back to the same question, a quote comes from an HTTP service (a small
server started here on 127.0.0.1) and a sandboxed python node computes the monthly payment.'''),
    new_code_cell(SETUP),
    new_code_cell('''import json
import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer


class Quotes(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = json.dumps({"rate": 6.5 if int(body["term"]) > 12 else 5.0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Quotes)
threading.Thread(target=server.serve_forever, daemon=True).start()
os.environ["PACK_QUOTE_API_URL"] = f"http://127.0.0.1:{server.server_port}"
# a scripted model: the agent node's answer, and "no intent" from the LLM matcher
llm = ScriptedLLM({"MCP_PLANNER": [{"action": "ANSWER", "tool_code": None, "args": None, "operation_tag": None,
                                    "answer": "A fixed rate keeps payments steady; a variable one can move."}]},
                  default={"intent": None, "confidence": 0})
engine = Engine.open(f"sqlite:///{workdir / 'flows.db'}", pack=EXAMPLES / "flows_assistant.yaml", llm=llm,
                     settings={"mcp": {"http_api": {"allowed_hosts": ["127.0.0.1"]}}})'''),
    new_markdown_cell("The LOAN flow, node by node (`node_id: node_type`; edges named by outcome):"),
    new_code_cell('''flow_graph(engine, "LOAN")'''),
    new_markdown_cell("## The bot speaks first, then a form with a digression"),
    new_code_cell('''first = engine.start()
cid = first.conversation_id
print("bot>", first.payload.value["messages"][0]["text"])
for message in ["I want a loan", "a lot", "hello", "12,000 please", "24", "yes"]:
    result = engine.process(message, cid)
    print(f"you> {message}\\nbot> {result.text}   [{engine.state(cid)['flow'].get('stack')}]")
assert result.text == "Submitted. We will be in touch."'''),
    new_markdown_cell('''## Small talk, an agent node, a human and back

"hello, ..." is small talk covering little of the message, so the loan intent wins. Asking for advice
mid-form digresses into an `agent` node (the scripted model answers), then the form asks again.
Three failed amounts escalate to a human: the bot stays silent until `resume_from_handoff`.'''),
    new_code_cell('''cid = engine.start().conversation_id
for message in ["hello, I want a loan", "some advice first", "fixed or variable?", "no", "no", "no", "anyone?"]:
    result = engine.process(message, cid)
    print(f"you> {message}\\nbot> {result.text!r}   [{result.status}]")
assert result.status == "HANDOFF" and result.text == ""
back = engine.resume_from_handoff(cid)
print("resumed>", back.text, f"[{back.status}]")
assert back.text.endswith("How much would you like to borrow?")'''),
    new_markdown_cell('''## What the flow did

Every node the walker visited is audited (`FLOW_NODE`), with the service call, the script's
`print()` output and the digression.'''),
    new_code_cell('''for event in engine.audit(cid):
    if event.stage.startswith("FLOW_") and event.stage != "FLOW_NODE":
        print(event.stage, {k: v for k, v in event.payload.items() if k in ("flow", "node", "output", "status")})'''),
    new_code_cell('''engine.close()
server.shutdown()'''),
]


CHAINS = [
    new_markdown_cell('''# Chains

A chain is a durable run of primitive steps (`assistant`, `agent`, `webhook`, `human`, `decide`, `notify`,
`schedule`) stored in `ce_chain` and `ce_chain_step`. This notebook runs `examples/chains_approvals.yaml`:
a refund asks the assistant, decides on the amount, waits for a person's approval, calls a payments
webhook (a small server started here on 127.0.0.1) and notifies; a reminder waits for its schedule.'''),
    new_code_cell(SETUP),
    new_code_cell('''import json
import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from convengine.chains import Chains


class Payments(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = json.dumps({"id": f"R-{body['order']}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Payments)
threading.Thread(target=server.serve_forever, daemon=True).start()
os.environ["PACK_PAYMENTS_URL"] = f"http://127.0.0.1:{server.server_port}"
engine = Engine.open(f"sqlite:///{workdir / 'chains.db'}", pack=EXAMPLES / "chains_approvals.yaml",
                     settings={"mcp": {"http_api": {"allowed_hosts": ["127.0.0.1"]}}})
chains = Chains(engine)'''),
    new_markdown_cell("## A refund that needs a person: the run pauses at the human step"),
    new_code_cell('''run = chains.start("REFUND", {"order": "A1", "amount": 250})
print(run.status, "at", run.current_step)
for step in run.steps:
    print(step["seq"], step["step"], step["status"], step["output"])
assert (run.status, run.current_step) == ("WAITING", "approve")'''),
    new_markdown_cell("Someone approves it (over HTTP: `POST /api/v1/chains/runs/{id}/resume`); the run goes on "
                      "to the webhook and the notification."),
    new_code_cell('''done = chains.resume(run.run_id, {"approved": True})
print(done.status)
print(done.output["done"]["text"])
assert done.status == "COMPLETED" and done.output["pay"]["response"] == {"id": "R-A1"}'''),
    new_markdown_cell("## A small refund skips the approval"),
    new_code_cell('''small = chains.start("REFUND", {"order": "B2", "amount": 40})
print(small.status, [s["step"] for s in small.steps])
assert "approve" not in [s["step"] for s in small.steps]'''),
    new_markdown_cell('''## A schedule

The reminder waits for its `schedule` step; a server's scheduler (or `convengine chains run-due` from
cron) resumes due runs, each exactly once. Its delay is 0 here, so it is due at once.'''),
    new_code_cell('''reminder = chains.start("REMIND", {"name": "Ana"})
print(reminder.status, reminder.due_at)
fired = chains.run_due()
print([(r.chain, r.status) for r in fired])
assert [r.status for r in fired] == ["COMPLETED"] and chains.run_due() == []'''),
    new_code_cell('''chain_graph(engine, "REFUND")  # its steps in order, the decide step's branches labelled'''),
    new_markdown_cell("## The audit trail of a run is its conversation's"),
    new_code_cell('''for event in engine.audit(done.conversation_id):
    if event.stage.startswith("CHAIN_"):
        print(event.stage, {k: v for k, v in event.payload.items() if k in ("step", "type", "text", "by")})
engine.close()
server.shutdown()'''),
]


MEMORY = [
    new_markdown_cell('''# Conversation memory: users, long-term properties, undo and redo

A small pack keeps the customer's preferred language as a **long-term** property (it follows the user into their next conversation) and their PIN as a **secret** (used by a task, stored nowhere). Then we undo and redo turns.'''),
    new_code_cell(SETUP),
    new_code_cell('PACK = {\n    "settings": {"flow": {"dialogue-act": {"resolute": "REGEX_ONLY"}},\n                 "conversation_memory": {"long_term": ["language"], "secret": ["pin"], "undo_depth": 3}},\n    "ce_intent": [{"intent_code": "GREETING", "description": "hello"}, {"intent_code": "LOAN", "description": "loans"}],\n    "ce_intent_classifier": [\n        {"intent_code": "GREETING", "state_code": "IDLE", "rule_type": "REGEX", "pattern": r"^\\s*(hi|hello)\\b", "priority": 1},\n        {"intent_code": "LOAN", "state_code": "START", "rule_type": "CONTAINS", "pattern": "loan", "priority": 2}],\n    "ce_rule": [{"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "LOAN", "state_code": "START", "rule_type": "REGEX",\n                 "match_pattern": "(?i)french", "action": "SET_TASK", "action_value": "prefs:french", "priority": 1}],\n    "ce_response": [\n        {"intent_code": "GREETING", "state_code": "IDLE",\n         "exact_text": "Hello {{userInfo.userId}}! (language: {{properties.language ?: \'not set yet\'}})"},\n        {"intent_code": "LOAN", "state_code": "START", "exact_text": "Loan started (turn {{conversationInfo.turn}})"},\n        {"intent_code": "UNKNOWN", "state_code": "UNKNOWN", "exact_text": "Sorry?"}],\n}\n\ndef french(task):\n    task.context["language"] = "fr"\n\nengine = Engine.open(nb.database("memory.db"), pack=PACK, tasks={"prefs": {"french": french}})'),
    new_markdown_cell('''## Long-term properties follow the user'''),
    new_code_cell('''first = engine.process("a loan in french please", user_id="ana", input_params={"pin": "4821"})
print(first.text)
print("stored for ana:", engine.properties("ana"))
print("pin kept anywhere?", "4821" in repr(engine.state(first.conversation_id)))

second = engine.process("hello", user_id="ana")          # a new conversation of the same user
print(second.text)
print(engine.process("hello", user_id="bob").text)       # another user sees nothing of ana's'''),
    new_markdown_cell('''## Undo and redo

Each undo takes back one turn (checkpoint, conversation row, prompt window, pending actions, long-term values); redo re-applies it. The audit keeps everything and adds `UNDO` / `REDO`.'''),
    new_code_cell('''cid = second.conversation_id
for message in ["I need a loan", "a loan, in french", "hello"]:
    print(engine.process(message, cid).text)

result = engine.undo(cid)
print("undo ->", result.turn, result.intent, result.state)
result = engine.undo(cid)
print("undo ->", result.turn, result.intent, result.state, "| side effects:", result.side_effects)
print("redo ->", engine.redo(cid).turn)
print([(h["user_input"], h["undone"]) for h in engine.history(cid)])
print([e.stage for e in engine.audit(cid) if e.stage in ("UNDO", "REDO")])'''),
    new_markdown_cell("The steps this conversation's turns ran, highlighted in the turn graph:"),
    new_code_cell('''turn_graph(engine, highlight={s["step"] for s in engine.trace(cid)["steps"]})'''),
    new_markdown_cell('''## Steps, lifecycle and erasure'''),
    new_code_cell('''for step in engine.steps(cid):
    print(step["turn"], step["input"], "->", step["output"], "| undone:", step["undone"])
print(engine.lifecycle(cid))
print(engine.forget_user("ana", conversations=True))
print(engine.properties("ana"))
engine.close()'''),
]


WORKFLOWS = [
    new_markdown_cell('''# Workflows

A workflow is a graph that decides what the assistant does without intent matching: every message
enters at a `trigger`, a `router` picks the next node by each edge's `condition.expr` (on the user's
text and the variables), `tool` nodes run registered tools through the engine's tool bridge, a
`workflow` node hands over to a sub-workflow and comes back, and agents, knowledge and `end` nodes
answer. This notebook runs the support assistant of `examples/workflows_assistant.yaml` with a
scripted model and a Python handler for its tool.'''),
    new_code_cell(SETUP),
    new_code_cell('''ORDERS = {"1234": {"order_id": "1234", "status": "shipped"},
          "77": {"order_id": "77", "status": "delayed", "eta": "Monday"}}


def order_status(args):
    """The tool the ORDER_STATUS workflow's tool node runs (registered for ce_mcp_tool orders.status)."""
    number = "".join(ch for ch in str(args["order_id"]) if ch.isdigit())
    if number not in ORDERS:
        raise LookupError(f"no order {number}")
    return ORDERS[number]


def answer(text):
    return {"action": "ANSWER", "answer": text, "tool_code": None, "args": None, "operation_tag": None}


llm = ScriptedLLM({"MCP_PLANNER": [answer("Happy to help: ask me about an order or our opening hours."),
                                   answer("You are welcome!"),
                                   answer("Welcome back! Your orders are on their way.")]},
                  default={"intent": None, "confidence": 0})
engine = Engine.open(f"sqlite:///{workdir / 'workflows.db'}", pack=EXAMPLES / "workflows_assistant.yaml",
                     llm=llm, tools={"orders.status": order_status})
print(engine.knowledge.ingest("faq", [EXAMPLES / "faq"]))'''),
    new_markdown_cell("## Routing by the user's text, a tool node and a sub-workflow"),
    new_code_cell('''first = engine.process("hi")
print("bot>", first.text)
cid, replies = first.conversation_id, []
for message in ["where is my order 1234?", "and order 77?", "order 5?", "when are you open?", "thanks"]:
    result = engine.process(message, cid)
    print(f"you> {message}\\nbot> {result.text}")
    replies.append(result.text)
assert replies[:3] == ["Order 1234 is shipped.", "Order 77 is delayed; it should ship by Monday.",
                       "I could not look that order up; please check the number."]
order = [e.payload for e in engine.audit(cid) if e.stage == "WORKFLOW_TOOL_EXECUTED"]
[(o["args"], o["status"]) for o in order]'''),
    new_markdown_cell('''## Routing by a variable

The router's edge `user.tier == 'gold'` reads the conversation's input params: a gold customer
goes to the concierge agent.'''),
    new_code_cell('''gold = engine.process("hello", input_params={"tier": "gold"})
print(gold.text)
assert gold.text == "Welcome back! Your orders are on their way."
[(e.payload["from"], e.payload["to"], e.payload["condition"]) for e in engine.audit(gold.conversation_id)
 if e.stage == "WORKFLOW_ROUTED"]'''),
    new_markdown_cell("## The path of one turn, and the graphs"),
    new_code_cell('''turn = engine.process("is order 1234 here yet?", cid)
for event in engine.audit(cid)[-40:]:
    if event.stage.startswith("WORKFLOW_"):
        print(event.stage, {k: v for k, v in event.payload.items() if k in ("workflow", "node", "to", "tool", "status")})
engine.state(cid)["workflow"]["vars"]["order"]'''),
    new_code_cell('''from convengine.flows.display import attach_flows

view = attach_flows(engine.graph, engine.snapshot).get_graph(xray=True)
sorted(n for n in view.nodes if n.startswith("flow:"))'''),
    new_code_cell('''flow_graph(engine, "SUPPORT")  # the workflow every message enters, node by node'''),
    new_code_cell('''engine.close()'''),
]


def write(name: str, cells: list) -> None:
    """Execute the notebook (as Jupyter would, from notebooks/) and store it with its outputs."""
    for number, cell in enumerate(cells, start=1):
        cell["id"] = f"cell-{number:02d}"  # stable ids: regenerating changes only what was edited
    notebook = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                   "language": "python"}})
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
    for cell in notebook.cells:
        cell.get("metadata", {}).pop("execution", None)  # timings: noise in a diff
    nbformat.write(notebook, HERE / name)
    print(f"wrote notebooks/{name}")


if __name__ == "__main__":
    HERE.mkdir(exist_ok=True)
    write("01_quickstart.ipynb", QUICKSTART)
    write("02_rules_and_state_graph.ipynb", RULES)
    write("03_slot_filling.ipynb", SLOTS)
    write("04_tools_and_planner.ipynb", TOOLS)
    write("05_knowledge.ipynb", KNOWLEDGE)
    write("06_memory.ipynb", MEMORY)
    write("07_flows.ipynb", FLOWS)
    write("08_workflows.ipynb", WORKFLOWS)
    write("09_chains.ipynb", CHAINS)
