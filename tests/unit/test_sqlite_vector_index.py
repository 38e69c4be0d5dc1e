"""The embedded store's vector index: persisted, caught up, rebuilt when missing or stale."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits  # type: ignore[import-untyped]

from vdoctor.embedders import threads
from vdoctor.records import MemoryRecord
from vdoctor.stores import SimilarQuery, vecindex
from vdoctor.stores import sqlite as sqlite_store
from vdoctor.stores.base import EmbedderMismatch
from vdoctor.stores.sqlite import SqliteStore
from vdoctor.stores.sqlite_rows import as_int
from vdoctor.stores.vecindex import OPEN_END, SeriesVectorIndex

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 1, tzinfo=UTC)
# Recall as of a time after every record of these tests.
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def rec(i: int, vec: list[float], **overrides: Any) -> MemoryRecord:
    vin = f"LSVAU2180N2{i:06d}"
    data: dict[str, Any] = {
        "vin": vin,
        "session_id": f"{vin}-s",
        "series": "EV-A",
        "concluded_at": T0 + timedelta(hours=i),
        "summary": f"case {i}",
        "summary_vec": vec,
        "root_cause": "cause",
        "fix_action": "fix",
        "priority": "P2",
        "recheck_ok": True,
        "prompt_version": "v1",
    }
    data.update(overrides)
    return MemoryRecord(**data)


def q(vec: list[float], k: int = 10, exclude: str = "NOBODY", series: str = "EV-A") -> SimilarQuery:
    return SimilarQuery(exclude, series, np.asarray(vec, dtype=np.float32), k, as_of=NOW)


def hits(store: SqliteStore, vec: list[float], **kw: Any) -> list[tuple[str, float]]:
    return [(s.record.vin[-2:], round(s.score, 4)) for s in store.similar(q(vec, **kw))]


def test_index_is_saved_on_close_and_reused(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    store = SqliteStore(db)
    store.upsert_many([rec(1, [1.0, 0.0]), rec(2, [0.0, 1.0]), rec(3, [0.6, 0.8], recheck_ok=None)])
    assert hits(store, [1.0, 0.0]) == [("01", 1.0), ("02", 0.0)]
    store.close()
    meta = json.loads((tmp_path / "m.db.vecindex" / "meta.json").read_text())
    assert meta["parts"] == [["EV-A", 2]] and meta["models"] == [""]

    reopened = SqliteStore(db)
    loaded = SeriesVectorIndex.load(tmp_path / "m.db.vecindex", reopened._epoch)
    assert loaded is not None and len(loaded) == 2 and loaded.seq == meta["seq"]
    # Each row keeps the change seq of the version it holds (recall relies on it, see below).
    row_seqs = dict(reopened._conn.execute("SELECT rowid, seq FROM case_memory").fetchall())
    assert {r: loaded.seq_of(r) for r in (1, 2, 3)} == {1: row_seqs[1], 2: row_seqs[2], 3: None}
    assert hits(reopened, [0.0, 1.0]) == [("02", 1.0), ("01", 0.0)]
    reopened.close()


def test_a_second_writer_is_seen_by_the_first_store(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    reader, writer = SqliteStore(db), SqliteStore(db)
    reader.upsert(rec(1, [1.0, 0.0]))
    assert hits(reader, [1.0, 0.0]) == [("01", 1.0)]
    writer.upsert(rec(2, [0.8, 0.6]))  # another process/subtask writes
    assert hits(reader, [1.0, 0.0]) == [("01", 1.0), ("02", 0.8)]
    writer.set_recheck(f"LSVAU2180N2{1:06d}", f"LSVAU2180N2{1:06d}-s", False, T0)  # no longer verified
    assert hits(reader, [1.0, 0.0]) == [("02", 0.8)]
    writer.upsert(rec(2, [0.0, 1.0]))  # replaced with a new vector
    assert hits(reader, [1.0, 0.0]) == [("02", 0.0)]
    writer.soft_delete(f"LSVAU2180N2{2:06d}", T0)
    assert hits(reader, [1.0, 0.0]) == []
    reader.close()
    writer.close()


def test_a_stale_saved_index_is_caught_up_on_start(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    store = SqliteStore(db)
    store.upsert(rec(1, [1.0, 0.0]))
    store.similar(q([1.0, 0.0]))
    store.close()  # saved at this seq
    other = SqliteStore(db)
    other.upsert(rec(2, [0.0, 1.0]))  # written without ever loading the index
    other._index_dir = None  # and this writer does not save one
    other.close()
    again = SqliteStore(db)
    assert hits(again, [0.0, 1.0]) == [("02", 1.0), ("01", 0.0)]
    again.close()


@pytest.mark.parametrize("damage", ["missing", "corrupt", "foreign"])
def test_a_missing_corrupt_or_foreign_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    db = str(tmp_path / "m.db")
    store = SqliteStore(db)
    store.upsert_many([rec(1, [1.0, 0.0]), rec(2, [0.0, 1.0])])
    store.similar(q([1.0, 0.0]))
    store.close()
    folder = tmp_path / "m.db.vecindex"
    if damage == "missing":
        shutil.rmtree(folder)
    elif damage == "corrupt":
        (folder / "s0.vectors.npy").write_bytes(b"not numpy")
    else:
        # An index saved by another database (another epoch) with other content.
        foreign = SqliteStore(str(tmp_path / "other.db"))
        foreign.upsert(rec(9, [1.0, 0.0]))
        foreign.similar(q([1.0, 0.0]))
        foreign.close()
        shutil.rmtree(folder)
        shutil.copytree(tmp_path / "other.db.vecindex", folder)
    store = SqliteStore(db)
    assert hits(store, [1.0, 0.0]) == [("01", 1.0), ("02", 0.0)]
    store.close()


def test_search_masks_the_asking_vehicle_and_other_series(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "m.db"))
    store.upsert_many([rec(1, [1.0, 0.0]), rec(2, [0.9, 0.1]), rec(3, [1.0, 0.0], series="EV-B")])
    assert [v for v, _ in hits(store, [1.0, 0.0], exclude=f"LSVAU2180N2{1:06d}")] == ["02"]
    assert [v for v, _ in hits(store, [1.0, 0.0], series="EV-B")] == ["03"]
    assert hits(store, [1.0, 0.0], series="EV-C") == []
    store.close()


def test_vectors_of_another_dimension_or_model_refuse_the_search(tmp_path: Path) -> None:
    """A search never ranks vectors of two models together: it names them and says what to run."""
    store = SqliteStore(str(tmp_path / "m.db"))
    store.upsert_many([rec(1, [1.0, 0.0], embedder="old-model/2"), rec(2, [0.0, 1.0], embedder="old-model/2")])
    with pytest.raises(EmbedderMismatch, match="dimension 2, the query one of 3.*vdoctor memory reembed"):
        store.similar(q([1.0, 0.0, 0.0]))
    query = SimilarQuery("NOBODY", "EV-A", np.asarray([1.0, 0.0], dtype=np.float32), 5, NOW, embedder="new/2")
    with pytest.raises(EmbedderMismatch, match="embedded by old-model/2, the query by new/2"):
        store.similar(query)
    # Once every vector of the series is the new model's (a re-embed), the search runs.
    store.upsert_many([rec(1, [1.0, 0.0], embedder="new/2"), rec(2, [0.0, 1.0], embedder="new/2")])
    assert [s.record.vin[-2:] for s in store.similar(query)] == ["01", "02"]
    # Vectors of another dimension in the series also refuse a search of the old dimension.
    store.upsert(rec(3, [0.0, 0.0, 1.0], embedder="new/2"))
    with pytest.raises(EmbedderMismatch, match="dimension 3"):
        store.similar(query)
    store.close()


def test_index_growth_and_removal_keep_every_row_findable() -> None:
    index = SeriesVectorIndex()
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(300, 8)).astype(np.float32)
    for i, v in enumerate(vectors):
        index.apply(i, "S", f"V{i % 30}", (0, OPEN_END), v)
    for i in range(0, 300, 3):  # remove a third: slots are refilled from the end
        index.apply(i, "S", f"V{i % 30}", None, None)
    assert len(index) == 200
    for i in (1, 2, 298, 299):
        top = index.search("S", "nobody", vectors[i], 200, at=1)
        assert {r for r, _ in top} == {j for j in range(300) if j % 3}
        # Plain Python numbers (the hits are converted a column at a time), the masked rows left out.
        assert all(type(r) is int and type(s) is float for r, s in top)
        assert index.search("S", "V1", vectors[i], 200, at=1) == [(r, s) for r, s in top if r % 30 != 1]
        # Every score is the row's own inner product with the query (no slot mixed up)...
        for rowid, score in top:
            assert score == pytest.approx(float(vectors[rowid] @ vectors[i]), rel=1e-4, abs=1e-5)
        # ...and the top 5 are the brute-force top 5 of the remaining rows.
        alive = [j for j in range(300) if j % 3]
        brute = sorted(alive, key=lambda j: -float(vectors[j] @ vectors[i]))[:5]
        assert [r for r, _ in index.search("S", "nobody", vectors[i], 5, at=1)] == brute


def test_a_search_gives_its_hits_seqs_as_seq_of_gives_them() -> None:
    index = SeriesVectorIndex()
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(120, 8)).astype(np.float32)
    for i, v in enumerate(vectors):
        index.apply(i, "S", f"V{i % 12}", (0, OPEN_END), v, seq=-1 if i % 5 == 0 else 1000 + i)
    for i in range(0, 120, 4):  # removals move rows between slots: a seq must follow its row
        index.apply(i, "S", f"V{i % 12}", None, None)
    for k in (1, 7, 200):
        seqs: dict[int, int | None] = {}
        top = index.search("S", "V3", vectors[5], k, at=1, seqs=seqs)
        assert top == index.search("S", "V3", vectors[5], k, at=1)
        assert seqs == {rowid: index.seq_of(rowid) for rowid, _ in top}
    assert None in seqs.values() and 1001 in seqs.values()  # all rows at k=200: an unknown seq, and a known one


def test_scans_run_blas_on_one_thread_from_the_first_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A matrix-vector product is memory-bound: the first scan limits BLAS to one thread for the process,
    and it stays so (no limit and restore around each scan)."""

    def blas_threads() -> set[int]:
        return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}

    index = SeriesVectorIndex()
    index.apply(1, "S", "V1", (0, OPEN_END), np.asarray([1.0, 0.0], dtype=np.float32))
    during: list[set[int]] = []
    matmul = np.matmul

    def watched(*args: Any, **kwargs: Any) -> Any:
        during.append(blas_threads())
        return matmul(*args, **kwargs)

    with threadpool_limits(limits=2, user_api="blas"):  # the library's setting, set back when the test ends
        monkeypatch.setattr(threads, "_pinned", False)  # as in a process that has neither scanned nor loaded a model
        with monkeypatch.context() as patch:
            patch.setattr(vecindex.np, "matmul", watched)
            for _ in range(2):
                assert index.search("S", "V2", np.asarray([1.0, 0.0], dtype=np.float32), 1, at=1) == [(1, 1.0)]
        assert during == [{1}, {1}]
        assert blas_threads() == {1}


