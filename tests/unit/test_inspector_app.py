"""The inspector's app in-process (Starlette's test client): pages, JSON, the token, read-only, no secrets.

The browser tier (tests/e2e/test_inspector_browser.py) runs the real server over a replayed store.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from inspector.app import create_app
from inspector.security import Scrubber, redact_url, url_password
from inspector.views import Inspector
from tests.unit.test_recall_explain import ASKER, EMB, SYMPTOM, T, rec, vin
from vdoctor.errors import StoreError
from vdoctor.knowledge import load_pack
from vdoctor.memory.explain import recall_json
from vdoctor.memory.recall import SessionRecall
from vdoctor.records import RecordKind
from vdoctor.stores import MemoryStore
from vdoctor.stores.memory import InMemoryStore

pytestmark = pytest.mark.unit

TOKEN = "tok-" + "7" * 28
PASSWORD = "s3cr3t-pa55"
URL = f"mysql://vdoctor:{PASSWORD}@db.example:3306/fleet"
OTHER = vin(1)


def fleet(into: MemoryStore | None = None) -> InMemoryStore:
    """The fleet's writes, into a new in-memory store (or ``into``: tests/unit/test_mem0_inspector.py)."""
    store: Any = InMemoryStore() if into is None else into
    first = rec(ASKER, -20, recheck_ok=None)
    store.upsert(first)
    again = rec(ASKER, -10, recheck_ok=None)  # the same fault again: merged into the first record
    store.upsert(again.model_copy(update={"session_id": first.session_id, "merged_sessions": [again.session_id]}))
    store.set_recheck(ASKER, first.session_id, True, T - timedelta(days=8))
    store.set_recheck(ASKER, first.session_id, False, T - timedelta(days=6))
    milestone = rec(ASKER, -4, kind=RecordKind.MILESTONE, priority=None, recheck_ok=None)
    milestone = milestone.model_copy(update={"session_id": f"{ASKER}-20261127T000000-m1"})
    store.upsert(milestone)
    final = rec(ASKER, -3, recheck_ok=None).model_copy(update={"session_id": f"{ASKER}-20261127T000000"})
    store.upsert(final)
    store.upsert(milestone.model_copy(update={"valid": False, "invalid_ts": final.concluded_at}))
    store.upsert(rec(OTHER, -5))
    store.soft_delete(OTHER, T - timedelta(days=1))
    store.upsert(rec(vin(2), -2))
    return store


def client(store: InMemoryStore | None = None, token: str | None = None, local: bool = True) -> TestClient:
    store = store or fleet()
    recall = SessionRecall(store, EMB, load_pack())
    ins = Inspector(store, store, recall, redact_url(URL))
    scrub = Scrubber([token, PASSWORD])
    app = create_app(ins, SecretStr(token) if token else None, local, scrub)
    return TestClient(app, base_url="http://127.0.0.1:8080", follow_redirects=False)  # type: ignore[arg-type]


PAGES = [
    "/",
    f"/vehicles/{ASKER}",
    f"/vehicles/{ASKER}/cases/{ASKER}-20261111T000000",
    f"/vehicles/{ASKER}/recall?symptom=pack+voltage&codes=P0A7F&at=2026-12-01T00:00:00Z",
]


def test_every_page_and_its_json() -> None:
    c = client()
    for path in PAGES:
        page = c.get(path)
        assert page.status_code == 200, (path, page.text[:300])
        assert page.headers["content-type"].startswith("text/html")
        api = c.get("/api" + path)
        assert api.status_code == 200 and api.headers["content-type"] == "application/json"
    fleet_data = c.get("/api/").json()
    assert fleet_data["counts"]["records"] == 5 and fleet_data["counts"]["vehicles"] == 3
    assert fleet_data["memory"] == "mysql://vdoctor:***@db.example:3306/fleet"
    timeline = c.get(f"/api/vehicles/{ASKER}").json()["timeline"]
    assert [(e["kind"], e["at"][:10]) for e in timeline] == [
        ("concluded", "2026-11-11"),
        ("merged", "2026-11-21"),
        ("recheck", "2026-11-23"),
        ("recheck", "2026-11-25"),
        ("milestone", "2026-11-27"),
        ("concluded", "2026-11-28"),
        ("superseded", "2026-11-28"),
    ]
    assert [e["detail"] for e in timeline if e["kind"] == "recheck"] == ["", "overturns the earlier verdict"]
    other = c.get(f"/api/vehicles/{OTHER}").json()["timeline"]
    assert [e["kind"] for e in other] == ["concluded", "recheck", "invalidated"]


