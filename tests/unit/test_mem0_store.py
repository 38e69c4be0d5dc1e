"""What the mem0:// backend promises beyond the store contract (tests/contract runs that over it too).

Offline and private (no network, telemetry off, nothing written outside its
folder, the user's environment left as it was), durable across reopen with
idempotent upserts, one process per folder, one Mem0 memory per record
version with every record field and the version's span in its metadata (Mem0's
own filters answer "as of T"), a merge interrupted between its two writes
repaired on open, and Mem0 never embedding or calling an LLM on its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vdoctor.errors import ConfigError, StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores import SimilarQuery, open_store
from vdoctor.stores.mem0 import MARKER, Mem0Store
from vdoctor.stores.mem0_mapping import PREFIX, QUERY_TEXT, VERSION_FROM, VERSION_TO, similar_filters

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
VIN = "LSVAU2180N2183294"
OTHER = "LSVAU2180N2100001"
T0 = datetime(2026, 11, 1, 8, 15, 30, tzinfo=UTC)
LATE = T0 + timedelta(days=400)


def rec(vin: str = VIN, hours: int = 0, **overrides: Any) -> MemoryRecord:
    at = T0 + timedelta(hours=hours)
    data: dict[str, Any] = {
        "vin": vin,
        "session_id": f"{vin}-{at:%Y%m%dT%H%M%S}",
        "series": "EV-A",
        "concluded_at": at,
        "summary": f"{at:%Y-%m-%d %H:%M} | concluded P0A7F | cell_voltage_diff_mv=187>=100",
        "summary_vec": [1.0, 0.0, 0.0, 0.0],
        "root_cause": "weak cell group self-discharges",
        "fix_action": "balance the pack",
        "priority": "P2",
        "dtc_codes": ["P0A7F"],
        "recheck_ok": True,
        "prompt_version": "case-summary-v2",
        "updated_at": at,
    }
    data.update(overrides)
    return MemoryRecord(**data)


def open_mem0(folder: Path) -> Mem0Store:
    store = open_store(f"mem0:///{folder}")
    assert isinstance(store, Mem0Store)
    return store


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_offline_private_and_leaves_the_environment_as_it_was(tmp_path: Path) -> None:
    # A fresh interpreter, so that this process's earlier imports of mem0 cannot hide anything.
    home = tmp_path / "home"
    home.mkdir()
    folder = tmp_path / "store"
    probe = f"""
        import json, os, socket
        attempts = []
        def refuse(self, address):
            attempts.append(repr(address))
            raise OSError("no network in this test")
        socket.socket.connect = refuse
        socket.create_connection = lambda *a, **k: refuse(None, a[0] if a else None)
        import numpy as np
        from datetime import datetime, UTC
        from vdoctor.records import MemoryRecord
        from vdoctor.stores import SimilarQuery, open_store
        store = open_store("mem0:///{folder}")
        r = MemoryRecord(vin="{VIN}", session_id="s-1", series="EV-A", concluded_at=datetime(2026, 11, 1, tzinfo=UTC),
                         summary="P0A7F | cell_voltage_diff_mv=187", summary_vec=[0.6, 0.8], root_cause="c",
                         fix_action="f", priority="P2", recheck_ok=True, prompt_version="v1")
        store.upsert(r)
        store.set_recheck("{VIN}", "s-1", True, datetime(2026, 11, 2, tzinfo=UTC))
        hits = store.similar(SimilarQuery("{OTHER}", "EV-A", np.asarray([0.6, 0.8], dtype=np.float32), 5,
                                          datetime(2026, 12, 1, tzinfo=UTC)))
        store.close()
        import mem0.memory.telemetry as telemetry, mem0.memory.main as main
        print(json.dumps({{"attempts": attempts, "hits": len(hits), "env": {{k: os.environ.get(k) for k in
            ("MEM0_TELEMETRY", "MEM0_DIR")}}, "flags": [telemetry.MEM0_TELEMETRY, main.MEM0_TELEMETRY]}}))
    """
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MEM0_")}
    env["HOME"] = str(home)
    env["OPENAI_API_KEY"] = "sk-must-never-be-read"
    done = run_python(probe, env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["attempts"] == []
    assert out["hits"] == 1
    assert out["env"] == {"MEM0_TELEMETRY": None, "MEM0_DIR": None}  # set for the import only
    assert out["flags"] == [False, False]
    assert not (home / ".mem0").exists()  # Mem0's config.json went into the store's folder
    assert (folder / ".mem0" / "config.json").is_file()
    assert {p.name for p in folder.iterdir()} == {".mem0", "qdrant", "history.db", MARKER}
    assert "sk-must-never-be-read" not in done.stdout + done.stderr
    assert "cell_voltage_diff_mv" not in done.stderr  # Mem0's INFO lines carry case text: kept at WARNING


def test_reopen_keeps_records_and_upserts_stay_idempotent(tmp_path: Path) -> None:
    store = open_mem0(tmp_path)
    first, second = rec(hours=0), rec(hours=1, recheck_ok=None)
    store.upsert_many([first, second, rec(OTHER, hours=2)])
    store.close()

    store = open_mem0(tmp_path)  # the key index is rebuilt from Mem0
    try:
        assert store.count() == 3
        assert store.get(VIN, first.session_id) == first
        # A re-run after a crash writes the same key again: replaced, never doubled.
        store.upsert(first.model_copy(update={"root_cause": "replaced"}))
        assert store.set_recheck(VIN, second.session_id, True, LATE)
        assert store.count() == 3
        got = store.get(VIN, first.session_id)
        assert got is not None and got.root_cause == "replaced"
        assert [r.session_id for r in store.history(VIN)] == [second.session_id, first.session_id]
        hits = store.similar(SimilarQuery(OTHER, "EV-A", np.asarray([1.0, 0, 0, 0], dtype=np.float32), 10, LATE))
        assert sorted(h.record.session_id for h in hits) == sorted([first.session_id, second.session_id])
    finally:
        store.close()


def test_stores_on_one_folder_in_one_process_share_it(tmp_path: Path) -> None:
    a, b = open_mem0(tmp_path), open_mem0(tmp_path)  # e.g. two Flink subtasks in one TaskManager
    try:
        a.upsert(rec())
        assert b.count() == 1 and b.get(VIN, rec().session_id) is not None
        a.close()
        b.upsert(rec(hours=1))  # the folder stays open while one store uses it
        assert b.count() == 2
    finally:
        a.close()
        b.close()


def test_a_second_process_gets_a_clear_error(tmp_path: Path) -> None:
    store = open_mem0(tmp_path)
    try:
        store.upsert(rec())
        done = run_python(
            f"""
            from vdoctor.errors import StoreError
            from vdoctor.stores import open_store
            for read_only in (False, True):  # a reader too (vdoctor serve while the job runs)
                try:
                    open_store("mem0:///{tmp_path}", read_only=read_only)
                except StoreError as e:
                    print("StoreError:", e)
            """
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("StoreError:") == 2 and done.stdout.count("open in another process") == 2
    finally:
        store.close()


def test_each_version_is_a_memory_and_mem0s_own_filters_answer_as_of_t(tmp_path: Path) -> None:
    store = open_mem0(tmp_path)
    try:
        first = rec(hours=0, recheck_ok=None, summary="version one: cell_voltage_diff_mv=187")
        store.upsert(first)
        store.set_recheck(VIN, first.session_id, True, T0 + timedelta(hours=2))
        merged = rec(hours=240, session_id=first.session_id, recheck_ok=None, summary="version two: =150",
                     summary_vec=[0.0, 1.0, 0.0, 0.0], merged_sessions=["x-1"], source='{"a": 1}')  # fmt: skip
        store.upsert_many([merged, rec(OTHER, hours=24)])
        assert store.count() == 2  # records, not versions
        memory = store._folder.memory  # the Mem0 instance itself, as another Mem0 user would query it
        listed = memory.get_all(filters={"user_id": VIN}, top_k=10, show_expired=True)["results"]
        fields = {PREFIX + name for name in MemoryRecord.model_fields if name != "summary"}
        assert all(fields | {VERSION_FROM, VERSION_TO} <= set(item["metadata"]) for item in listed)
        spans = {item["memory"]: (item["metadata"][VERSION_FROM], item["metadata"][VERSION_TO]) for item in listed}
        t0, t240 = int(T0.timestamp()), int((T0 + timedelta(hours=240)).timestamp())
        assert spans == {first.summary: (t0, t240), merged.summary: (t240, None)}
        raw = next(item["metadata"] for item in listed if item["memory"] == merged.summary)
        assert raw[PREFIX + "concluded_at"] == t240 and raw[PREFIX + "merged_sessions"] == ["x-1"]
        assert raw[PREFIX + "recheck_ok"] is None and raw[PREFIX + "verified_ts"] is None

        # Similar-case recall as of T is Mem0's own query: its filters alone pick the version of the time.
        def mem0_alone(hours: int, vector: list[float]) -> list[str]:
            q = SimilarQuery(OTHER, "EV-A", np.asarray(vector, dtype=np.float32), 10, T0 + timedelta(hours=hours))
            with store._folder.embedder.pinned(QUERY_TEXT, vector):
                out = memory.search(QUERY_TEXT, top_k=10, filters=similar_filters(q), threshold=0.0)["results"]
            return [item["memory"] for item in out]

        e1, e2 = [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]
        assert mem0_alone(1, e1) == []  # verified at 2 h
        assert mem0_alone(2, e1) == mem0_alone(239, e1) == [first.summary]
        assert mem0_alone(240, e1) == mem0_alone(240, e2) == []  # the merge is not verified
        store.soft_delete(VIN, T0 + timedelta(hours=300))
        store.set_recheck(VIN, first.session_id, True, T0 + timedelta(hours=250))  # applied late
        assert mem0_alone(260, e2) == [merged.summary] and mem0_alone(300, e2) == []
        assert mem0_alone(100, e1) == [first.summary]  # later writes left the earlier version as it was
    finally:
        store.close()


def test_a_merge_interrupted_between_its_two_writes_is_repaired_on_open(tmp_path: Path) -> None:
    store = open_mem0(tmp_path)
    first = rec(hours=0)
    store.upsert(first)
    merged = rec(hours=240, session_id=first.session_id, summary="version two", summary_vec=[0.0, 1.0, 0.0, 0.0],
                 recheck_ok=None)  # fmt: skip
    # The new version's memory is added first; the process stops before the old one is closed.
    store._folder.add(merged, int(merged.concluded_at.timestamp()))
    store.close()

    store = open_mem0(tmp_path)
    try:
        assert store.count() == 1
        got = store.get(VIN, first.session_id)
        assert got is not None and got.summary == "version two"
        e1 = np.asarray([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
        for hours, summary in ((100, first.summary), (300, None)):
            at = T0 + timedelta(hours=hours)
            hits = store.similar(SimilarQuery(OTHER, "EV-A", e1, 10, at))
            assert [h.record.summary for h in hits] == ([summary] if summary else [])
            assert [r.summary for r in store.own_history(VIN, T0, 10, at)] == [summary or "version two"]
    finally:
        store.close()


def test_a_folder_of_the_earlier_format_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / MARKER).write_text(json.dumps({"format": 1, "dim": 4}), encoding="utf-8")
    with pytest.raises(StoreError, match="format 1.*start a new folder"):
        open_mem0(tmp_path)


def test_mem0_never_embeds_text_or_calls_an_llm(tmp_path: Path) -> None:
    store = open_mem0(tmp_path)
    try:
        store.upsert(rec())
        folder = store._folder
        with pytest.raises(StoreError, match="did not hand it"):
            folder.embedder.embed("some text Mem0 wants embedded", "search")
        with pytest.raises(StoreError, match="never calls an LLM"):
            folder.memory.llm.generate_response(messages=[])
        # Extraction (infer=True) embeds the text first: refused before it could reach an LLM.
        with pytest.raises(StoreError, match="did not hand it"):
            folder.memory.add("free text", user_id=VIN, agent_id="vdoctor", infer=True)
        assert store.count() == 1
    finally:
        store.close()


def test_bad_vectors_and_vins_are_clear_errors(tmp_path: Path) -> None:
    store = open_mem0(tmp_path)
    try:
        with pytest.raises(StoreError, match="user id"):
            store.upsert(rec(vin="LSVAU 2180N218329"))
        store.upsert(rec())
        with pytest.raises(StoreError, match="4-dimensional"):
            store.upsert(rec(hours=1, summary_vec=[1.0, 0.0]))
        # A query of another model's dimension is refused as on every backend (EmbedderMismatch is a StoreError).
        with pytest.raises(StoreError, match="dimension 4, the query one of 2.*vdoctor memory reembed"):
            store.similar(SimilarQuery(OTHER, "EV-A", np.asarray([1.0, 0.0], dtype=np.float32), 5, LATE))
        assert store.count() == 1
    finally:
        store.close()
    with pytest.raises(ConfigError, match="give the folder"):
        open_store("mem0:///")


def test_a_url_without_a_folder_is_refused_without_echoing_it() -> None:
    # mem0 takes no credentials, but whatever is typed between mem0:// and the folder is never shown.
    for url in ("mem0://vd:Pw0rdSECRET@host/", "mem0://Pw0rdSECRET", "mem0:///"):
        with pytest.raises(ConfigError, match="give the folder after mem0:///") as err:
            open_store(url)
        assert "SECRET" not in str(err.value) and "@" not in str(err.value)


def test_missing_package_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("mem0", "mem0.memory", "mem0.memory.main", "mem0.memory.telemetry"):
        monkeypatch.setitem(sys.modules, name, None)
    store = open_mem0(tmp_path / "fresh")  # nothing is imported before the first write
    try:
        with pytest.raises(ConfigError, match=r"pip install '\.\[mem0\]'"):
            store.upsert(rec())
    finally:
        store.close()


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under the folder: its bytes and modification time."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def test_a_store_opened_read_only_reads_and_never_writes(tmp_path: Path) -> None:
    writer = open_mem0(tmp_path)
    first = rec(hours=0)
    writer.upsert(first)
    writer.upsert(rec(hours=240, session_id=first.session_id, summary="version two"))  # a merge: two versions
    writer.upsert(rec(OTHER, hours=5))
    writer.close()
    before = snapshot(tmp_path)

    reader = open_store(f"mem0:///{tmp_path}", read_only=True)
    try:
        assert isinstance(reader, Mem0Store) and reader.read_only
        assert [r.summary for r in reader.history(VIN)] == ["version two"]
        versions = reader.versions(VIN)
        assert [(v.record.summary, v.version_from, v.version_to) for v in versions] == [
            (first.summary, T0, T0 + timedelta(hours=240)),
            ("version two", T0 + timedelta(hours=240), None),
        ]
        counts = reader.fleet_counts()
        assert (counts.records, counts.vehicles, counts.archived_versions) == (2, 2, 1)
        with pytest.raises(StoreError, match="read-only: refusing upsert"):
            reader.upsert(rec(OTHER, hours=9))
        with pytest.raises(StoreError, match="read-only: refusing set_recheck"):
            reader.set_recheck(VIN, first.session_id, False, LATE)
        with pytest.raises(StoreError, match="read-only: refusing soft_delete"):
            reader.soft_delete(VIN, LATE)
    finally:
        reader.close()
    assert snapshot(tmp_path) == before  # not a byte, not a modification time, not a new file

    absent = tmp_path / "absent"
    with pytest.raises(StoreError, match="read-only: no such store"):
        open_store(f"mem0:///{absent}", read_only=True)
    assert not absent.exists()


def test_a_read_only_store_reads_an_interrupted_merge_repaired_and_leaves_the_repair_to_a_writer(
    tmp_path: Path,
) -> None:
    store = open_mem0(tmp_path)
    first = rec(hours=0)
    store.upsert(first)
    merged = rec(hours=240, session_id=first.session_id, summary="version two", summary_vec=[0.0, 1.0, 0.0, 0.0],
                 recheck_ok=None)  # fmt: skip
    store._folder.add(merged, int(merged.concluded_at.timestamp()))  # stopped before the old version is closed
    store.close()
    before = snapshot(tmp_path)

    reader = open_store(f"mem0:///{tmp_path}", read_only=True)
    assert isinstance(reader, Mem0Store)
    try:
        spans = [(v.record.summary, v.version_to) for v in reader.versions(VIN)]
        assert spans == [(first.summary, T0 + timedelta(hours=240)), ("version two", None)]
        e1 = np.asarray([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
        # Mem0's own filters still see the old version open; the adapter goes by the repaired span.
        late = SimilarQuery(OTHER, "EV-A", e1, 10, T0 + timedelta(hours=300))
        assert reader.similar(late) == []
        early = SimilarQuery(OTHER, "EV-A", e1, 10, T0 + timedelta(hours=100))
        assert [h.record.summary for h in reader.similar(early)] == [first.summary]
    finally:
        reader.close()
    assert snapshot(tmp_path) == before

    writer = open_mem0(tmp_path)  # the first writer writes the repair into Mem0
    try:
        listed = writer._folder.memory.get_all(filters={"user_id": VIN}, top_k=10, show_expired=True)["results"]
        ends = {item["memory"]: item["metadata"][VERSION_TO] for item in listed}
        assert ends == {first.summary: int(merged.concluded_at.timestamp()), "version two": None}
    finally:
        writer.close()
