"""One contract over every knowledge store in the registry: what knowledge search relies on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from vdoctor.errors import UnknownStoreScheme
from vdoctor.knowledge.chunks import Chunk
from vdoctor.knowledge.stores import SCHEMES, KnowledgeStore, open_knowledge_store

pytestmark = pytest.mark.contract

FACTORIES: dict[str, Callable[[Path], str]] = {
    "memory": lambda tmp: "memory://",
    "sqlite": lambda tmp: f"sqlite:///{tmp}/knowledge.db",
}


@pytest.fixture(params=sorted(FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KnowledgeStore]:
    opened = open_knowledge_store(FACTORIES[request.param](tmp_path))
    yield opened
    opened.close()


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def chunk(cid: str, scope: str = "dtc:generic", version: str = "v1", codes: tuple[str, ...] = ()) -> Chunk:
    return Chunk(chunk_id=cid, scope=scope, version=version, text=f"{cid}: text", codes=list(codes), tokens=3)


def test_every_registered_scheme_is_covered() -> None:
    assert set(FACTORIES) == set(SCHEMES)


def test_an_unknown_scheme_names_the_valid_ones() -> None:
    with pytest.raises(UnknownStoreScheme, match="valid schemes: " + ", ".join(SCHEMES)):
        open_knowledge_store("redis://x")


def test_candidates_are_the_top_k_by_inner_product(store: KnowledgeStore) -> None:
    chunks = [chunk("a"), chunk("b"), chunk("c"), chunk("d")]
    vectors = np.stack([unit(1, 0, 0), unit(1, 1, 0), unit(0, 1, 0), unit(-1, 0, 0)])
    assert store.add(chunks, vectors) == 4
    hits = store.candidates(unit(1, 0.2, 0), 3, None, None)
    assert [h.chunk.chunk_id for h in hits] == ["a", "b", "c"]
    assert hits[0].score == pytest.approx(float(unit(1, 0, 0) @ unit(1, 0.2, 0)), abs=1e-6)
    assert hits[0].score >= hits[1].score >= hits[2].score


def test_equal_scores_come_in_chunk_id_order(store: KnowledgeStore) -> None:
    store.add([chunk("z"), chunk("m"), chunk("a")], np.stack([unit(1, 0), unit(1, 0), unit(1, 0)]))
    assert [h.chunk.chunk_id for h in store.candidates(unit(1, 0), 3, None, None)] == ["a", "m", "z"]


def test_scope_and_version_filter_before_ranking(store: KnowledgeStore) -> None:
    store.add(
        [chunk("g1"), chunk("f1", scope="dtc:FORD"), chunk("g2", version="v2")],
        np.stack([unit(0, 1), unit(1, 0), unit(1, 0.1)]),
    )
    assert [h.chunk.chunk_id for h in store.candidates(unit(1, 0), 5, "dtc:generic", "v1")] == ["g1"]
    assert [h.chunk.chunk_id for h in store.candidates(unit(1, 0), 5, "dtc:FORD", None)] == ["f1"]
    assert [h.chunk.chunk_id for h in store.candidates(unit(1, 0), 5, None, "v2")] == ["g2"]
    assert store.count() == 3 and store.count("dtc:FORD") == 1


def test_a_chunk_id_written_again_is_replaced(store: KnowledgeStore) -> None:
    store.add([chunk("a", codes=("P0A7F",))], np.stack([unit(1, 0)]))
    store.add([chunk("a", codes=("P0420",))], np.stack([unit(0, 1)]))
    assert store.count() == 1
    (hit,) = store.candidates(unit(0, 1), 5, None, None)
    assert hit.chunk.codes == ["P0420"] and hit.score == pytest.approx(1.0, abs=1e-6)


def test_chunks_are_found_by_the_codes_they_hold(store: KnowledgeStore) -> None:
    store.add(
        [
            chunk("a", codes=("P0A7F", "P0A80")),
            chunk("b", codes=("P0420",)),
            chunk("c", scope="dtc:FORD", codes=("P0420",)),
        ],
        np.stack([unit(1, 0), unit(0, 1), unit(1, 1)]),
    )
    assert sorted(c.chunk_id for c in store.with_codes({"P0420"}, None, None)) == ["b", "c"]
    assert [c.chunk_id for c in store.with_codes({"P0420"}, "dtc:generic", None)] == ["b"]
    assert [c.chunk_id for c in store.with_codes({"P0A80", "U0100"}, None, "v1")] == ["a"]
    assert store.with_codes({"U0100"}, None, None) == []
