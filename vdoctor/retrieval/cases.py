"""Similar-case candidates: both channels of a store, fused (``hybrid``), for recall to rerank and check.

The dense channel (``MemoryStore.similar``) and the lexical channel
(``MemoryStore.lexical``), asked together (``MemoryStore.channels``), answer
the same query: the same filters, the same event time. A record found by both is one candidate. A candidate found only
by the lexical channel gets its real dense score (the inner product of its
vector with the query's, computed here), one found only by the dense channel
a lexical score of 0 (``hybrid``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from vdoctor.identity import KeptByIdentity
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


def case_candidates(
    store: MemoryStore,
    query: SimilarQuery,
    lexical_k: int = LEXICAL_CANDIDATES,
    dense_k: int = DENSE_CANDIDATES,
) -> list[Scored]:
    """The union of both channels' top candidates, best fused score first (ties by vin, session id)."""
    dense, lexical = store.channels(query, dense_k, lexical_k)
    # Candidate i, by columns: the dense hits in their order, then the lexical-only ones in theirs.
    index: dict[tuple[str, str], int] = {}
    found: list[Scored] = []
    keys: list[tuple[str, str]] = []
    dense_scores: list[float] = []
    for s in dense:
        key = (s.record.vin, s.record.session_id)
        if (i := index.get(key)) is not None:
            found[i], dense_scores[i] = s, s.score
        else:
            index[key] = len(found)
            found.append(s)
            keys.append(key)
            dense_scores.append(s.score)
    lexical_scores: list[float | None] = [None] * len(found)
    only_lexical = [s for s in lexical if (s.record.vin, s.record.session_id) not in index]
    # Their vectors were not compared with the query's by the store: the same checks apply here.
    check_dimensions(query, {len(s.record.summary_vec) for s in only_lexical})
    check_embedders(query, {s.record.embedder for s in only_lexical})
    vector = np.asarray(query.vector, dtype=np.float32)
    for s in lexical:
        key = (s.record.vin, s.record.session_id)
        if (i := index.get(key)) is not None:
            lexical_scores[i] = s.score
        else:
            index[key] = len(found)
            found.append(s)
            keys.append(key)
            lexical_scores.append(s.score)
            dense_scores.append(float(_ARRAYS(s.record.summary_vec) @ vector))
    fused = fuse_columns(lexical_scores, dense_scores)
    # (vin, session_id) is unique among the candidates: the index never decides an order.
    ranked = sorted(zip([-f for f in fused], keys, range(len(found)), strict=True))
    out = []
    for _, _, i in ranked:
        parts = {PART_DENSE: dense_scores[i], PART_FUSED: fused[i]}
        if (lex := lexical_scores[i]) is not None:
            parts[PART_LEXICAL] = float(lex or 0.0)
        out.append(Scored(found[i].record, fused[i], parts))
    return out
