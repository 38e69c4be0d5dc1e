"""The operators' Python log level: INFO by default, the HTTP stack kept quiet.

PyFlink's thread mode sets the root logger to DEBUG and sends every record to
the JVM; the model client's per-request DEBUG records halved the operator's
throughput before the level was set (bench/concurrency.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from operators import logs
from vdoctor.settings import load_settings

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _restore_levels() -> Iterator[None]:
    names = ["", *logs.CHATTY]
    saved = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def test_default_level_drops_debug_records_of_the_http_stack() -> None:
    logging.getLogger().setLevel(logging.DEBUG)  # what the embedded interpreter starts with
    logs.configure(load_settings({}).runtime.log_level)
    assert logging.getLogger().getEffectiveLevel() == logging.INFO
    for name in ("httpx", "httpcore", "openai", "openai._base_client"):
        assert not logging.getLogger(name).isEnabledFor(logging.INFO)
        assert logging.getLogger(name).isEnabledFor(logging.WARNING)  # failures still show
    assert logging.getLogger("vdoctor.models.openai").isEnabledFor(logging.WARNING)


def test_debug_lets_everything_through() -> None:
    logs.configure(load_settings({"VDOCTOR_LOG_LEVEL": "DEBUG"}).runtime.log_level)
    assert logging.getLogger("httpcore").isEnabledFor(logging.DEBUG)
    assert logging.getLogger("vdoctor").isEnabledFor(logging.DEBUG)


def test_an_unknown_level_is_a_settings_error() -> None:
    from vdoctor.errors import ConfigError

    with pytest.raises(ConfigError, match="VDOCTOR_LOG_LEVEL"):
        load_settings({"VDOCTOR_LOG_LEVEL": "LOUD"})


def test_the_secrets_filter_masks_a_password_as_its_url_writes_it_and_lets_a_bad_log_call_be() -> None:
    from vdoctor.scrub import Scrubber, ScrubbingFilter, settings_secrets

    env = {"OPENAI_BASE_URL": "https://gw:my%20pass@llm.example/v1", "VDOCTOR_MEMORY_URL": "mysql://vd:p%2fss@db/vd"}
    scrub = Scrubber(settings_secrets(load_settings(env)))
    # An HTTP client logs the URL as given: percent-encoded, in whatever case its hex digits are written.
    assert scrub("POST https://gw:my%20pass@llm.example/v1 and mysql://vd:p%2fss@db/vd") == (
        "POST https://gw:***@llm.example/v1 and mysql://vd:***@db/vd"
    )
    # A library's malformed log call is reported by the handler as logging does, not raised at its caller.
    record = logging.LogRecord("lib", logging.INFO, __file__, 1, "%s %s", ("one",), None)
    assert ScrubbingFilter(scrub).filter(record) is True


def test_the_secrets_filter_masks_a_password_as_the_http_clients_request_log_writes_it() -> None:
    import httpx2

    from vdoctor.scrub import Scrubber, ScrubbingFilter, settings_secrets

    # The client escapes some characters of a password and keeps others (a+b%20c%3Bd,e): neither the password
    # as given nor its percent- or form-encoding.
    env = {"OPENAI_BASE_URL": "https://gw:a+b c;d,e[f@llm.example/v1"}
    written: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            written.append(record.getMessage())

    handler = Keep()
    handler.addFilter(ScrubbingFilter(Scrubber(settings_secrets(load_settings(env)))))
    logger = logging.getLogger("httpx2")
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        transport = httpx2.MockTransport(lambda request: httpx2.Response(200))
        with httpx2.Client(base_url=env["OPENAI_BASE_URL"], transport=transport) as client:
            client.post("/chat/completions")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
    assert written == ['HTTP Request: POST https://gw:***@llm.example/v1/chat/completions "HTTP/1.1 200 OK"']
