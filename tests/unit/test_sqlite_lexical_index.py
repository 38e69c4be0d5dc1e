"""The embedded store's lexical index: follows the table across processes, persisted, rebuilt when stale."""

from __future__ import annotations

import json
import math
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vdoctor.records import MemoryRecord
from vdoctor.retrieval.bm25 import BM25_B, BM25_K1, Bm25Corpus
from vdoctor.retrieval.tokens import TOKENIZER
from vdoctor.stores import SimilarQuery, lexindex
from vdoctor.stores.lexindex import SeriesLexicalIndex
from vdoctor.stores.sqlite import SqliteStore
from vdoctor.stores.vecindex import OPEN_END, vin_hash

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 1, tzinfo=UTC)
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def rec(i: int, alert: str, **overrides: Any) -> MemoryRecord:
    vin = f"LSVAU2180N2{i:06d}"
    data: dict[str, Any] = {
        "vin": vin,
        "session_id": f"{vin}-s",
        "series": "EV-A",
        "concluded_at": T0 + timedelta(hours=i),
        "summary": "",
        "summary_vec": [1.0, 0.0],
        "root_cause": "",
        "fix_action": "",
        "priority": "P2",
        "recheck_ok": True,
        "prompt_version": "v1",
        "alert_text": alert,
    }
    data.update(overrides)
    return MemoryRecord(**data)


def found(store: SqliteStore, text: str, exclude: str = "NOBODY") -> list[str]:
    query = SimilarQuery(exclude, "EV-A", np.asarray([1.0, 0.0], dtype=np.float32), 10, NOW, text=text)
    return [s.record.vin[-2:] for s in store.lexical(query)]


