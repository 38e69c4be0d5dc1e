"""OpenAIChatModel through the real ``openai`` client over HTTP, against the local model server.

Each test starts its own server on a free port with the error schedule it needs.
"""

from __future__ import annotations

import logging
import random
import traceback
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from devtools.model_server import ModelServer, ServerConfig
from vdoctor import assembly
from vdoctor.agent.react import MODEL_FAILED, run_react
from vdoctor.agent.tools import SPECS, Toolbox
from vdoctor.errors import ConfigError, ModelError
from vdoctor.knowledge import load_pack
from vdoctor.memory.session import SessionState
from vdoctor.memory.summarizer import ModelSummarizer
from vdoctor.models.base import ChatResponse, Message, ToolCall, ToolSpec
from vdoctor.models.openai import BACKOFF_BASE_S, OpenAIChatModel, backoff_s
from vdoctor.settings import load_settings

pytestmark = pytest.mark.integration

KEY = "sk-test-9f8e7d6c5b4a"
ALERT = 'alert\n```json alert\n{"dtc_codes": ["U0140"]}\n```'
MESSAGES = [Message(role="system", content="diagnose"), Message(role="user", content=ALERT)]


@pytest.fixture
def sleeps() -> list[float]:
    return []


def make_model(url: str, sleeps: list[float], attempts: int = 4, timeout_s: float = 5.0) -> OpenAIChatModel:
    return OpenAIChatModel(
        "chat-test", SecretStr(KEY), url, timeout_s=timeout_s, max_attempts=attempts,
        sleep=sleeps.append, rng=random.Random(7),
    )  # fmt: skip


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[ModelServer]:
    config = getattr(request, "param", ServerConfig())
    with ModelServer(config) as srv:
        yield srv


def test_tool_call_then_answer_round_trip_with_usage_and_latency(server: ModelServer, sleeps: list[float]) -> None:
    model = make_model(server.base_url, sleeps)
    first = model.chat(MESSAGES, SPECS)
    assert first.content is None
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("lookup_dtc", {"codes": ["U0140"]})]
    assert first.prompt_tokens > 0 and first.completion_tokens > 0 and first.latency_ms > 0
    # Feed a tool result back: the offline decision behind the server then answers.
    call = first.tool_calls[0]
    lookup = '{"codes": [{"code": "U0140", "root_cause": "r", "fix_action": "f", "priority": "P2", '
    lookup += '"confirm": "code seen in 2 alerts"}], "unknown": []}'
    follow = [
        *MESSAGES,
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", content=lookup, tool_call_id=call.id),
    ]
    second = model.chat(follow, SPECS)
    assert second.tool_calls == () and second.content is not None and '"INVESTIGATING"' in second.content
    assert server.stats["ok"] == 2 and sleeps == []


@pytest.mark.parametrize(
    "server", [ServerConfig(error_schedule=["429", "500", "malformed", "timeout"], timeout_hang_s=2.0)], indirect=True
)
def test_retries_429_500_malformed_and_timeout_then_succeeds(server: ModelServer, sleeps: list[float]) -> None:
    model = make_model(server.base_url, sleeps, attempts=5, timeout_s=0.5)
    reply = model.chat(MESSAGES, SPECS)
    assert reply.tool_calls and reply.extra["attempts"] == 5
    assert server.stats["requests"] == 5
    # Full-jitter exponential backoff: retry n waits within [0, 0.5 * 2**(n-1)] s.
    assert len(sleeps) == 4
    assert all(0 <= s <= BACKOFF_BASE_S * 2**i for i, s in enumerate(sleeps))


@pytest.mark.parametrize("server", [ServerConfig(error_schedule=["500", "500", "500"])], indirect=True)
def test_gives_up_after_the_attempt_bound(server: ModelServer, sleeps: list[float]) -> None:
    model = make_model(server.base_url, sleeps, attempts=3)
    with pytest.raises(ModelError, match="gave up after 3 attempts.*HTTP 500"):
        model.chat(MESSAGES, SPECS)
    assert server.stats["requests"] == 3 and len(sleeps) == 2


