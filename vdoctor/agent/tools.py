"""The agent's tools: knowledge lookups and the session's signal history.

Each tool is one ``Tool`` definition: its spec (what the model sees) and its
handler side by side. A new tool is one more definition in ``TOOLS``. A
toolbox is built per agent run over one vehicle's session, so a tool can only
ever see that vehicle's data.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vdoctor.errors import ModelError, StoreError
from vdoctor.knowledge import KnowledgePack
from vdoctor.knowledge.chunks import codes_in
from vdoctor.knowledge.search import KnowledgeBase
from vdoctor.lines import iso
from vdoctor.memory.session import SessionState
from vdoctor.models.base import ToolSpec

log = logging.getLogger(__name__)

# A tool result is injected into the context: keep it small.
MAX_READINGS_RETURNED = 12
MAX_ENTRIES_PER_LOOKUP = 8
MAX_QUERY_CHARS = 500
MAX_HIT_CHARS = 400
# A tool result as ``json.dumps(result, ensure_ascii=False, sort_keys=True)`` writes it, without an encoder per call.
_RESULT_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True).encode


@dataclass(frozen=True)
class ToolContext:
    """What a tool may read: the knowledge pack, this vehicle's session, the knowledge base if any."""

    pack: KnowledgePack
    session: SessionState
    knowledge: KnowledgeBase | None = None


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    run: Callable[[ToolContext, dict[str, Any]], dict[str, Any]]
    # False when the context lacks what the tool needs; the model is then not offered it.
    available: Callable[[ToolContext], bool] = lambda ctx: True


def _lookup_dtc(ctx: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    codes = arguments.get("codes")
    if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
        return {"error": "codes must be a list of strings"}
    found: list[dict[str, object]] = []
    unknown: list[str] = []
    meanings: dict[str, str] = {}
    # At most 8 entries a call (each some 180 tokens), up to the ninth code the pack has; a code the pack lacks
    # costs its name alone, and each before that ninth is answered: a full scan after a low-voltage event
    # lists dozens of lost-communication codes. A J1939 code no entry holds is one the pack lacks too, with
    # what its SPN and FMI mean beside it (up to 8 a call, ~20 tokens each): as entries they took the 8 places,
    # and a scan of 14 such codes hid the one code the pack could conclude on (found by a diff review).
    done = len(codes)
    for i, code in enumerate(codes):
        entry = ctx.pack.get(code)
        if entry is None or entry.from_parts:
            unknown.append(code)
            if entry is not None and len(meanings) < MAX_ENTRIES_PER_LOOKUP:
                meanings[entry.code] = entry.definition_en  # in its one written form, as a key fact names it
        elif len(found) < MAX_ENTRIES_PER_LOOKUP:
            found.append(entry.as_tool_result())
        else:
            done = i
            break
    result: dict[str, Any] = {"codes": found, "unknown": unknown}
    if meanings:
        result["meanings"] = meanings
    if done < len(codes):
        # Named, not dropped unsaid: a model that asked for more is told which codes to ask for again.
        result["not_looked_up"] = codes[done:]
    return result


def _signal_history(ctx: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    signal = arguments.get("signal")
    if not isinstance(signal, str) or not signal:
        return {"error": "signal must be a signal name such as cell_voltage_diff_mv"}
    readings = ctx.session.readings_of(signal)[-MAX_READINGS_RETURNED:]
    return {"signal": signal, "readings": [{"value": r.value, "ts": iso(r.ts), "uri": r.uri} for r in readings]}


def _search_knowledge(ctx: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    query, scope = arguments.get("query"), arguments.get("scope")
    if not isinstance(query, str) or not query.strip():
        return {"error": "query must be a non-empty string"}
    if scope is not None and not isinstance(scope, str):
        return {"error": "scope must be a string such as dtc:generic"}
    if ctx.knowledge is None:
        return {"error": "no knowledge base is configured"}
    query = query[:MAX_QUERY_CHARS]
    wanted = codes_in(query)
    try:
        found = ctx.knowledge.search(query, scope=scope or None)
    except (ModelError, StoreError) as e:
        # The embedder or the knowledge store is down: the model reads that the search failed and goes on
        # with what it has (its other tools, the session), rather than the vehicle's run failing.
        log.warning("knowledge search failed: %s", e)
        return {"error": f"knowledge search failed: {e}"}
    hits = []
    for h in found:
        # A chunk is 200-400 tokens; when the query names codes, only their lines matter.
        lines = [ln for ln in h.chunk.text.splitlines() if wanted and ln.split(":", 1)[0] in wanted]
        text = "\n".join(lines) if lines else h.chunk.text[:MAX_HIT_CHARS]
        hits.append(
            {
                "chunk_id": h.chunk.chunk_id,
                "scope": h.chunk.scope,
                "version": h.chunk.version,
                "score": round(h.score, 3),
                "text": text,
            }
        )
    return {"hits": hits}


TOOLS: tuple[Tool, ...] = (
    Tool(
        ToolSpec(
            name="lookup_dtc",
            description="Look up diagnostic trouble codes: definition, fault family, likely root "
            "cause, fix action, priority and the evidence that confirms the fault.",
            parameters={
                "type": "object",
                "properties": {"codes": {"type": "array", "items": {"type": "string"}}},
                "required": ["codes"],
            },
        ),
        _lookup_dtc,
    ),
    Tool(
        ToolSpec(
            name="signal_history",
            description="Readings of one signal (e.g. cell_voltage_diff_mv) in this vehicle's "
            "open diagnosis session, oldest first, with evidence URIs.",
            parameters={
                "type": "object",
                "properties": {"signal": {"type": "string"}},
                "required": ["signal"],
            },
        ),
        _signal_history,
    ),
    Tool(
        ToolSpec(
            name="search_knowledge",
            description="Search the knowledge base (code tables, repair rules) by free text or codes; "
            "optional scope filter such as dtc:generic, dtc:FORD or rules. Returns the best chunks.",
            parameters={
                "type": "object",
                "properties": {"query": {"type": "string"}, "scope": {"type": "string"}},
                "required": ["query"],
            },
        ),
        _search_knowledge,
        available=lambda ctx: ctx.knowledge is not None,
    ),
)
# Every tool's spec, as a hosted model is offered them when all are available.
SPECS = [tool.spec for tool in TOOLS]


class Toolbox:
    """The tools available to one run, bound to one session."""

    def __init__(self, pack: KnowledgePack, session: SessionState, knowledge: KnowledgeBase | None = None) -> None:
        self.context = ToolContext(pack, session, knowledge)
        self._tools = {tool.spec.name: tool for tool in TOOLS if tool.available(self.context)}

    @property
    def specs(self) -> list[ToolSpec]:
        return [tool.spec for tool in self._tools.values()]

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run a tool; bad arguments come back as an error result the model can read."""
        tool = self._tools.get(name)
        if tool is None:
            result: dict[str, Any] = {"error": f"unknown tool {name!r}; tools: {', '.join(self._tools)}"}
        else:
            result = tool.run(self.context, arguments)
        return _RESULT_JSON(result)
