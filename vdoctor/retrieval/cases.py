"""Similar-case candidates: both channels of a store, fused (``hybrid``), for recall to rerank and check.

The dense channel (``MemoryStore.similar``) and the lexical channel
(``MemoryStore.lexical``), asked together (``MemoryStore.channels``), answer
the same query: the same filters, the same event time. A record found by both is one candidate. A candidate found only
by the lexical channel gets its real dense score (the inner product of its
vector with the query's, computed here), one found only by the dense channel
a lexical score of 0 (``hybrid``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from vdoctor.identity import KeptByIdentity
from vdoctor.records import MemoryRecord
from vdoctor.retrieval.hybrid import DENSE_CANDIDATES, LEXICAL_CANDIDATES, fuse_columns
from vdoctor.stores.base import MemoryStore, Scored, SimilarQuery, check_dimensions, check_embedders

# Names of a candidate's score parts (``Scored.parts``): each channel's own score, and the fused one.
PART_LEXICAL = "lexical.bm25"
PART_DENSE = "dense.cosine"
PART_FUSED = "fused"


def _as_array(vector: list[float]) -> npt.NDArray[np.float32]:
    array = np.asarray(vector, dtype=np.float32)
    array.flags.writeable = False  # shared by every recall that finds the record
    return array


# A candidate found only by the lexical channel is scored against the query here, and converting its
# vector (a list of 512 floats) cost ~9 us for a dot product of under 1 us. The embedded store hands
# out the same decoded record, and so the same list, to every recall that finds it (a record taken as
# of an earlier time is a shallow copy: the same list too): the array is made once per list.
_ARRAYS: KeptByIdentity[list[float], npt.NDArray[np.float32]] = KeptByIdentity(_as_array, capacity=512)


@dataclass
class CandidateColumns:
    """Both channels' candidates by columns, unranked (the dense hits, then the lexical-only ones): candidate i is
    ``records[i]``.

    ``keys[i]`` is its (vin, session_id), unique among the candidates; ``lexical[i]`` its BM25 (None: not a
    lexical hit), ``dense[i]`` its dense score and ``fused[i]`` its fused score (``hybrid.fuse_columns``).
    """

    records: list[MemoryRecord]
    keys: list[tuple[str, str]]
    lexical: list[float | None]
    dense: list[float]
    fused: list[float]

    def parts(self, i: int) -> dict[str, float]:
        """Candidate i's score parts (``Scored.parts``)."""
        parts = {PART_DENSE: self.dense[i], PART_FUSED: self.fused[i]}
        if (lex := self.lexical[i]) is not None:
            parts[PART_LEXICAL] = float(lex or 0.0)
        return parts


def candidate_columns(
    store: MemoryStore,
    query: SimilarQuery,
    lexical_k: int = LEXICAL_CANDIDATES,
    dense_k: int = DENSE_CANDIDATES,
) -> CandidateColumns:
    """The union of both channels' top candidates with their fused scores, unranked (``case_candidates`` ranks)."""
    dense, lexical = store.channels(query, dense_k, lexical_k)
    # The dense hits in their order, then the lexical-only ones in theirs.
    index: dict[tuple[str, str], int] = {}
    records: list[MemoryRecord] = []
    keys: list[tuple[str, str]] = []
    dense_scores: list[float] = []
    for s in dense:
        record = s.record
        key = (record.vin, record.session_id)
        if (i := index.get(key)) is not None:
            records[i], dense_scores[i] = record, s.score
        else:
            index[key] = len(records)
            records.append(record)
            keys.append(key)
            dense_scores.append(s.score)
    found_dense = len(records)
    lexical_scores: list[float | None] = [None] * found_dense
    only_lexical: list[MemoryRecord] = []
    for s in lexical:
        record = s.record
        key = (record.vin, record.session_id)
        if (i := index.get(key)) is None or i >= found_dense:
            only_lexical.append(record)
        if i is not None:
            lexical_scores[i] = s.score
        else:
            index[key] = len(records)
            records.append(record)
            keys.append(key)
            lexical_scores.append(s.score)
    if only_lexical:
        # Their vectors were not compared with the query's by the store: the same checks apply here.
        check_dimensions(query, {len(r.summary_vec) for r in only_lexical})
        check_embedders(query, {r.embedder for r in only_lexical})
        vector = np.asarray(query.vector, dtype=np.float32)
        # ``a.dot(v)``: the same BLAS dot product as ``a @ v``, with less call overhead.
        dense_scores += [float(_ARRAYS(r.summary_vec).dot(vector)) for r in records[found_dense:]]
    return CandidateColumns(records, keys, lexical_scores, dense_scores, fuse_columns(lexical_scores, dense_scores))


def case_candidates(
    store: MemoryStore,
    query: SimilarQuery,
    lexical_k: int = LEXICAL_CANDIDATES,
    dense_k: int = DENSE_CANDIDATES,
) -> list[Scored]:
    """The union of both channels' top candidates, best fused score first (ties by vin, session id)."""
    found = candidate_columns(store, query, lexical_k, dense_k)
    fused = found.fused
    # (vin, session_id) is unique among the candidates: the index never decides an order.
    ranked = sorted(zip([-f for f in fused], found.keys, range(len(fused)), strict=True))
    return [Scored(found.records[i], fused[i], found.parts(i)) for _, _, i in ranked]