@pytest.mark.parametrize("server", [ServerConfig(error_schedule=["400"])], indirect=True)
def test_other_4xx_is_not_retried_and_never_shows_the_key(
    server: ModelServer, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    model = make_model(server.base_url, sleeps)
    with caplog.at_level(logging.DEBUG), pytest.raises(ModelError, match="HTTP 400, not retried") as info:
        model.chat(MESSAGES, SPECS)
    assert server.stats["requests"] == 1 and sleeps == []
    # The injected 400 echoes the Authorization header it received.
    assert KEY not in str(info.value) and "[redacted]" in str(info.value)
    assert KEY not in caplog.text and KEY not in repr(model)
    # Nor in the traceback: the openai error that holds the echo is not chained as the cause.
    assert KEY not in "".join(traceback.format_exception(info.value))


@pytest.mark.parametrize("server", [ServerConfig(api_key="sk-the-right-one")], indirect=True)
def test_wrong_key_is_a_clear_error_without_the_key(server: ModelServer, sleeps: list[float]) -> None:
    model = make_model(server.base_url, sleeps)
    with pytest.raises(ModelError, match="HTTP 401") as info:
        model.chat(MESSAGES, SPECS)
    assert KEY not in str(info.value) and server.stats["requests"] == 0
    assert KEY not in "".join(traceback.format_exception(info.value))


@pytest.mark.parametrize("server", [ServerConfig(error_schedule=["429"] * 3)], indirect=True)
def test_react_run_records_a_model_failure_instead_of_crashing(server: ModelServer, sleeps: list[float]) -> None:
    model = make_model(server.base_url, sleeps, attempts=2)
    session = SessionState(
        vin="LSVAU2180N2183294", series="EV-A", session_id="s", opened_at="2026-11-01T00:00:00Z",
        last_event_at="2026-11-01T00:00:00Z",
    )  # fmt: skip
    run = run_react(model, Toolbox(load_pack(), session), list(MESSAGES))
    assert run.flags == [MODEL_FAILED] and run.answer.phase == "INVESTIGATING"
    assert run.error is not None and "429" in run.error and KEY not in run.error


def test_backoff_grows_exponentially_and_is_capped() -> None:
    rng = random.Random(1)
    caps = [max(backoff_s(n, rng) for _ in range(200)) for n in (1, 2, 3, 4, 10)]
    assert caps[0] <= 0.5 < caps[1] <= 1.0 < caps[2] <= 2.0 < caps[3] <= 4.0
    assert 4.0 < caps[4] <= 8.0


def test_settings_select_the_openai_model_and_need_a_key() -> None:
    env = {"VDOCTOR_MODEL": "openai", "VDOCTOR_SUMMARIZER": "openai", "OPENAI_API_KEY": KEY,
           "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "VDOCTOR_CHAT_MODEL": "big", "VDOCTOR_SUMMARY_MODEL": "small",
           "VDOCTOR_MODEL_TIMEOUT_S": "3"}  # fmt: skip
    settings = load_settings(env)
    chat, summarizer = assembly.chat_model(settings), assembly.summarizer(settings)
    assert isinstance(chat, OpenAIChatModel) and isinstance(summarizer, ModelSummarizer)
    assert (chat.name, summarizer.model.name) == ("big", "small")
    assert chat.timeout_s == 3.0 and KEY not in repr(settings) and KEY not in repr(chat)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        assembly.chat_model(load_settings({"VDOCTOR_MODEL": "openai"}))
    with pytest.raises(ConfigError, match="VDOCTOR_MODEL: Input should be .offline. or .openai."):
        load_settings({"VDOCTOR_MODEL": "gpt-5"})


def test_custom_responder_scripts_any_reply() -> None:
    def scripted(messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        return ChatResponse(content=None, tool_calls=(ToolCall("x", "signal_history", {"signal": "pack_temp_c"}),))

    with ModelServer(responder=scripted) as srv:
        reply = make_model(srv.base_url, []).chat(MESSAGES, SPECS)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("signal_history", {"signal": "pack_temp_c"})]


def test_server_runs_standalone_and_refuses_unknown_error_kinds() -> None:
    import json
    import subprocess
    import sys
    import urllib.request

    from tests.conftest import REPO_ROOT

    cmd = [sys.executable, "-m", "devtools.model_server", "--port", "0", "--error-schedule", "429"]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = (proc.stdout.readline() if proc.stdout else "").split()[-1]
        reply = make_model(url, []).chat(MESSAGES, SPECS)  # one 429, one retry
        assert reply.extra["attempts"] == 2
        with urllib.request.urlopen(url + "/stats", timeout=5) as resp:
            assert json.loads(resp.read()) == {"requests": 2, "429": 1, "ok": 1, "peak_in_flight": 1}
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    bad = subprocess.run([*cmd[:3], "--error-rates", "503=0.1"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown error kinds ['503']" in bad.stderr


def test_run_refuses_openai_without_a_key_and_restore_without_a_checkpoint(tmp_path: object) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import REPO_ROOT

    base = Path(str(tmp_path))
    (base / "a.jsonl").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "VDOCTOR_MODEL")}
    cmd = [sys.executable, "-m", "jobs.cli", "run", "--alerts", str(base / "a.jsonl"), "--out", str(base / "out")]
    no_key = subprocess.run([*cmd, "--model", "openai"], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert no_key.returncode == 2 and "needs OPENAI_API_KEY" in no_key.stderr
    no_chk = subprocess.run(
        [*cmd, "--checkpoint-dir", str(base / "ck"), "--restore", "latest"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert no_chk.returncode == 2 and "no complete checkpoint" in no_chk.stderr
    bad_rate = subprocess.run([*cmd, "--rate", "0"], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert bad_rate.returncode == 2 and "--rate must be a finite number of lines per second above 0" in bad_rate.stderr


def _closed_port_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens here: connections are refused


def test_endpoint_down_is_retried_then_a_clear_error_without_the_key(sleeps: list[float]) -> None:
    model = make_model(_closed_port_url(), sleeps, attempts=3)
    with pytest.raises(ModelError, match="gave up after 3 attempts.*connection failed") as info:
        model.chat(MESSAGES, SPECS)
    assert len(sleeps) == 2 and KEY not in str(info.value)


def test_endpoint_that_comes_back_during_the_retries_answers(sleeps: list[float]) -> None:
    url = _closed_port_url()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    started: list[ModelServer] = []

    def sleep_then_start(seconds: float) -> None:
        sleeps.append(seconds)
        if not started:  # the endpoint comes back after the first refused attempt
            server = ModelServer(ServerConfig())
            server.start(port=port)
            started.append(server)

    model = OpenAIChatModel("chat-test", SecretStr(KEY), url, timeout_s=5.0, max_attempts=4,
                            sleep=sleep_then_start, rng=random.Random(7))  # fmt: skip
    try:
        response = model.chat(MESSAGES, SPECS)
    finally:
        for server in started:
            server.stop()
    assert response.tool_calls and response.tool_calls[0].name == "lookup_dtc"
    assert len(sleeps) == 1 and started[0].stats["ok"] == 1


class _Bodies:
    """A bare HTTP endpoint answering 200 with the given JSON texts, one per request, in order."""

    def __init__(self, bodies: list[str]) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from threading import Thread

        queue = list(bodies)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = queue.pop(0).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_replies_of_the_wrong_shape_are_retried_and_odd_fields_do_not_crash(sleeps: list[float]) -> None:
    good = (
        '{"model": "m", "choices": [{"message": {"content": null, "tool_calls": ['
        '{"id": "c1", "type": "function", "function": {"name": "lookup_dtc", '
        '"arguments": "{\\"codes\\": [\\"U0140\\"]}"}},'
        '{"id": "c2", "type": "function"}]}}], "usage": {"prompt_tokens": "many", "completion_tokens": 7}}'
    )
    endpoint = _Bodies(["[]", '{"choices": []}', '{"choices": [{"text": "legacy"}]}', good])
    try:
        response = make_model(endpoint.url, sleeps).chat(MESSAGES, SPECS)
    finally:
        endpoint.close()
    assert len(sleeps) == 3  # three replies of the wrong shape, each retried
    assert [c.name for c in response.tool_calls] == ["lookup_dtc"]  # the call without a function is skipped
    assert response.tool_calls[0].arguments == {"codes": ["U0140"]}
    assert (response.prompt_tokens, response.completion_tokens) == (0, 7)


def test_a_reply_that_never_has_the_right_shape_is_a_clear_error(sleeps: list[float]) -> None:
    endpoint = _Bodies(['{"choices": []}'] * 2)
    try:
        with pytest.raises(ModelError, match="gave up after 2 attempts; last error: reply has no choices"):
            make_model(endpoint.url, sleeps, attempts=2).chat(MESSAGES, SPECS)
    finally:
        endpoint.close()


def test_worker_threads_share_http_clients_a_few_threads_each(server: ModelServer, sleeps: list[float]) -> None:
    import threading

    from vdoctor.openai_clients import THREADS_PER_CLIENT

    model = make_model(server.base_url, sleeps)  # its constructor's thread takes the first client's first place
    used: dict[int, object] = {}
    workers = 3 * THREADS_PER_CLIENT

    def work(i: int) -> None:
        model.chat(MESSAGES, SPECS)
        used[i] = model._client()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(used) == workers and server.stats["ok"] == workers
    # 1 + 24 threads at 8 per client: 4 clients, every one in use, none serving more than 8 threads.
    assert model._clients.size == 4
    per_client: dict[int, int] = {}
    for c in used.values():
        per_client[id(c)] = per_client.get(id(c), 0) + 1
    assert len(per_client) == 4 and max(per_client.values()) <= THREADS_PER_CLIENT
    model.close()


def test_the_model_summarizer_over_http_writes_a_case_summary_the_check_accepts(
    server: ModelServer, sleeps: list[float]
) -> None:
    """A pipeline check: the server's summary writer is no language model, but the request, the prompt,
    the real client and the check are the ones a hosted model would meet."""
    from tests.unit.test_case_fidelity import wide_session
    from vdoctor.memory.summary import summarize_case

    session = wide_session(2)
    summarizer = ModelSummarizer(make_model(server.base_url, sleeps))
    case = summarize_case(session, load_pack(), summarizer)
    assert case.report.ok and case.attempts == 1, case.report.describe()
    assert case.text != summarize_case(wide_session(2), load_pack()).text  # not the offline summarizer's layout
    assert "readings: cell_voltage_diff_mv=87→187mV" in case.text
    assert "excluded: 怀疑线束松动，已排除" in case.text and "void: 初判线束腐蚀的结论已作废" in case.text
    assert server.stats["ok"] == 1


def test_a_debug_log_of_the_workers_masks_the_endpoint_password_and_the_key(server: ModelServer) -> None:
    # At VDOCTOR_LOG_LEVEL=DEBUG the HTTP client under ``openai`` logs each request's URL, and a gateway's URL
    # may hold a password (https://user:password@gateway/v1). The operators mask the job's secrets in every
    # record the root logger's handlers write (``operators.logs.configure``), the HTTP client's included.
    from operators import logs
    from vdoctor.scrub import ScrubbingFilter, settings_secrets

    password = "gw-pass-5e6f7a8b"
    url = server.base_url.replace("http://", f"http://gateway:{password}@")
    records: list[str] = []

    class Keep(logging.Handler):  # as PyFlink's thread mode hands records to the JVM (pemja's PythonLogHandler)
        def emit(self, record: logging.LogRecord) -> None:
            trace = "".join(traceback.format_exception(*record.exc_info)) if record.exc_info else ""
            records.append(self.format(record) + trace)

    handler = Keep()
    root = logging.getLogger()
    root.addHandler(handler)
    levels = {name: logging.getLogger(name).level for name in ["", *logs.CHATTY]}
    settings = load_settings({"OPENAI_BASE_URL": url, "OPENAI_API_KEY": KEY, "VDOCTOR_LOG_LEVEL": "DEBUG"})
    try:
        logs.configure(settings.runtime.log_level, settings_secrets(settings))
        model = OpenAIChatModel("chat-test", SecretStr(KEY), url, timeout_s=5.0, max_attempts=1)
        assert model.chat(MESSAGES, SPECS).tool_calls
        logging.getLogger("vdoctor.test").warning("failed", exc_info=ValueError(f"no route to {url} with {KEY}"))
    finally:
        root.removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        for h in root.handlers:
            for f in [f for f in h.filters if isinstance(f, ScrubbingFilter)]:
                h.removeFilter(f)
    text = "\n".join(records)
    assert "HTTP Request: POST http://gateway:***@" in text  # the client's request line, its password masked
    assert "no route to http://gateway:***@" in text  # and a traceback's text
    assert password not in text and KEY not in text
