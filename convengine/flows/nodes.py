"""What each node type does. A handler gets the walk, the flow, the node and how it is entered,
and returns a :class:`Result`; the compiler follows the edges."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from convengine._internal.textmatch import RegexTimeoutError, cached_regex
from convengine.catalog import flows as vocab
from convengine.catalog import stages
from convengine.config.flows import Flow
from convengine.config.records import FlowNodeRecord
from convengine.flows.agent import agent as run_agent
from convengine.flows.extract import extract_with_llm, wanted
from convengine.flows.python_node import run_script_node
from convengine.flows.service import answer_from_knowledge, call_service
from convengine.flows.walk_state import NEXT, WAIT, FlowError, Result, Walk
from convengine.rules.expr import ExpressionError, _number

Handler = Callable[[Walk, Flow, FlowNodeRecord, str], Awaitable[Result]]


def _config(node: FlowNodeRecord) -> dict[str, Any]:
    return node.config if isinstance(node.config, dict) else {}


def _where(flow: Flow, node: FlowNodeRecord) -> str:
    return f"ce_flow_node[{flow.code}/{node.node_id}]"


async def passthrough(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    return NEXT


async def end(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    if text := _config(node).get("text"):
        walk.say(walk.render(text, _where(flow, node)))
    return Result("end")


async def message(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    config = _config(node)
    text = walk.render(config.get("text") or "", _where(flow, node))
    walk.say(text, walk.render(config.get("blocks"), _where(flow, node)))
    return NEXT


async def fallback(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    if text := _config(node).get("text"):
        walk.say(walk.render(text, _where(flow, node)))
    return NEXT


async def set_variable(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    config = _config(node)
    name = str(config["variable"])
    if "expression" in config:
        value = walk.evaluate(str(config["expression"]), _where(flow, node))
    else:
        value = walk.render(config.get("value"), _where(flow, node))
    scope = walk.frame_vars() if config.get("scope") == "flow" else walk.variables
    scope[name] = value
    walk.turn.audit(stages.FLOW_VARIABLE_SET, {"flow": flow.code, "node": node.node_id, "variable": name,
                                             "scope": config.get("scope") or "session"})
    return NEXT


async def entity(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    """Ask, capture the answer into ``session.<variable>``; reprompt on failure, escalate after
    ``max_attempts`` failed answers."""
    config = _config(node)
    where = _where(flow, node)
    if mode in (vocab.MODE_ENTER, vocab.MODE_REASK):
        if mode == vocab.MODE_ENTER:
            walk.set_attempts(flow, node.node_id, 0)
        walk.say(walk.render(config["prompt"], where), walk.render(config.get("blocks"), where))
        return WAIT
    value = capture(walk, config)
    if value is None and wanted(config):
        value = await _llm_capture(walk, flow, node, config)
    name = str(config["variable"])
    if value is not None:
        walk.variables[name] = value
        walk.set_attempts(flow, node.node_id, 0)
        walk.turn.audit(stages.FLOW_ENTITY_CAPTURED, {"flow": flow.code, "node": node.node_id, "variable": name})
        return Result("next", vocab.CAPTURED)
    failures = walk.attempts(flow, node.node_id) + 1
    limit = int(config.get("max_attempts") or 3)
    audit = {"flow": flow.code, "node": node.node_id, "variable": name, "attempt": failures, "maxAttempts": limit}
    if failures >= limit:
        walk.set_attempts(flow, node.node_id, 0)
        walk.turn.audit(stages.FLOW_ENTITY_ESCALATED, audit)
        return Result("next", vocab.ESCALATE)
    walk.set_attempts(flow, node.node_id, failures)
    reprompts = list(config.get("reprompts") or []) or [config["prompt"]]
    walk.say(walk.render(reprompts[min(failures, len(reprompts)) - 1], where))
    walk.turn.audit(stages.FLOW_ENTITY_REPROMPT, audit)
    return WAIT


async def _llm_capture(walk: Walk, flow: Flow, node: FlowNodeRecord, config: dict[str, Any]) -> Any:
    """The LLM's value, held to the same pattern and type as a typed answer."""
    value = await extract_with_llm(walk, flow, node.node_id, config)
    if value is None or isinstance(value, (dict, list, bool)):
        return None
    spec = _capture_spec(config)
    if spec.get("pattern"):
        value = _pattern_value(spec, str(value))
    return _typed(config, value)


def _capture_spec(config: dict[str, Any]) -> dict[str, Any]:
    spec = config.get("capture")
    return spec if isinstance(spec, dict) else {}


def _pattern_value(spec: dict[str, Any], text: str) -> Any:
    try:
        found = cached_regex(str(spec["pattern"])).search(text)
    except RegexTimeoutError:
        found = None
    return (found.group(int(spec.get("group", 1))) if found and found.re.groups else
            found.group(0) if found else None)


def capture(walk: Walk, config: dict[str, Any]) -> Any:
    """The value of this turn's answer: an input param, a regex group, or the text; None if absent
    or not of the configured ``type`` (``number``)."""
    spec = _capture_spec(config)
    text = (walk.input or "").strip()
    if spec.get("param"):
        value = walk.turn.read_params().get(str(spec["param"]))
    elif spec.get("pattern"):
        value = _pattern_value(spec, text)
    elif wanted(config) and config.get("type") != "number":
        value = None  # free text is the LLM's to read (a number is parsed first)
    else:
        value = text or None
    return _typed(config, value)


def _typed(config: dict[str, Any], value: object) -> Any:
    if value is None or value == "":
        return None
    if config.get("type") == "number":
        try:
            return _number(value)
        except (ExpressionError, ValueError):
            return None
    return value


async def subflow(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    if mode == vocab.MODE_RETURN:
        return NEXT
    called = str(_config(node)["flow"])
    if walk.catalog.get(called) is None:
        raise FlowError(f"{_where(flow, node)}: subflow {called!r} is not an enabled flow")
    walk.turn.audit(stages.FLOW_SUBFLOW_CALL, {"flow": flow.code, "node": node.node_id, "subflow": called})
    return Result("call", flow=called)


async def handoff(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    if mode == vocab.MODE_RETURN:
        return NEXT
    if text := _config(node).get("text"):
        walk.say(walk.render(text, _where(flow, node)))
    return Result("handoff")


async def service(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    return await call_service(walk, flow, node, _config(node))


async def python(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    return await run_script_node(walk, flow, node, _config(node))


async def knowledge(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    return await answer_from_knowledge(walk, flow, node, _config(node))


async def agent(walk: Walk, flow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    return await run_agent(walk, flow, node, mode)


HANDLERS: dict[str, Handler] = {
    vocab.START: passthrough,
    vocab.INTENT: passthrough,
    vocab.DECISION: passthrough,
    vocab.ROUTER: passthrough,
    vocab.END: end,
    vocab.MESSAGE: message,
    vocab.FALLBACK: fallback,
    vocab.SET: set_variable,
    vocab.ENTITY: entity,
    vocab.SUBFLOW: subflow,
    vocab.HANDOFF: handoff,
    vocab.SERVICE: service,
    vocab.PYTHON: python,
    vocab.KNOWLEDGE: knowledge,
    vocab.AGENT: agent,
}
