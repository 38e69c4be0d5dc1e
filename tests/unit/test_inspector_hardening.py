"""The inspector's pages against spoofing text, its API's errors, its links under a prefix, its loopback names.

Each test is a gap an audit found: bidirectional-text controls in stored text
reordered what a page showed ("Trojan Source"); an unknown ``/api/`` path was
answered in plain text; the pages linked with absolute paths, which left a
path prefix (a reverse proxy's) behind; ``localhost.`` and ``[::ffff:127.0.0.1]``
were refused as hosts that are not loopback.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from starlette.testclient import TestClient

from inspector.app import create_app
from inspector.outputs import DEAD_LETTERS, DIAGNOSES, JobOutputs
from inspector.security import Scrubber, is_loopback_host
from inspector.views import Inspector
from tests.unit.test_inspector_app import ASKER, PAGES, client, fleet
from tests.unit.test_recall_explain import EMB, T, rec
from vdoctor.knowledge import load_pack
from vdoctor.memory.recall import SessionRecall

pytestmark = pytest.mark.unit

# Every bidirectional-text control: embeddings and overrides, isolates, the marks.
CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
# A cause that a browser shows as "... replace fuse F12 not the pack" while it reads otherwise.
CAUSE = "replace \u202epack the not\u202c fuse F12"
SUMMARY = "2026-11-21 | concluded P0A7F \u2067P1\u2069 | " + CONTROLS
SPOOF_VIN = "LSVAU2180N21\u202e99999"  # a VIN-like field as stored, not as the pages' own URLs take it
SPOOF_SESSION = f"{ASKER}-20261121T000000\u200f"
ALERT = "pack voltage \u202elow\u202c"
PREFIX = "http://proxy.example/inspector"


def _spoofed_client(tmp_path: Path) -> TestClient:
    store = fleet()
    store.upsert(rec(ASKER, -10, root_cause=CAUSE, fix_action="\u2066fix\u2069", summary=SUMMARY,
                     session_id=SPOOF_SESSION, series="EV-A\u061c"))  # fmt: skip
    store.upsert(rec(SPOOF_VIN, -1))
    diagnosis = {"vin": ASKER, "session_id": SPOOF_SESSION, "event_id": "e\u202e1", "phase": "CONCLUDED",
                 "root_cause": CAUSE, "flags": ["\u200eflag"]}  # fmt: skip
    (tmp_path / DIAGNOSES).write_text(json.dumps(diagnosis) + "\n", encoding="utf-8")
    dead = {"stage": "parse", "error": "bad \u202ecode", "raw": json.dumps({"alert_text": ALERT}, ensure_ascii=False)}
    (tmp_path / DEAD_LETTERS).write_text(json.dumps(dead) + "\n", encoding="utf-8")
    recall = SessionRecall(store, EMB, load_pack())
    ins = Inspector(store, store, recall, "sqlite:///memory.db", JobOutputs(tmp_path))
    return TestClient(create_app(ins, None, True, Scrubber([])), base_url="http://127.0.0.1:8080")  # type: ignore[arg-type]


def test_bidi_controls_in_stored_text_are_shown_as_markers_on_pages_and_kept_as_they_are_in_the_api(
    tmp_path: Path,
) -> None:
    c = _spoofed_client(tmp_path)
    case = f"/vehicles/{ASKER}/cases/{SPOOF_SESSION}"
    recall = f"/vehicles/{ASKER}/recall?symptom={ALERT}&at={T:%Y-%m-%dT%H:%M:%SZ}"
    for path in ("/", f"/vehicles/{ASKER}", case, recall, f"/vehicles/{ASKER}/cases/{ASKER}-1999{CONTROLS}"):
        page = c.get(path)
        assert page.status_code in (200, 404) and page.headers["content-type"].startswith("text/html"), path
        shown = [ch for ch in page.text if ch in CONTROLS]
        assert shown == [], (path, [f"U+{ord(ch):04X}" for ch in shown])
    page = c.get(case).text
    # Each control as its escape, in a span the stylesheet marks: "\u202e" is read where U+202E reordered.
    assert '<td colspan="3" id="root-cause">replace <span class=bidi>\\u202e</span>pack the not' in page
    assert "<span class=bidi>\\u2069</span>" in page and "<span class=bidi>\\u061c</span>" in page
    # In an attribute (a link, a data- attribute, a form's value, the title) a marker of plain text, no markup.
    fleet_page = c.get("/").text
    assert 'href="./vehicles/LSVAU2180N21%E2%80%AE99999"' in fleet_page
    assert f'data-session="{ASKER}-20261121T000000\\u200f"' in c.get(f"/vehicles/{ASKER}").text
    assert 'value="pack voltage \\u202elow\\u202c"' in c.get(recall).text
    assert f"<title>{ASKER}-20261121T000000\\u200f · vehicle-doctor</title>" in page
    # The API returns what is stored: it is data.
    data = c.get("/api" + case).json()
    assert (data["record"]["root_cause"], data["record"]["summary"]) == (CAUSE, SUMMARY)
    assert data["record"]["session_id"] == SPOOF_SESSION and data["diagnoses"][0]["event_id"] == "e\u202e1"
    assert SPOOF_VIN in [r["vin"] for r in c.get("/api/").json()["recent"]]


def test_an_unknown_api_path_is_a_json_404_and_an_unknown_page_stays_as_it_was() -> None:
    c = client()
    for path in ("/api/nowhere", f"/api/vehicles/{ASKER}/nowhere", f"/api/vehicles/{ASKER}/cases/", "/api/static/x"):
        answer = c.get(path)
        assert answer.status_code == 404 and answer.headers["content-type"] == "application/json", path
        assert "no such path" in answer.json()["error"]
    assert c.head("/api/nowhere").status_code == 404
    page = c.get("/nowhere")  # Starlette's own, as before
    assert (page.status_code, page.text) == (404, "Not Found") and page.headers["content-type"].startswith("text/plain")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src", "action") and value is not None:
                self.links.append(value)


def _links(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    return parser.links


def _under_prefix(page: str, link: str) -> str:
    """Where a browser goes from ``page`` (a path of the app) through ``link``, served under PREFIX; the path
    the app is asked for, after the proxy took the prefix off."""
    there = urljoin(PREFIX + page, link)
    assert there.startswith(PREFIX + "/"), (page, link, there)
    parts = urlsplit(there[len(PREFIX) :])
    return parts.path + ("?" + parts.query if parts.query else "")


def test_every_link_of_every_page_works_under_a_path_prefix() -> None:
    c = client()
    missing = f"/vehicles/{ASKER}/cases/{ASKER}-19990101T000000"  # the error page links back as well
    for page in [*PAGES, missing]:
        answer = c.get(page)
        links = _links(answer.text)
        assert links, page
        for link in links:
            target = _under_prefix(page.split("?")[0], link)
            at_the_root = urlsplit(urljoin("http://127.0.0.1:8080" + page, link))
            assert at_the_root.path + ("?" + at_the_root.query if at_the_root.query else "") == target, link
            if target == "/vehicles":  # the VIN box's form: on to the vehicle's page, under the prefix too
                moved = c.get(f"{target}?vin={ASKER}")
                assert _under_prefix(target, moved.headers["location"]) == f"/vehicles/{ASKER}"
                continue
            assert c.get(target).status_code == 200, (page, link, target)


@pytest.mark.parametrize("host", ["localhost.", "localhost.:8080", "LOCALHOST.:8080", "[::ffff:127.0.0.1]:8080",
                                  "[::ffff:127.1.2.3]", "[::ffff:7f00:1]:8080", "127.0.0.1.:8080"])  # fmt: skip
def test_the_loopback_names_a_browser_may_send_are_accepted(host: str) -> None:
    assert client().get("/", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("host", ["127.attacker.example", "localhost.attacker.example", "localhost..",
                                  "attacker.example.", "[::ffff:10.0.0.1]:8080", "[::ffff:8.8.8.8]",
                                  "127.0.0.1.attacker.example", "localhost.localdomain.attacker", "."])  # fmt: skip
def test_names_that_are_not_loopback_stay_refused(host: str) -> None:
    assert client().get("/", headers={"Host": host}).status_code == 421
    assert client(token="tok-" + "7" * 28, local=False).get("/", headers={"Host": host}).status_code == 401


def test_is_loopback_host_reads_the_name_as_the_host_header_gives_it() -> None:
    assert all(is_loopback_host(h) for h in ("localhost.", "::ffff:127.0.0.1", "127.0.0.1", "::1", "localhost"))
    assert not any(is_loopback_host(h) for h in ("localhost.attacker.example", "::ffff:192.168.0.1", "localhost.."))
