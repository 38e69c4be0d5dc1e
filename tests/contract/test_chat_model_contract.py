"""One contract over every chat model in the registry: what the ReAct loop relies on.

The ``openai`` model runs with the real ``openai`` client over HTTP against the
local OpenAI-compatible model server. A registry entry without a factory here
fails ``test_every_registered_chat_model_is_covered``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import get_args

import pytest
from pydantic import SecretStr

from devtools.model_server import ModelServer, ServerConfig
from vdoctor.agent.react import MAX_ITERATIONS, run_react
from vdoctor.agent.tools import SPECS, Toolbox
from vdoctor.errors import ConfigError
from vdoctor.knowledge import load_pack
from vdoctor.lines import render_alert_block
from vdoctor.memory.session import SessionState
from vdoctor.models import CHAT_MODELS, ChatModel, ChatModelConfig, ChatModelName, Message, open_chat_model
from vdoctor.records import Phase

pytestmark = pytest.mark.contract

KEY = "sk-contract-chat-4242"
VIN = "LSVAU2180N2183294"
OPENED = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)


def _offline() -> Iterator[ChatModel]:
    yield open_chat_model("offline")


def _openai() -> Iterator[ChatModel]:
    with ModelServer(ServerConfig(api_key=KEY)) as server:
        model = open_chat_model(
            "openai", ChatModelConfig(model="contract-chat", base_url=server.base_url, api_key=SecretStr(KEY))
        )
        yield model
        model.close()


FACTORIES: dict[str, Callable[[], Iterator[ChatModel]]] = {"offline": _offline, "openai": _openai}


@pytest.fixture(params=sorted(FACTORIES))
def model(request: pytest.FixtureRequest) -> Iterator[ChatModel]:
    yield from FACTORIES[request.param]()


def alert_messages(codes: list[str]) -> list[Message]:
    block = render_alert_block(
        {"event_id": "e-1", "ts": "2026-11-01T08:15:30Z", "alert_text": "报警", "dtc_codes": codes}
    )
    return [Message(role="system", content="diagnose"), Message(role="user", content=f"## Current alert\n{block}")]


def session() -> SessionState:
    return SessionState(
        vin=VIN, series="EV-A", session_id=f"{VIN}-20261101T081530", opened_at=OPENED, last_event_at=OPENED
    )


def test_every_registered_chat_model_is_covered() -> None:
    assert set(FACTORIES) == set(CHAT_MODELS)
    assert set(get_args(ChatModelName)) == set(CHAT_MODELS)  # the names settings accept are the registry's


def test_an_unknown_chat_model_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="valid: " + ", ".join(CHAT_MODELS)):
        open_chat_model("gpt-5")


def test_a_turn_is_tool_calls_on_offered_tools_or_content(model: ChatModel) -> None:
    reply = model.chat(alert_messages(["U0140"]), SPECS)
    offered = {s.name for s in SPECS}
    assert reply.tool_calls or reply.content is not None
    for call in reply.tool_calls:
        assert call.name in offered and isinstance(call.arguments, dict) and call.id
    assert reply.prompt_tokens >= 0 and reply.completion_tokens >= 0
    assert isinstance(model.name, str) and model.name


def test_tool_results_fed_back_lead_to_a_final_answer(model: ChatModel) -> None:
    run = run_react(model, Toolbox(load_pack(), session()), alert_messages(["P0A7F"]))
    assert run.error is None and run.flags == []
    assert 2 <= run.llm_calls <= MAX_ITERATIONS and run.tool_calls >= 1
    assert run.answer.phase is Phase.INVESTIGATING and run.answer.codes == ["P0A7F"]
    assert run.prompt_tokens > 0