def test_the_recall_api_is_the_recall_of_the_cli() -> None:
    store = fleet()
    c = client(store)
    params = {"symptom": SYMPTOM, "codes": "P0A7F", "at": "2026-12-01T00:00:00Z"}
    got = c.get(f"/api/vehicles/{ASKER}/recall", params=params)
    assert got.status_code == 200
    plain = SessionRecall(store, EMB, load_pack()).for_alert(ASKER, "EV-A", SYMPTOM, ["P0A7F"], T)
    expected = recall_json(ASKER, T, plain)
    data = got.json()
    assert {k: data[k] for k in expected} == expected
    assert data["explain"]["series"] == "EV-A"  # from the vehicle's history, as the CLI takes it
    assert c.get(f"/api/vehicles/{ASKER}/recall").status_code == 400  # the symptom is the session's question
    assert "explain" in c.get(f"/vehicles/{ASKER}/recall").text  # the page: the form alone
    bad = c.get(f"/api/vehicles/{ASKER}/recall", params={"symptom": "x", "at": "2026-12-01 00:00"})
    assert bad.status_code == 400 and "has no timezone" in bad.json()["error"]


def test_a_merged_session_redirects_to_its_record_and_unknown_ones_are_404() -> None:
    c = client()
    merged = f"{ASKER}-20261121T000000"
    moved = c.get(f"/api/vehicles/{ASKER}/cases/{merged}")
    assert moved.status_code == 307
    assert moved.headers["location"] == f"./{ASKER}-20261111T000000"  # relative: kept under a path prefix
    assert c.get(f"/vehicles/{ASKER}/cases/{ASKER}-20990101T000000").status_code == 404
    assert c.get("/vehicles/not-a-vin").status_code == 404
    assert c.get("/api/vehicles/%3Cscript%3E").json()["error"].startswith("not a VIN")


def test_the_case_shows_the_fidelity_verdict_or_why_there_is_none() -> None:
    data = client().get(f"/api/vehicles/{ASKER}/cases/{ASKER}-20261111T000000").json()
    # Records written by hand keep no source: nothing to check against, said so.
    assert data["fidelity"]["checked"] is False and "keeps no source" in data["fidelity"]["reason"]
    assert [v["to"] is None for v in data["versions"]] == [False, False, True]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"])