def test_a_scan_split_over_a_helper_thread_finds_what_one_thread_finds() -> None:
    # Large series are scored half by a helper thread: same rows, same scores, same order, masks included.
    index = SeriesVectorIndex()
    rng = np.random.default_rng(11)
    vectors = rng.normal(size=(20_000, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for i, v in enumerate(vectors):
        index.apply(i, "S", f"V{i % 500}", (i, OPEN_END if i % 7 else i + 50), v)
    with ThreadPoolExecutor(max_workers=1) as helper:
        for probe in (0, 9_999, 10_000, 19_999):
            for at in (19_999, 10_000):
                alone = index.search("S", "V0", vectors[probe], 50, at)
                split = index.search("S", "V0", vectors[probe], 50, at, helper=helper)
                assert split == alone and len(alone) == 50
                assert all(r % 500 and r <= at and (r % 7 or at < r + 50) for r, _ in split)
    # Both halves take part: the best row of each half is found.
    assert index.search("S", "nobody", vectors[3], 1, 19_999, helper=None)[0][0] == 3
    with ThreadPoolExecutor(max_workers=1) as helper:
        assert index.search("S", "nobody", vectors[15_000], 1, 19_999, helper=helper)[0][0] == 15_000


def test_large_series_are_searched_on_scan_threads_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large series' dense scan runs on two threads beside the lexical channel, and its rows are read
    # meanwhile: the channels must give what the serial path gives, and the threads must stop on close.
    store = SqliteStore(str(tmp_path / "m.db"))
    rng = np.random.default_rng(5)
    causes = ("weak cell group", "coolant pump", "fan relay")
    store.upsert_many(
        [rec(i, rng.normal(size=8).tolist(), root_cause=causes[i % 3], alert_text=f"alert {i % 5}") for i in range(60)]
    )
    asked = [dataclasses.replace(q(rng.normal(size=8).tolist()), text=t) for t in ("coolant pump", "cell", "alert 3")]
    serial = [store.channels(a, 7, 7) for a in asked]
    assert not any(t.name.startswith("vd-scan") for t in threading.enumerate())
    monkeypatch.setattr(sqlite_store, "PARALLEL_MIN_ROWS", 1)
    monkeypatch.setattr(vecindex, "PARALLEL_MIN_ROWS", 1)
    parallel = [store.channels(a, 7, 7) for a in asked]
    assert any(t.name.startswith("vd-scan") for t in threading.enumerate())
    assert parallel == serial and all(dense and lexical for dense, lexical in serial)
    store.close()
    assert not any(t.name.startswith("vd-scan") for t in threading.enumerate())


def _seqs(store: SqliteStore) -> tuple[int, dict[str, int]]:
    meta = int(store._conn.execute("SELECT value FROM vd_meta WHERE key = 'seq'").fetchone()[0])
    rows = {sid[-3:-2]: seq for sid, seq in store._conn.execute("SELECT session_id, seq FROM case_memory")}
    return meta, rows


def test_every_write_stamps_its_rows_with_the_next_change_seq(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "m.db"))
    store.upsert(rec(1, [1.0, 0.0]))
    assert _seqs(store) == (1, {"1": 1})
    store.upsert_many([rec(2, [0.0, 1.0]), rec(3, [1.0, 1.0])])
    meta, rows = _seqs(store)
    assert meta == max(rows.values()) and rows["1"] == 1 and min(rows["2"], rows["3"]) > 1
    store.set_recheck(rec(1, [1.0]).vin, rec(1, [1.0]).session_id, True, T0)
    assert _seqs(store)[1]["1"] == meta + 1
    store.upsert(rec(1, [1.0, 0.0], summary="rewritten"))  # an upsert in place is a change too
    assert _seqs(store)[1]["1"] == meta + 2 == _seqs(store)[0]
    store.close()


def test_a_file_from_before_the_seq_triggers_gets_them_on_open(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    store = SqliteStore(path)
    store.upsert(rec(1, [1.0, 0.0]))
    for name in ("vd_seq_after_insert", "vd_seq_after_update"):
        store._conn.execute(f"DROP TRIGGER {name}")
    store.close()
    reopened = SqliteStore(path)
    reopened.upsert(rec(2, [0.0, 1.0]))
    assert _seqs(reopened) == (2, {"1": 1, "2": 2})
    assert [vin for vin, _ in hits(reopened, [0.0, 1.0])] == ["02", "01"]  # the new row is in the index
    reopened.close()


def test_a_file_from_before_omitted_and_nullable_priority_takes_both_on_open(tmp_path: Path) -> None:
    """A file whose priority is NOT NULL and that has no omitted column: the column is added on open,
    and a milestone with no priority yet is stored as '' there and read back as None."""
    import sqlite3

    from vdoctor.records import RecordKind

    path = str(tmp_path / "old.db")
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE case_memory (vin TEXT NOT NULL, session_id TEXT NOT NULL, series TEXT NOT NULL, "
        "concluded_at INTEGER NOT NULL, summary TEXT NOT NULL, summary_vec BLOB NOT NULL, root_cause TEXT NOT NULL, "
        "fix_action TEXT NOT NULL, priority TEXT NOT NULL, dtc_codes TEXT NOT NULL, recheck_ok INTEGER, "
        "prompt_version TEXT NOT NULL, valid INTEGER NOT NULL, updated_at INTEGER NOT NULL, "
        "PRIMARY KEY (vin, session_id))"
    )
    old.commit()
    old.close()
    store = SqliteStore(path)
    milestone = rec(1, [1.0, 0.0], kind=RecordKind.MILESTONE, priority=None, root_cause="", fix_action="")
    store.upsert(milestone)
    store.upsert(rec(2, [0.0, 1.0], omitted=["code P1A9A"]))
    got = store.get(milestone.vin, milestone.session_id)
    assert got is not None and got.priority is None
    assert store._conn.execute("SELECT priority FROM case_memory WHERE vin = ?", (milestone.vin,)).fetchone() == ("",)
    other = store.get(rec(2, [0.0]).vin, "LSVAU2180N2000002-s")
    assert other is not None and other.omitted == ["code P1A9A"]
    store.close()
    fresh = SqliteStore(str(tmp_path / "new.db"))  # a new file stores NULL
    fresh.upsert(milestone)
    assert fresh._conn.execute("SELECT priority FROM case_memory").fetchone() == (None,)
    fresh.close()


def test_recall_runs_a_fixed_set_of_statements_whatever_it_finds(tmp_path: Path) -> None:
    """Every distinct SQL text is a prepared statement each read connection keeps (128 of them):
    texts that name the rows found filled those caches in every thread (sqlite's memory grew by 116 MB
    over 10,000 events at 64 threads, bench/engine_memory.py). The rows found travel as a parameter instead."""
    store = SqliteStore(str(tmp_path / "m.db"))
    rng = np.random.default_rng(7)
    store.upsert_many([rec(i, rng.normal(size=8).tolist()) for i in range(200)])
    texts: set[str] = set()
    run = store._query

    def seen(sql: str, params: Any = ()) -> Any:
        texts.add(sql)
        return run(sql, params)

    store._query = seen  # type: ignore[method-assign]
    found: set[tuple[str, ...]] = set()
    for i in range(60):
        got = store.channels(q(rng.normal(size=8).tolist(), k=5), 5, 0)[0]
        found.add(tuple(s.record.vin for s in got))
        if i == 4:
            first = set(texts)
    store.close()
    assert len(found) > 30  # the recalls found many different sets of rows...
    assert texts == first  # ...through the statements the first five already ran


def test_read_connections_are_as_many_as_statements_ran_at_once_not_one_per_thread(tmp_path: Path) -> None:
    """Each read connection keeps a page cache (up to 512 KiB) and its prepared statements: threads that read one
    after another share one, and threads that read at once take one each."""
    store = SqliteStore(str(tmp_path / "m.db"))
    rng = np.random.default_rng(3)
    store.upsert_many([rec(i, rng.normal(size=8).tolist()) for i in range(50)])
    query = q(rng.normal(size=8).tolist(), k=5)
    expected = [s.record.vin for s in store.channels(query, 5, 0)[0]]
    found: list[list[str]] = []
    for _ in range(20):
        reader = threading.Thread(target=lambda: found.append([s.record.vin for s in store.channels(query, 5, 0)[0]]))
        reader.start()
        reader.join()
    assert found == [expected] * 20
    assert store.read_connections == 1
    # Threads reading at once each take a connection of their own, and find the same.
    barrier = threading.Barrier(8)

    def together() -> None:
        barrier.wait()
        for _ in range(20):
            found.append([s.record.vin for s in store.channels(query, 5, 0)[0]])

    readers = [threading.Thread(target=together) for _ in range(8)]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    assert found == [expected] * (20 + 8 * 20)
    assert 1 <= store.read_connections <= 8
    store.close()


def test_recall_sees_every_change_to_a_row_it_decoded_before(tmp_path: Path) -> None:
    """Recall keeps the records it decoded by (row, change seq): any write to a row, from this store or
    another on the same file, is read again, never served from what was decoded before."""
    path = str(tmp_path / "m.db")
    store, other = SqliteStore(path), SqliteStore(path)
    store.upsert_many([rec(1, [1.0, 0.0]), rec(2, [0.8, 0.6]), rec(3, [0.6, 0.8])])

    def seen() -> dict[str, tuple[str, float]]:
        return {s.record.vin[-1]: (s.record.summary, round(s.score, 4)) for s in store.similar(q([1.0, 0.0]))}

    assert seen() == {"1": ("case 1", 1.0), "2": ("case 2", 0.8), "3": ("case 3", 0.6)}
    assert len(store._decoded) == 3
    store.upsert(rec(1, [1.0, 0.0], summary="rewritten here"))
    other.upsert(rec(2, [0.8, 0.6], summary="rewritten by another store"))
    assert seen() == {"1": ("rewritten here", 1.0), "2": ("rewritten by another store", 0.8), "3": ("case 3", 0.6)}
    other.set_recheck(rec(3, [1.0]).vin, rec(3, [1.0]).session_id, False, NOW - timedelta(days=1))
    store.soft_delete(rec(2, [1.0]).vin, NOW - timedelta(days=1))
    assert seen() == {"1": ("rewritten here", 1.0)}
    store.close()
    other.close()


def test_rows_decoded_before_are_not_read_again(tmp_path: Path) -> None:
    """The index knows the change seq of every row it holds: a hit decoded before at that seq is not
    read from the file again (its vector and texts were most of a recall's reading), and a recall
    whose hits were all decoded before runs no statement for them at all."""
    store = SqliteStore(str(tmp_path / "m.db"))
    store.upsert_many([rec(i, [1.0, i / 10]) for i in range(6)])
    whole: list[list[int]] = []  # the row ids of each statement that read rows
    run = store._query

    def seen(sql: str, params: Any = ()) -> Any:
        if "rowid IN" in sql:
            assert "summary_vec" in sql  # rows are read whole or not at all
            whole.append(json.loads(params["ids"]))
        return run(sql, params)

    store._query = seen  # type: ignore[method-assign]
    first = [(s.record.vin, s.score) for s in store.similar(q([1.0, 0.0]))]
    assert len(first) == 6 and len(whole) == 1 and len(whole[0]) == 6
    assert [(s.record.vin, s.score) for s in store.similar(q([1.0, 0.0]))] == first
    assert len(whole) == 1  # the second recall read no row
    store.upsert(rec(2, [1.0, 0.2], summary="rewritten"))
    got = {s.record.vin[-1]: s.record.summary for s in store.similar(q([1.0, 0.0]))}
    assert got["2"] == "rewritten" and len(whole) == 2 and len(whole[1]) == 1  # only the changed row
    store.close()


def _race_before_reading(store: SqliteStore, change: Any) -> None:
    """Run ``change`` once, after the next recall's search and before it reads its hits' rows."""
    read = store._records

    def racing(*args: Any) -> Any:
        store._records = read  # type: ignore[method-assign]
        change()
        return read(*args)

    store._records = racing  # type: ignore[method-assign]


def test_a_row_changed_after_the_search_is_read_as_it_is_now_unless_decoded_at_the_searched_version(
    tmp_path: Path,
) -> None:
    """Another writer changes rows after a recall searched and before it reads the hits. A hit not
    decoded before is read as it is now: the rewritten row comes back rewritten, the one invalidated
    meanwhile not at all. A hit decoded before at the version the search ranked is that version, so a
    recall over decoded rows returns what its search saw; the next recall sees the changes."""
    path = str(tmp_path / "m.db")
    store, other = SqliteStore(path), SqliteStore(path)
    store.upsert_many([rec(1, [1.0, 0.0]), rec(2, [0.8, 0.6]), rec(3, [0.6, 0.8])])

    def change(summary: str) -> Any:
        def run() -> None:
            other.upsert(rec(1, [1.0, 0.0], summary=summary))
            other.soft_delete(rec(3, [1.0]).vin, NOW - timedelta(days=1))

        return run

    def summaries() -> dict[str, str]:
        return {s.record.vin[-1]: s.record.summary for s in store.similar(q([1.0, 0.0]))}

    _race_before_reading(store, change("rewritten meanwhile"))
    assert len(store._decoded) == 0
    assert summaries() == {"1": "rewritten meanwhile", "2": "case 2"}

    other.upsert(rec(3, [0.6, 0.8]))  # valid again, as a new version
    assert summaries() == {"1": "rewritten meanwhile", "2": "case 2", "3": "case 3"}  # all three decoded now
    _race_before_reading(store, change("rewritten once more"))
    assert summaries() == {"1": "rewritten meanwhile", "2": "case 2", "3": "case 3"}  # as the search saw them
    assert summaries() == {"1": "rewritten once more", "2": "case 2"}
    store.close()
    other.close()


def test_decoded_records_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "DECODED_ROWS", 4)
    store = SqliteStore(str(tmp_path / "m.db"))
    rng = np.random.default_rng(3)
    store.upsert_many([rec(i, rng.normal(size=8).tolist()) for i in range(40)])
    for _ in range(5):
        assert len(store.similar(q(rng.normal(size=8).tolist(), k=10))) == 10
    assert len(store._decoded) == 4
    store.close()


def test_threads_of_two_stores_write_one_file_at_once_and_every_write_lands(tmp_path: Path) -> None:
    # Each store writes one statement at a time; two stores on one file take turns on SQLite's write lock:
    # 16 threads over two stores on one file, upserts and rechecks interleaved, none lost or refused.
    path = str(tmp_path / "m.db")
    first, second = SqliteStore(path), SqliteStore(path)
    start = threading.Barrier(16)

    def write(t: int) -> None:
        store = first if t % 2 else second
        start.wait()
        for k in range(25):
            i = t * 100 + k
            store.upsert(rec(i, [1.0, float(k)]))
            assert store.set_recheck(rec(i, [1.0]).vin, rec(i, [1.0]).session_id, k % 2 == 0, T0)
        store.upsert_many([rec(t * 100 + k, [0.5, 0.5], summary=f"batch {t}") for k in range(3)])

    with ThreadPoolExecutor(16) as pool:
        for done in [pool.submit(write, t) for t in range(16)]:
            done.result(timeout=60)
    meta = int(first._conn.execute("SELECT value FROM vd_meta WHERE key = 'seq'").fetchone()[0])
    rows, seqs = first._conn.execute("SELECT COUNT(*), COUNT(DISTINCT seq) FROM case_memory").fetchone()
    assert rows == seqs == 16 * 25
    # Every change took its own seq: 25 upserts, 25 rechecks and 3 rewrites per thread.
    assert meta == 16 * (25 + 25 + 3)
    assert all(second.get(rec(t * 100, [1.0]).vin, rec(t * 100, [1.0]).session_id).summary == f"batch {t}"  # type: ignore[union-attr]
               for t in range(16))  # fmt: skip
    assert first.get(rec(103, [1.0]).vin, rec(103, [1.0]).session_id).recheck_ok is False  # type: ignore[union-attr]
    first.close()
    second.close()


def test_recall_over_decoded_rows_gives_what_reading_every_row_gives(tmp_path: Path) -> None:
    """Both channels' hits at many event times, among versions verified, rechecked, invalidated and archived
    later than some of those times: the rows decoded before, taken as of the query's time inline
    (``_records``), are the records that reading every hit from the file gives, and each hit's seq, the
    lexical ones taken from the dense scan where it found them too, is the index's ``seq_of``."""
    store = SqliteStore(str(tmp_path / "m.db"))
    rng = np.random.default_rng(17)
    words = ["pump", "coolant", "leak", "fan", "relay", "fuse", "bms", "cell"]

    def alert() -> str:
        return " ".join(str(w) for w in rng.choice(words, size=3))

    for i in range(40):
        store.upsert(rec(i, rng.normal(size=4).tolist(), alert_text=alert(), verified_ts=T0 + timedelta(hours=i)))
    for i in range(0, 40, 3):
        store.set_recheck(rec(i, [1.0]).vin, rec(i, [1.0]).session_id, bool(i % 2), T0 + timedelta(hours=60 + i))
    for i in range(1, 40, 5):
        store.soft_delete(rec(i, [1.0]).vin, T0 + timedelta(hours=80 + i))
    for i in range(2, 40, 7):
        store.upsert(rec(i, rng.normal(size=4).tolist(), alert_text=alert(), concluded_at=T0 + timedelta(hours=90)))
    checked = as_of_copies = 0
    for hour in range(0, 130, 3):
        query = dataclasses.replace(
            q(rng.normal(size=4).tolist(), k=20, exclude=rec(hour % 40, [1.0]).vin),
            as_of=T0 + timedelta(hours=hour),
            text=alert(),
        )
        dense, lexical, seqs = store._search(query, 20, 20)
        index = store._index
        assert index is not None and seqs == {r: index.seq_of(r) for r, _ in dense + lexical}
        rowids = {r for r, _ in dense + lexical}
        store._records(query, rowids, seqs)  # decodes what was not decoded yet
        known = store._records(query, rowids, seqs)
        assert known == store._records(query, rowids, {})  # every row read from the file
        checked += len(known)
        as_of_copies += sum(store._decoded.get(k, seqs[k] or -1) not in (None, r) for k, r in known.items())
    assert checked > 200 and as_of_copies > 0
    store.close()


def test_the_catch_up_reads_the_changed_rows_and_the_seq_in_one_statement(tmp_path: Path) -> None:
    """The indexes catch up on one statement (one snapshot): the changed current rows in change order,
    then the archived versions, then the change seq; what two statements for the rows and one for the
    seq read. A search first reads the seq to see whether they are behind, unless its store has written
    since they caught up (then they are): writes of another store on the file are seen all the same,
    and every search finds what a store opened afresh finds."""
    path = str(tmp_path / "m.db")
    store, other = SqliteStore(path), SqliteStore(path)
    rng = np.random.default_rng(3)
    changed = "series, vin, recheck_ok, verified_ts, version_from, invalid_ts"
    current = (
        f"SELECT rowid, {changed}, NULL, summary_vec, embedder, search_tokens, seq "
        "FROM case_memory WHERE seq > ? ORDER BY seq"
    )
    archived = (
        f"SELECT -rowid, {changed}, version_to, summary_vec, embedder, search_tokens, seq "
        "FROM case_history WHERE seq > ? ORDER BY seq"
    )
    statements: list[str] = []
    run = store._query

    def seen(sql: str, params: Any = ()) -> Any:
        statements.append(sql)
        return run(sql, params)

    store._query = seen  # type: ignore[method-assign]
    for step in range(120):
        writer = store if step % 3 else other
        i = int(rng.integers(0, 15))
        action = rng.integers(0, 4)
        record = rec(i, rng.normal(size=2).tolist(), concluded_at=T0 + timedelta(hours=step), summary=f"v{step}")
        before = store._seq()
        if action <= 1:
            writer.upsert(record)
        elif action == 2:
            writer.set_recheck(record.vin, record.session_id, bool(rng.integers(0, 2)), T0 + timedelta(hours=step))
        else:
            writer.soft_delete(record.vin, T0 + timedelta(hours=step))
        since = int(rng.integers(-1, store._seq() + 1))
        *rows, last = run(sqlite_store._CHANGED_ROWS, {"since": since})
        assert [row[0] for row in rows] == sorted(row[0] for row in rows)  # the current rows first
        assert [row[1:] for row in rows] == run(current, (since,)) + run(archived, (since,))
        assert last[:2] == (2, None) and last[2:-1] == (None,) * 10 and as_int(last[-1]) == store._seq()
        behind = store._index is None or store._index.seq != store._seq()
        own = writer is store and store._seq() != before and store._index is not None
        statements.clear()
        got = [(s.record.vin, s.score) for s in store.similar(q([1.0, 0.0]))]
        look = [] if own else ["SELECT value FROM vd_meta WHERE key = 'seq'"]
        catch_up = [sqlite_store._CHANGED_ROWS] if behind else []
        searched = [sql for sql in statements if "rowid IN" not in sql]  # not the reads of the hits' rows
        assert searched == [*look, *catch_up]
        assert store._index is not None and store._index.seq == store._seq()
        if step % 10 == 9:
            afresh = SqliteStore(path)
            assert got == [(s.record.vin, s.score) for s in afresh.similar(q([1.0, 0.0]))]
            query = dataclasses.replace(q([0.6, 0.8]), text="cause v3 v40")
            assert [(s.record.vin, s.score) for s in store.lexical(query)] == [
                (s.record.vin, s.score) for s in afresh.lexical(query)
            ]
            afresh.close()
    assert store._index is not None and any(rowid < 0 for rowid in store._index._where)  # archived ones too
    # While a write holds the write connection, a search does not ask it (it would wait): it reads the seq.
    store.upsert(rec(1, [0.0, 1.0], summary="last"))
    statements.clear()
    with store._lock:
        assert ("LSVAU2180N2000001", 1.0) in [(s.record.vin, s.score) for s in store.similar(q([0.0, 1.0]))]
    assert [sql for sql in statements if "rowid IN" not in sql] == [
        "SELECT value FROM vd_meta WHERE key = 'seq'",
        sqlite_store._CHANGED_ROWS,
    ]
    store.close()
    other.close()
