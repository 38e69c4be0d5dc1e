"""``vdoctor serve`` flags -> settings: where it binds, and the token rule."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from pydantic import SecretStr

import inspector.server
from inspector.security import Scrubber
from jobs import cli_serve
from jobs.job_settings import SERVE_TOKEN_ENV, is_loopback, memory_url_as_given, serve_settings
from vdoctor.errors import ConfigError

pytestmark = pytest.mark.unit

TOKEN = "a-token-of-24-characters"


def args(**values: object) -> argparse.Namespace:
    base: dict[str, object] = {"host": "127.0.0.1", "port": 8080, "token": None, "diagnoses": None, "memory": None}
    base.update(values)
    return argparse.Namespace(**base)


@pytest.mark.parametrize(
    ("host", "local"),
    [("127.0.0.1", True), ("127.8.9.10", True), ("localhost", True), ("::1", True), ("[::1]", True),
     ("0.0.0.0", False), ("::", False), ("192.168.1.20", False), ("inspector.example", False)],
)  # fmt: skip
def test_loopback(host: str, local: bool) -> None:
    assert is_loopback(host) is local


def test_loopback_needs_no_token() -> None:
    s = serve_settings(args(), env={})
    assert (s.host, s.port, s.token, s.local) == ("127.0.0.1", 8080, None, True)


def test_any_other_address_refuses_to_start_without_a_token() -> None:
    with pytest.raises(ConfigError, match=f"needs a token: --token or {SERVE_TOKEN_ENV}"):
        serve_settings(args(host="0.0.0.0"), env={})
    from_env = serve_settings(args(host="0.0.0.0"), env={SERVE_TOKEN_ENV: TOKEN})
    assert from_env.token is not None and from_env.token.get_secret_value() == TOKEN and not from_env.local
    # The flag wins over the environment; the token never shows in the settings' repr.
    flagged = serve_settings(args(host="0.0.0.0", token=TOKEN + "-flag"), env={SERVE_TOKEN_ENV: TOKEN})
    assert flagged.token is not None and flagged.token.get_secret_value() == TOKEN + "-flag"
    assert TOKEN not in repr(flagged)


def test_port_0_is_refused_not_taken_for_8080() -> None:
    # --port 0 started the inspector on 8080 (0 was read as unset).
    for port in (0, -1, 65536):
        with pytest.raises(ConfigError, match=f"^--port must be 1 to 65535, got {port}$"):
            serve_settings(args(port=port), env={})
    assert serve_settings(args(port=1), env={}).port == 1
    assert serve_settings(args(port=None), env={}).port == 8080


def test_short_tokens_and_missing_outputs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least 16 characters"):
        serve_settings(args(host="0.0.0.0", token="short"), env={})
    with pytest.raises(ConfigError, match="letters, digits"):
        serve_settings(args(host="0.0.0.0", token="a token; with spaces and a semicolon"), env={})
    with pytest.raises(ConfigError, match="no such file or folder"):
        serve_settings(args(diagnoses=str(tmp_path / "absent")), env={})
    assert serve_settings(args(diagnoses=str(tmp_path)), env={}).diagnoses == tmp_path


def test_the_memory_url_is_shown_as_given() -> None:
    assert memory_url_as_given(args(memory="sqlite:///out/demo/memory.db"), env={}) == "sqlite:///out/demo/memory.db"
    assert memory_url_as_given(args(), env={"VDOCTOR_MEMORY_URL": "sqlite:///x.db"}) == "sqlite:///x.db"


def test_the_inspector_scrubs_the_model_api_key_as_well(monkeypatch: pytest.MonkeyPatch) -> None:
    # An openai embedder's recall holds the key: the inspector's scrubber masks it with the token and password.
    # So is the endpoint URL's password: the HTTP client logs each request's URL at INFO, the inspector's level.
    key, password = "sk-inspector-scrub-4b5c6d7e", "gw-inspector-7a8b9c0d"
    scrubbers: list[Scrubber] = []
    monkeypatch.setattr(inspector.server, "serve", lambda *a: scrubbers.append(a[-1]))
    env = {
        "OPENAI_API_KEY": key, "VDOCTOR_EMBEDDER": "hashing", "VDOCTOR_MEMORY_URL": "memory://",
        "OPENAI_BASE_URL": f"https://gateway:{password}@llm.example/v1",
    }  # fmt: skip
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv(SERVE_TOKEN_ENV, raising=False)
    assert cli_serve._cmd_serve(args()) == 0
    [scrub] = scrubbers
    assert scrub(f"embedding endpoint: Incorrect API key provided: {key}") == (
        "embedding endpoint: Incorrect API key provided: ***"
    )
    request = f"HTTP Request: POST https://gateway:{password}@llm.example/v1/embeddings"
    assert scrub(request) == "HTTP Request: POST https://gateway:***@llm.example/v1/embeddings"


def test_an_embedder_config_shows_neither_the_endpoint_password_nor_the_key() -> None:
    from vdoctor.embedders import EmbedderConfig

    config = EmbedderConfig(base_url="https://gateway:gw-embed-1a2b@llm.example/v1", api_key=SecretStr("sk-e-3c4d"))
    assert "gw-embed-1a2b" not in repr(config) and "sk-e-3c4d" not in repr(config)