def test_a_second_writer_is_seen_by_the_first_stores_lexical_search(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    reader, writer = SqliteStore(db), SqliteStore(db)
    reader.upsert(rec(1, "电池压差过大"))
    assert found(reader, "压差") == ["01"]
    writer.upsert(rec(2, "单体压差 压差大"))  # another process/subtask writes
    assert found(reader, "压差") == ["02", "01"]  # two 压差 in a document as short: ranks first
    writer.set_recheck(f"LSVAU2180N2{1:06d}", f"LSVAU2180N2{1:06d}-s", False, T0)  # no longer verified
    assert found(reader, "压差") == ["02"]
    writer.upsert(rec(2, "冷却液温度过高"))  # rewritten with other words
    assert found(reader, "压差") == [] and found(reader, "冷却液") == ["02"]
    writer.soft_delete(f"LSVAU2180N2{2:06d}", T0)
    assert found(reader, "冷却液") == []
    reader.close()
    writer.close()


def test_the_index_is_saved_on_close_and_reused(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    store = SqliteStore(db)
    store.upsert_many([rec(1, "电池压差过大"), rec(2, "coolant pump stalled"), rec(3, "压差", recheck_ok=None)])
    assert sorted(found(store, "压差 pumps")) == ["01", "02"]  # 03 is not verified
    store.close()
    meta = json.loads((tmp_path / "m.db.lexindex" / "meta.json").read_text())
    assert meta["series"] == ["EV-A"] and meta["tokenizer"] == TOKENIZER
    reopened = SqliteStore(db)
    loaded = SeriesLexicalIndex.load(tmp_path / "m.db.lexindex", reopened._epoch)
    assert loaded is not None and len(loaded) == 2 and loaded.seq == meta["seq"]
    assert found(reopened, "coolant") == ["02"]
    reopened.close()


@pytest.mark.parametrize("damage", ["missing", "corrupt", "foreign", "tokenizer"])
def test_a_missing_corrupt_foreign_or_other_tokenizer_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    db = str(tmp_path / "m.db")
    store = SqliteStore(db)
    store.upsert_many([rec(1, "电池压差过大"), rec(2, "coolant pump stalled")])
    found(store, "x")
    store.close()
    folder = tmp_path / "m.db.lexindex"
    if damage == "missing":
        shutil.rmtree(folder)
    elif damage == "corrupt":
        (folder / "s0.docs.npy").write_bytes(b"not numpy")
    elif damage == "tokenizer":
        meta = json.loads((folder / "meta.json").read_text())
        (folder / "meta.json").write_text(json.dumps({**meta, "tokenizer": "some-older-tokenizer"}))
    else:
        foreign = SqliteStore(str(tmp_path / "other.db"))
        foreign.upsert(rec(9, "电池压差过大"))
        found(foreign, "x")
        foreign.close()
        shutil.rmtree(folder)
        shutil.copytree(tmp_path / "other.db.lexindex", folder)
    store = SqliteStore(db)
    assert found(store, "压差") == ["01"] and found(store, "pump") == ["02"]
    store.close()


def test_search_masks_the_asking_vehicle_and_the_time_span() -> None:
    index = SeriesLexicalIndex()
    index.apply(1, "S", "V1", (100, 200), "a b")
    index.apply(2, "S", "V2", (100, OPEN_END), "a c")
    assert {r for r, _ in index.search("S", "V9", ["a"], 5, at=150)} == {1, 2}
    assert [r for r, _ in index.search("S", "V1", ["a"], 5, at=150)] == [2]  # the asking vehicle is masked
    assert [r for r, _ in index.search("S", "V9", ["a"], 5, at=250)] == [2]  # 1's span ended at 200
    assert index.search("S", "V9", ["a"], 5, at=50) == []  # before either span
    assert index.search("T", "V9", ["a"], 5, at=150) == []  # another series


def test_scores_are_bm25_over_the_live_documents_and_survive_compaction(tmp_path: Path) -> None:
    """Scores are exact BM25 over the live documents of the series, before and after compaction (when the
    dead outnumber the live) and after a save and load (which compacts)."""
    rng = np.random.default_rng(3)
    vocab = [f"w{i}" for i in range(40)]
    docs = {i: [str(w) for w in rng.choice(vocab, size=int(rng.integers(3, 12)))] for i in range(3000)}
    index = SeriesLexicalIndex()
    for i, words in docs.items():
        index.apply(i, "S", f"V{i}", (0, OPEN_END), " ".join(words))
    terms = ["w1", "w7", "w30"]

    def check(exact: bool) -> None:
        nonlocal index
        if exact:
            index.save(tmp_path / "lex", "epoch")
            loaded = SeriesLexicalIndex.load(tmp_path / "lex", "epoch")
            assert loaded is not None
            index = loaded
        ids = sorted(docs)
        expected = Bm25Corpus([docs[i] for i in ids]).scores(terms)
        got = dict(index.search("S", "nobody", terms, len(ids), at=1))
        assert set(got) == {ids[j] for j in np.flatnonzero(expected > 0)}
        for j, i in enumerate(ids):
            if expected[j] > 0:
                assert got[i] == pytest.approx(expected[j], rel=1e-9)

    for i in [i for i in range(3000) if i % 3]:  # remove two thirds: the dead outnumber the live
        index.apply(i, "S", f"V{i}", None, None)
        del docs[i]
    assert len(index) == len(docs) == 1000
    check(exact=False)
    check(exact=True)
    for i in list(docs)[::10]:  # rewrite a tenth: 100 dead documents until the next compaction
        docs[i] = [str(w) for w in rng.choice(vocab, size=5)]
        index.apply(i, "S", f"V{i}", (0, OPEN_END), " ".join(docs[i]))
    check(exact=False)
    check(exact=True)


def test_scores_count_only_the_versions_a_session_may_be_given_at_its_time() -> None:
    """N, the average length and document frequencies are taken over what holds at ``at`` (the asking vehicle
    left out), so a version written for a later time never changes a score: replays in another order agree."""
    rng = np.random.default_rng(5)
    vocab = [f"w{i}" for i in range(30)]
    docs = {i: [str(w) for w in rng.choice(vocab, size=int(rng.integers(3, 10)))] for i in range(400)}
    spans = {i: (0, OPEN_END) if i % 4 else (500, OPEN_END) for i in docs}  # every 4th holds only from 500
    terms = ["w2", "w9", "w21"]

    def scores(order: list[int]) -> dict[int, float]:
        index = SeriesLexicalIndex()
        for i in order:
            index.apply(i, "S", f"V{i}", spans[i], " ".join(docs[i]))
        return dict(index.search("S", "V1", terms, len(docs), at=100))

    visible = [i for i in sorted(docs) if spans[i][0] <= 100 and i != 1]
    expected = Bm25Corpus([docs[i] for i in visible]).scores(terms)
    got = scores(sorted(docs))
    assert set(got) == {visible[j] for j in np.flatnonzero(expected > 0)}
    for j, i in enumerate(visible):
        if expected[j] > 0:
            assert got[i] == pytest.approx(expected[j], rel=1e-9)
    # The later versions alone, in any order, change nothing at 100.
    assert scores(sorted(docs, key=lambda i: (spans[i][0], -i))) == pytest.approx(got)


def test_one_pass_and_term_by_term_scoring_agree_to_the_last_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A query's postings are scored in one pass up to ONE_PASS_POSTINGS and term by term beyond it (one
    pass over a million-record series' common terms would hold ~100 MB at once): the two give the same
    rows and the same float scores, with dead documents, masked vehicles, spans and terms none of whose
    documents is visible."""
    rng = np.random.default_rng(11)
    vocab = [f"w{i}" for i in range(60)]
    index = SeriesLexicalIndex()
    for i in range(2500):
        words = [str(w) for w in rng.choice(vocab, size=int(rng.integers(2, 15)))]
        start = int(rng.integers(0, 300))
        index.apply(i, "S", f"V{i % 97}", (start, start + int(rng.integers(1, 400))), " ".join(words))
    for i in range(0, 2500, 7):
        index.apply(i, "S", f"V{i % 97}", None, None)  # dead, postings kept until compaction
    index.apply(9000, "S", "V1", (0, 10), "rare w3")  # "rare": its only document is masked or out of span
    queries = [
        [str(w) for w in rng.choice([*vocab, "rare", "absent"], size=int(rng.integers(1, 25)))] for _ in range(80)
    ]
    ats = [int(a) for a in rng.integers(0, 700, size=len(queries))]

    def run(one_pass_limit: int) -> list[list[tuple[int, float]]]:
        monkeypatch.setattr(lexindex, "ONE_PASS_POSTINGS", one_pass_limit)
        return [index.search("S", f"V{j % 97}", q, 10, at) for j, (q, at) in enumerate(zip(queries, ats, strict=True))]

    one_pass, term_by_term = run(1 << 30), run(0)
    assert one_pass == term_by_term  # tuples of (rowid, float): exact equality
    assert all(type(rowid) is int and type(score) is float for hits in one_pass for rowid, score in hits)
    assert sum(len(r) for r in one_pass) > 400


def _plain_search(
    docs: dict[int, tuple[str, tuple[int, int], list[str]]], exclude: str, terms: list[str], k: int, at: int
) -> list[tuple[int, float]]:
    """The lexical search by its definition, one document and one term at a time in Python floats: BM25
    over the versions visible at ``at`` (the asking vehicle's left out), best first, ties by VIN hash and
    rowid, and every row tied with the k-th on score and VIN hash kept."""
    visible = {r: d for r, d in docs.items() if d[0] != exclude and d[1][0] <= at < d[1][1]}
    if not visible:
        return []
    avg = sum(len(words) for _, _, words in visible.values()) / len(visible) or 1.0
    query = list(dict.fromkeys(terms))
    dfs = {t: sum(1 for _, _, words in visible.values() if t in words) for t in query}
    scored = []
    for rowid, (vin, _, words) in visible.items():
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * len(words) / avg)
        score = 0.0
        for t in query:
            tf = words.count(t)
            if tf:
                idf = math.log1p((len(visible) - dfs[t] + 0.5) / (dfs[t] + 0.5))
                score += idf * tf * (BM25_K1 + 1.0) / (tf + norm)
        if score > 0:
            scored.append((-score, vin_hash(vin), rowid))
    scored.sort()
    if len(scored) > k:
        cut = scored[k - 1][:2]
        scored = scored[:k] + [s for s in scored[k:] if s[:2] == cut]
    return [(rowid, -score) for score, _, rowid in scored]


@pytest.mark.parametrize("one_pass_limit", [1 << 30, 0])
def test_search_gives_bm25_by_its_definition_to_the_last_bit(
    monkeypatch: pytest.MonkeyPatch, one_pass_limit: int
) -> None:
    """Rows and float scores are exactly those of BM25 computed plainly over the visible versions, through
    rewrites, removals (dead documents never show), masked vehicles, spans and many ties at the cut."""
    monkeypatch.setattr(lexindex, "ONE_PASS_POSTINGS", one_pass_limit)
    rng = np.random.default_rng(5)
    vocab = [f"w{i}" for i in range(12)]  # few words, short documents: many equal scores
    index = SeriesLexicalIndex()
    docs: dict[int, tuple[str, tuple[int, int], list[str]]] = {}
    checked = 0
    for step in range(1500):
        rowid, vin = int(rng.integers(0, 300)), f"V{int(rng.integers(0, 4))}"
        if rng.random() < 0.2:
            index.apply(rowid, "S", vin, None, None)
            docs.pop(rowid, None)
        else:
            words = [str(w) for w in rng.choice(vocab, size=int(rng.integers(1, 6)))]
            start = int(rng.integers(0, 100))
            span = (start, start + int(rng.integers(1, 120)))
            index.apply(rowid, "S", vin, span, " ".join(words))
            docs[rowid] = (vin, span, words)
        if step % 5 == 0:
            terms = [str(w) for w in rng.choice([*vocab, "absent"], size=int(rng.integers(1, 6)))]
            exclude, at, k = f"V{int(rng.integers(0, 5))}", int(rng.integers(0, 220)), int(rng.integers(1, 12))
            got = index.search("S", exclude, terms, k, at)
            assert got == _plain_search(docs, exclude, terms, k, at)
            checked += len(got) > k
    assert checked > 20  # the cut kept rows tied with the k-th many times
