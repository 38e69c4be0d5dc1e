"""The query vector file: processes that share it embed a query once, and it never stands in the model's way."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from vdoctor.assembly import query_vector_file
from vdoctor.embedders.base import Vectors
from vdoctor.embedders.cache import QueryCache
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.embedders.query_file import FLUSH_AFTER_S, FLUSH_ROWS, QueryVectorFile
from vdoctor.settings import load_settings

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).resolve().parents[2]


class Counting:
    """The hashing embedder, counting the query texts it is asked to embed."""

    def __init__(self, dim: int = 32) -> None:
        self.inner = HashingEmbedder(dim)
        self.name, self.dim = self.inner.name, self.inner.dim
        self.queries: list[str] = []

    def embed(self, texts: list[str]) -> Vectors:
        return self.inner.embed(texts)

    def embed_queries(self, texts: list[str]) -> Vectors:
        self.queries += texts
        return self.inner.embed_queries(texts)


def test_a_second_process_takes_the_first_ones_vectors_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "m.db.query-vectors"
    texts = ["电池温度过高 P0A80", "charging fault", "coolant low"]
    # Another interpreter embeds two of the texts, one alone and one in a batch.
    script = textwrap.dedent(f"""
        from vdoctor.embedders.cache import QueryCache
        from vdoctor.embedders.hashing import HashingEmbedder
        from vdoctor.embedders.query_file import QueryVectorFile
        cache = QueryCache(HashingEmbedder(32), shared=QueryVectorFile({str(path)!r}))
        cache.embed_queries([{texts[0]!r}])
        cache.embed_queries([{texts[1]!r}, {texts[0]!r}])
    """)
    subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO_ROOT, timeout=120)

    model = Counting()
    cache = QueryCache(model, shared=QueryVectorFile(path))
    got = cache.embed_queries(texts)
    assert model.queries == [texts[2]]  # only the text the other process never asked
    np.testing.assert_array_equal(got, model.inner.embed_queries(texts))
    assert (cache.hits, cache.misses, cache.shared_hits) == (0, 3, 2)
    # Then this process's own cache answers, and the file holds all three once this process's rows are written.
    cache.embed_queries([texts[0]])
    assert cache.hits == 1 and model.queries == [texts[2]]
    cache.flush()
    assert sorted(QueryVectorFile(path).get(model.name, 32, texts)) == sorted(texts)


def test_one_text_alone_is_looked_up_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "q"
    first, second = Counting(), Counting()
    own = QueryCache(first, shared=QueryVectorFile(path))
    a = own.embed_queries(["misfire"])
    own.flush()
    b = QueryCache(second, shared=QueryVectorFile(path)).embed_queries(["misfire"])
    assert first.queries == ["misfire"] and second.queries == []
    np.testing.assert_array_equal(a, b)
    assert b.shape == (1, 32) and b.flags.writeable


def test_vectors_are_kept_by_embedder_and_dimension(tmp_path: Path) -> None:
    path = tmp_path / "q"
    first = QueryCache(Counting(32), shared=QueryVectorFile(path))
    first.embed_queries(["misfire"])
    first.flush()
    other_dim = Counting(16)
    QueryCache(other_dim, shared=QueryVectorFile(path)).embed_queries(["misfire"])
    assert other_dim.queries == ["misfire"]
    assert QueryVectorFile(path).get("another-model", 32, ["misfire"]) == {}


def test_the_file_keeps_the_newest_rows_within_its_bound(tmp_path: Path) -> None:
    shared = QueryVectorFile(tmp_path / "q", max_rows=10)
    vectors = HashingEmbedder(8).embed_queries([f"text {i}" for i in range(300)])
    for i in range(300):
        shared.put("h", 8, {f"text {i}": vectors[i]})
    shared.flush()
    # Trimmed after every 256 rows written: back to 10 at row 256, 44 more since.
    with sqlite3.connect(tmp_path / "q") as conn:
        kept = [t for (t,) in conn.execute("SELECT text FROM query_vectors ORDER BY rowid")]
    assert kept == [f"text {i}" for i in range(246, 300)]


def test_a_file_that_cannot_be_opened_leaves_the_model_to_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = Counting()
    shared = QueryVectorFile(tmp_path)  # a folder: no database opens there
    cache = QueryCache(model, shared=shared)
    got = cache.embed_queries(["misfire", "coolant low"])
    cache.embed_queries(["knock"])
    np.testing.assert_array_equal(got, model.inner.embed_queries(["misfire", "coolant low"]))
    assert model.queries == ["coolant low", "misfire", "knock"]
    assert shared.failures == 1
    assert len([r for r in caplog.records if "query vector file" in r.getMessage()]) == 1


def test_a_corrupt_file_leaves_the_model_to_answer(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "q"
    path.write_bytes(b"not a database" * 100)
    model = Counting()
    got = QueryCache(model, shared=QueryVectorFile(path)).embed_queries(["misfire"])
    np.testing.assert_array_equal(got, model.inner.embed_queries(["misfire"]))
    assert any("query vector file" in r.getMessage() for r in caplog.records)


def test_a_malformed_row_is_not_used(tmp_path: Path) -> None:
    path = tmp_path / "q"
    shared = QueryVectorFile(path)
    shared.put("hashing-32", 32, {"warm": np.ones(32, dtype=np.float32)})
    shared.flush()  # opens the file, makes the table
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO query_vectors VALUES (?, 32, 'short', ?), (?, 32, 'nan', ?)",
            (Counting().name, np.ones(8, dtype=np.float32).tobytes(), Counting().name,
             np.full(32, np.nan, dtype=np.float32).tobytes()),
        )  # fmt: skip
    model = Counting()
    got = QueryCache(model, shared=QueryVectorFile(path)).embed_queries(["short", "nan"])
    assert sorted(model.queries) == ["nan", "short"]
    np.testing.assert_array_equal(got, model.inner.embed_queries(["short", "nan"]))


def test_a_write_another_process_holds_the_file_for_waits_for_the_next_flush(tmp_path: Path) -> None:
    path = tmp_path / "q"
    vector = np.ones(4, dtype=np.float32)
    shared = QueryVectorFile(path)
    shared.put("m", 4, {"a": vector})
    shared.flush()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process writing
    try:
        started = time.monotonic()
        shared.put("m", 4, {"b": vector})
        shared.flush()
        waited = time.monotonic() - started
        assert set(shared.get("m", 4, ["a", "b"])) == {"a", "b"}  # readers never wait; "b" waits in this process
        assert set(QueryVectorFile(path).get("m", 4, ["a", "b"])) == {"a"}
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert shared.failures == 0 and waited < 5
    shared.flush()
    assert set(QueryVectorFile(path).get("m", 4, ["a", "b"])) == {"a", "b"}


def _rows(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [t for (t,) in conn.execute("SELECT text FROM query_vectors ORDER BY rowid")]


def test_new_vectors_are_written_in_batches_and_found_while_they_wait(tmp_path: Path) -> None:
    path = tmp_path / "q"
    shared = QueryVectorFile(path)
    vectors = HashingEmbedder(8).embed_queries([f"text {i}" for i in range(FLUSH_ROWS + 1)])
    shared.put("h", 8, {"text 0": vectors[0]})
    shared.flush()  # the file and its table exist
    for i in range(1, FLUSH_ROWS):
        shared.put("h", 8, {f"text {i}": vectors[i]})
    assert _rows(path) == ["text 0"]  # 31 rows wait in this process...
    np.testing.assert_array_equal(shared.get("h", 8, ["text 5"])["text 5"], vectors[5])  # ... where get finds them
    shared.put("h", 8, {f"text {FLUSH_ROWS}": vectors[FLUSH_ROWS]})
    assert _rows(path) == [f"text {i}" for i in range(FLUSH_ROWS + 1)]  # the 32nd waiting wrote them all


def test_a_vector_waits_no_longer_than_the_next_one_after_the_flush_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "q"
    shared = QueryVectorFile(path)
    vector = np.ones(4, dtype=np.float32)
    shared.put("m", 4, {"warm": vector})
    shared.flush()
    now = [1000.0]
    monkeypatch.setattr("vdoctor.embedders.query_file.time.monotonic", lambda: now[0])
    shared.put("m", 4, {"a": vector})
    now[0] += FLUSH_AFTER_S - 0.1
    shared.put("m", 4, {"b": vector})
    assert _rows(path) == ["warm"]
    now[0] += 0.1
    shared.put("m", 4, {"c": vector})
    assert _rows(path) == ["warm", "a", "b", "c"]


def test_closing_the_engine_writes_the_waiting_query_vectors(tmp_path: Path) -> None:
    from vdoctor.assembly import build_engine

    db = tmp_path / "memory.db"
    settings = load_settings({"VDOCTOR_MEMORY_URL": f"sqlite:///{db}", "VDOCTOR_EMBEDDER": "hashing",
                              "VDOCTOR_KNOWLEDGE_URL": "memory://"})  # fmt: skip
    engine = build_engine(settings)
    path = tmp_path / "queries"
    # The process's embedder with its query cache and file, as the model embedders are built (``embedders._model``).
    engine.embedder = QueryCache(Counting(), shared=QueryVectorFile(path))
    engine.embedder.embed_queries(["ABS灯亮 C0035"])
    assert _rows(path) == []  # looked up there, not written yet
    engine.close()
    assert _rows(path) == ["ABS灯亮 C0035"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, ".vdoctor/memory.db.query-vectors"),
        ({"VDOCTOR_MEMORY_URL": "sqlite:////data/fleet.db?synchronous=full"}, "/data/fleet.db.query-vectors"),
        ({"VDOCTOR_MEMORY_URL": "sqlite://"}, None),
        ({"VDOCTOR_MEMORY_URL": "mysql://u@db:3306/vd"}, "/cache/vdoctor/query-vectors"),
        ({"VDOCTOR_MEMORY_URL": "doris://u:secret@fe:9030/vd"}, "/cache/vdoctor/query-vectors"),
        ({"VDOCTOR_MEMORY_URL": "memory://"}, None),
        ({"VDOCTOR_MEMORY_URL": "mysql://u@db:3306/vd", "VDOCTOR_QUERY_VECTOR_FILE": "off"}, None),
        ({"VDOCTOR_QUERY_VECTOR_FILE": "/shared/queries.db"}, "/shared/queries.db"),
        ({"VDOCTOR_QUERY_VECTOR_FILE": "/shared/queries.db", "VDOCTOR_MEMORY_URL": "memory://"}, "/shared/queries.db"),
        ({"VDOCTOR_QUERY_VECTOR_FILE": "off"}, None),
        ({"VDOCTOR_DETERMINISTIC": "true"}, None),
    ],
)
def test_where_the_job_keeps_the_file(
    env: dict[str, str], expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/cache")
    assert query_vector_file(load_settings(env)) == expected


@pytest.mark.parametrize(("xdg", "expected"), [(None, ".cache"), ("", ".cache"), ("relative/cache", ".cache")])
def test_a_server_store_without_an_absolute_cache_folder_uses_the_home_cache(
    xdg: str | None, expected: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    found = query_vector_file(load_settings({"VDOCTOR_MEMORY_URL": "mysql://u@db:3306/vd"}))
    assert found == str(tmp_path / expected / "vdoctor" / "query-vectors")