def test_no_method_but_get_and_head_is_accepted(method: str) -> None:
    c = client(token=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for path in [*PAGES, "/static/style.css", "/api/", "/nowhere"]:
        for p in (path, "/api" + path if not path.startswith(("/api", "/static")) else path):
            answer = c.request(method, p, headers=auth)
            assert answer.status_code == 405, (method, p)
            assert answer.headers["allow"] == "GET, HEAD"
    assert c.head(PAGES[1], headers=auth).status_code == 200


def test_the_access_log_has_each_request_refused_ones_included_and_never_its_query(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = client(token=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with caplog.at_level(logging.INFO, logger="inspector.access"):
        c.get("/", headers=auth)
        c.post("/api/", headers=auth)
        c.delete(f"/vehicles/{ASKER}?token={TOKEN}")
        c.get("/")
    lines = [r.getMessage().rsplit(" ", 2)[0] for r in caplog.records if r.name == "inspector.access"]
    assert lines == ["GET / 200", "POST /api/ 405", f"DELETE /vehicles/{ASKER} 405", "GET / 401"]


def test_the_token_header_cookie_and_first_visit() -> None:
    c = client(token=TOKEN)
    for path in [*PAGES, "/static/style.css", "/nowhere"]:
        denied = c.get(path)
        assert denied.status_code == 401 and denied.headers["www-authenticate"].startswith("Bearer")
        assert TOKEN not in denied.text
    assert c.get("/", headers={"Authorization": "Bearer wrong-token-of-length"}).status_code == 401
    assert c.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert c.get("/api/", headers={"Authorization": f"Bearer {TOKEN}"}).json()["counts"]["records"] == 5
    first = c.get(f"/vehicles/{ASKER}?token={TOKEN}&x=1")
    assert first.status_code == 303 and first.headers["location"] == f"./{ASKER}?x=1"
    cookie = first.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    # The cookie holds a value derived from the token, never the token: browsers send a host's cookies to
    # every port of it, and the raw token went to any other service there (found by an audit).
    value = cookie.split(";")[0].partition("=")[2]
    assert TOKEN not in cookie and len(value) == 64
    c.cookies.set("vdoctor_token", value)
    assert c.get(f"/vehicles/{ASKER}").status_code == 200
    c.cookies.set("vdoctor_token", TOKEN)  # the token itself is no cookie
    assert c.get(f"/vehicles/{ASKER}").status_code == 401


def test_the_first_visits_redirect_stays_on_the_site_and_a_plus_in_the_token_is_read() -> None:
    """`//evil.example/?token=T` answered `location: //evil.example/`, another site to a browser; a token with
    "+" (base64's) was read with a blank in its place, and the browser login failed (found by an audit)."""
    c = client(token=TOKEN)
    # (A client reads "//evil.example/" as a host: its path as the server sees it, "//evil.example", is sent
    # as "/%2F%2Fevil.example".)
    for path, there in [("/%2F%2Fevil.example", "./evil.example"), ("/%2F%2F%2Fevil.example/", "./"),
                        ("/%5Cevil.example", "./%5Cevil.example"), ("/a%0d%0ab", "./a%0D%0Ab"),
                        ("/javascript:alert(1)", "./javascript:alert(1)")]:  # fmt: skip
        first = c.get(f"{path}?token={TOKEN}", follow_redirects=False)
        assert first.status_code == 303 and first.headers["location"] == there, path
    # The other parameters go on as they were written: a "+" in them is still a blank to the page.
    there = c.get(f"/vehicles/{ASKER}/recall?symptom=pack+voltage+low&token={TOKEN}&codes=P0A7F")
    assert there.headers["location"] == "./recall?symptom=pack+voltage+low&codes=P0A7F"
    plus = "Ab+cd/ef=gh+ij/kl==" * 2
    d = client(token=plus)
    assert d.get(f"/?token={plus}", follow_redirects=False).status_code == 303
    assert d.get(f"/?token={plus.replace('+', '%2B')}", follow_redirects=False).status_code == 303


def test_bound_to_loopback_it_answers_to_loopback_names_only() -> None:
    c = client()
    assert c.get("/", headers={"Host": "localhost:8080"}).status_code == 200
    assert c.get("/", headers={"Host": "127.1.2.3:8080"}).status_code == 200
    assert c.get("/", headers={"Host": "[::1]:8080"}).status_code == 200
    assert c.get("/", headers={"Host": "evil.example"}).status_code == 421  # DNS rebinding
    # A name that only starts as a loopback address passed (found by an audit).
    assert c.get("/", headers={"Host": "127.attacker.example:8080"}).status_code == 421
    assert client(token=TOKEN, local=False).get("/", headers={"Host": "inspector.example"}).status_code == 401


def test_pages_carry_headers_that_forbid_scripts_and_framing() -> None:
    page = client().get("/")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY" and page.headers["referrer-policy"] == "no-referrer"
    assert "<script" not in page.text


class Failing(InMemoryStore):
    def versions(self, vin: str) -> Any:
        raise StoreError(f"mysql store {URL}: connection refused")


def test_store_errors_and_pages_never_show_the_password() -> None:
    c = client(Failing())
    for path in ("/", f"/vehicles/{ASKER}"):
        for p in (path, "/api" + path):
            answer = c.get(p)
            assert PASSWORD not in answer.text
    failed = c.get(f"/api/vehicles/{ASKER}")
    assert failed.status_code == 503 and "***" in failed.json()["error"]


def test_redact_and_scrub() -> None:
    assert redact_url("doris://root:p%40ss@fe:9030/db") == "doris://root:***@fe:9030/db"
    assert redact_url("sqlite:///out/demo/memory.db") == "sqlite:///out/demo/memory.db"
    scrub = Scrubber(["p@ss", None, ""])
    assert scrub("url doris://root:p%40ss@fe and p@ss") == "url doris://root:***@fe and ***"


@pytest.mark.parametrize(
    ("url", "redacted", "password"),
    [
        ("mysql://root:123/abcSECRET@db.example:3306/vd", "mysql://root:***@db.example:3306/vd", "123/abcSECRET"),
        ("doris://vd:Xy7#kQ9SECRET@db.example:9030/vd", "doris://vd:***@db.example:9030/vd", "Xy7#kQ9SECRET"),
        ("doris://vd:a?b@cSECRET@fe/vd?table=case_memory", "doris://vd:***@fe/vd?table=case_memory", "a?b@cSECRET"),
    ],
)
def test_a_password_with_an_unescaped_delimiter_is_still_redacted_and_scrubbed(
    url: str, redacted: str, password: str
) -> None:
    # Everything between the user and the last @ is the password, whatever a URL parser would make of it.
    assert redact_url(url) == redacted
    assert url_password(url) == password
    scrub = Scrubber([url_password(url)])
    assert "SECRET" not in scrub(f"cannot connect to {url}: access denied using password {password}")


def test_what_a_request_sends_is_read_as_the_memory_commands_read_it_and_logged_escaped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by an audit: `at` outside 2000-2199 was a 500 (an OverflowError) or an `as_of` that is no ISO time,
    where `vdoctor memory recall --as-of` refuses it; a VIN in lower case was "not a VIN" to the inspector
    alone; a path's "%0a" began a line of the sender's own in the access log."""
    c = client()
    for at in ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59-05:00", "0003-06-01T00:00:00Z"):
        answer = c.get(f"/api/vehicles/{ASKER}/recall", params={"symptom": SYMPTOM, "at": at})
        assert answer.status_code == 400 and "is not between 2000 and 2199" in answer.json()["error"], at
    for codes in ("SPN 1569 FMI 31", "P0A7F, U0121", "DTC P0A7F-1B"):  # as a gateway writes an alert's entry
        assert c.get(f"/api/vehicles/{ASKER}/recall", params={"symptom": SYMPTOM, "codes": codes}).status_code == 200
    bad_code = c.get(f"/api/vehicles/{ASKER}/recall", params={"symptom": SYMPTOM, "codes": "battery"})
    assert bad_code.status_code == 400 and "not a trouble code" in bad_code.json()["error"]
    assert c.get(f"/api/vehicles/{ASKER.lower()}").json() == c.get(f"/api/vehicles/{ASKER}").json()
    with caplog.at_level(logging.INFO, logger="inspector.access"):
        c.get("/x%0a2026-01-01 00:00:00,000 INFO inspector.access: GET /forged 200 1 ms%1b[2J")
    [line] = [r.getMessage() for r in caplog.records if r.name == "inspector.access"]
    assert "\n" not in line and "\x1b" not in line and line.startswith("GET /x%0A2026-01-01%2000:00:00")


def test_the_inspector_writes_no_query_vector_beside_the_store(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recall embedded its symptom and added it to `<store>.query-vectors`: anyone who could reach the
    inspector wrote there, and past its bound the job's oldest rows gave way (found by an audit)."""
    import inspector.server
    from jobs import cli
    from vdoctor.stores import open_store

    db = tmp_path / "memory.db"
    open_store(f"sqlite:///{db}").close()

    def serve_once(ins: Inspector, host: str, port: int, token: Any, local: bool, scrub: Scrubber) -> None:
        answer = TestClient(create_app(ins, token, local, scrub), base_url="http://127.0.0.1:8080").get(
            f"/api/vehicles/{ASKER}/recall", params={"symptom": "a symptom no one asked before"}
        )
        assert answer.status_code == 200

    monkeypatch.setattr(inspector.server, "serve", serve_once)
    monkeypatch.setenv("VDOCTOR_EMBEDDER", "use-m3")  # the default: a model's query vectors go to the file
    assert cli.main(["serve", "--memory", f"sqlite:///{db}"]) == 0
    assert [p.name for p in tmp_path.iterdir() if "query-vectors" in p.name] == []
