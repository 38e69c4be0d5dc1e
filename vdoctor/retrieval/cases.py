"""Similar-case candidates: both channels of a store, fused (``hybrid``), for recall to rerank and check.

The dense channel (``MemoryStore.similar``) and the lexical channel
(``MemoryStore.lexical``), asked together (``MemoryStore.channels``), answer
the same query: the same filters, the same event time. A record found by both is one candidate. A candidate found only
by the lexical channel gets its real dense score (the inner product of its
vector with the query's, computed here), one found only by the dense channel
a lexical score of 0 (``hybrid``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from vdoctor.identity import KeptByIdentity
from vdoctor.records import MemoryRecord
from vdoctor.retrieval.hybrid import DENSE_CANDIDATES, LEXICAL_CANDIDATES, fuse_columns
from vdoctor.stores.base import (
    ChannelHits,
    MemoryStore,
    Scored,
    SimilarQuery,
    channel_hits,
    check_dimensions,
    check_embedders,
)

# Names of a candidate's score parts (``Scored.parts``): each channel's own score, and the fused one.
PART_LEXICAL = "lexical.bm25"
PART_DENSE = "dense.cosine"
PART_FUSED = "fused"


def _as_array(vector: Sequence[float]) -> npt.NDArray[np.float32]:
    array = np.asarray(vector, dtype=np.float32)
    array.flags.writeable = False  # shared by every recall that finds the record
    return array


# A candidate found only by the lexical channel is scored against the query here, and converting its
# vector (a list of 512 floats) cost ~9 us for a dot product of under 1 us. The embedded store hands
# out the same decoded record, and so the same vector, to every recall that finds it (a record taken as
# of an earlier time is a shallow copy: the same vector too): the array is made once per vector.
_ARRAYS: KeptByIdentity[Sequence[float], npt.NDArray[np.float32]] = KeptByIdentity(_as_array, capacity=512)


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
    hits = channel_hits(store, query, dense_k, lexical_k)
    if hits is not None:
        if (found := _hit_columns(query, hits)) is not None:
            return found
        dense, lexical = hits.ranked()
    else:
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
    return _scored_columns(query, records, keys, lexical_scores, dense_scores, only_lexical)


def _hit_columns(query: SimilarQuery, hits: ChannelHits) -> CandidateColumns | None:
    """``candidate_columns`` of a store's unranked hits, without ranking either channel; None when a ranking
    could change which candidates there are (then ask ``hits.ranked()``).

    The candidates are the same, with the same scores, only in another order, which no caller reads
    (the fusion's min-max is taken over all of them, and every ranking after it breaks ties by (vin,
    session_id), unique among them): unless a channel has more passing hits than its k (tied at the k-th,
    the ranking decides which stay) or two rows are versions of the same record (the ranking decides
    which one the candidate is).
    """
    passed = hits.records
    # The hits that passed, the dense ones first, by row id: a row found by both is one candidate.
    at: dict[int, int] = {}
    records: list[MemoryRecord] = []
    dense_scores: list[float] = []
    for rowid, score in hits.dense:
        if (record := passed.get(rowid)) is not None:
            at[rowid] = len(records)
            records.append(record)
            dense_scores.append(score)
    found_dense = len(records)
    if found_dense > hits.dense_k or len(at) < found_dense:  # (the latter: one row twice among the dense hits)
        return None
    lexical_scores: list[float | None] = [None] * found_dense
    found_lexical = 0
    for rowid, score in hits.lexical:
        if (record := passed.get(rowid)) is not None:
            found_lexical += 1
            if (i := at.get(rowid)) is None:
                at[rowid] = len(records)
                records.append(record)
                lexical_scores.append(score)
            elif i < found_dense:
                lexical_scores[i] = score
            else:
                return None  # one row twice among the lexical hits
    keys = [(r.vin, r.session_id) for r in records]
    if found_lexical > hits.lexical_k or len(set(keys)) < len(keys):
        return None
    return _scored_columns(query, records, keys, lexical_scores, dense_scores, records[found_dense:])


def _scored_columns(
    query: SimilarQuery,
    records: list[MemoryRecord],
    keys: list[tuple[str, str]],
    lexical_scores: list[float | None],
    dense_scores: list[float],
    only_lexical: list[MemoryRecord],
) -> CandidateColumns:
    """The candidates with their fused scores, once the lexical-only ones (the last of ``records``, found
    as ``only_lexical``) have their dense scores."""
    found_dense = len(dense_scores)
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
