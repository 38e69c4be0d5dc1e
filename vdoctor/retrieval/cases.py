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

from vdoctor.retrieval.hybrid import DENSE_CANDIDATES, LEXICAL_CANDIDATES, ChannelScores, fuse
from vdoctor.stores.base import MemoryStore, Scored, SimilarQuery, check_dimensions, check_embedders

# Names of a candidate's score parts (``Scored.parts``): each channel's own score, and the fused one.
PART_LEXICAL = "lexical.bm25"
PART_DENSE = "dense.cosine"
PART_FUSED = "fused"


def case_candidates(
    store: MemoryStore,
    query: SimilarQuery,
    lexical_k: int = LEXICAL_CANDIDATES,
    dense_k: int = DENSE_CANDIDATES,
) -> list[Scored]:
    """The union of both channels' top candidates, best fused score first (ties by vin, session id)."""
    dense, lexical = store.channels(query, dense_k, lexical_k)
    found = {(s.record.vin, s.record.session_id): s for s in dense}
    scores = {key: ChannelScores(None, s.score) for key, s in found.items()}
    only_lexical = [s for s in lexical if (s.record.vin, s.record.session_id) not in found]
    # Their vectors were not compared with the query's by the store: the same checks apply here.
    check_dimensions(query, {len(s.record.summary_vec) for s in only_lexical})
    check_embedders(query, {s.record.embedder for s in only_lexical})
    vector = np.asarray(query.vector, dtype=np.float32)
    for s in lexical:
        key = (s.record.vin, s.record.session_id)
        if key in scores:
            scores[key] = ChannelScores(s.score, scores[key].dense)
        else:
            found[key] = s
            dense_score = float(np.asarray(s.record.summary_vec, dtype=np.float32) @ vector)
            scores[key] = ChannelScores(s.score, dense_score)
    fused = fuse(scores)
    out = []
    for key, s in found.items():
        parts = {PART_DENSE: scores[key].dense, PART_FUSED: fused[key]}
        if scores[key].lexical is not None:
            parts[PART_LEXICAL] = float(scores[key].lexical or 0.0)
        out.append(Scored(s.record, fused[key], parts))
    out.sort(key=lambda s: (-s.score, s.record.vin, s.record.session_id))
    return out
