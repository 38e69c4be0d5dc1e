"""Concurrent embedding calls share one model call: the texts of threads that wait are embedded together.

The job runs many diagnosis runs at once on worker threads (``VDOCTOR_CONCURRENCY``
plus ``VDOCTOR_EXTRA_RUNS``), and a model embeds one call at a time (``use.py``). A numpy model
spends most of a short text's time streaming its weight matrices, once per
call whatever the number of texts in it: on USE-m3 (``bench/embed_batching.py``) a
batch costs far less CPU per text than the same texts one call each. So
instead of queueing for the model one by one, callers leave their texts with
a ``vdoctor.combining.Combiner``: a caller that finds the model idle embeds
at once, with whatever other callers left waiting; one that finds it busy
waits, and is served by the next call (up to ``MAX_BATCH`` texts). Nothing
waits for a batch to fill. A text left more than once for the same call is
embedded once. Stored texts (``embed``) and queries (``embed_queries``) go
in separate model calls, since some models embed the two differently (e5's
prefixes). A model error reaches every caller whose texts were in that call.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from vdoctor.combining import Combiner
from vdoctor.embedders.base import Embedder, Vectors

# Texts per model call at most: a caller never waits behind more than this.
MAX_BATCH = 64

Kind = Literal["embed", "embed_queries"]


class CoalescingEmbedder:
    """An embedder whose concurrent callers share model calls (see the module doc)."""

    def __init__(self, model: Embedder, max_batch: int = MAX_BATCH) -> None:
        self.model = model
        self.name = model.name
        self.dim = model.dim
        self.max_batch = max_batch
        self._calls: Combiner[list[str], Vectors] = Combiner(self._run, max_batch)
        # Texts not sent to the model because the same text was in the same call.
        self.repeats = 0

    @property
    def calls(self) -> int:
        """Model calls made."""
        return self._calls.calls

    @property
    def texts(self) -> int:
        """Texts those calls embedded (``texts / calls`` is the mean batch)."""
        return self._calls.size

    @property
    def waiting(self) -> int:
        """Callers waiting for the model."""
        return self._calls.waiting

    def embed(self, texts: list[str]) -> Vectors:
        return self._submit("embed", texts)

    def embed_queries(self, texts: list[str]) -> Vectors:
        return self._submit("embed_queries", texts)

    def _submit(self, kind: Kind, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._calls.submit(kind, list(texts), size=len(texts))

    def _run(self, kind: object, requests: list[list[str]]) -> list[Vectors]:
        """One model call for every request's distinct texts; each request gets its rows."""
        texts = [text for request in requests for text in request]
        # A text asked for more than once in one call goes to the model once: in an alert
        # storm many vehicles open sessions on the same alert text at the same moment, and
        # their recall queries (not yet in the query cache) land in the same call.
        distinct = list(dict.fromkeys(texts))
        rows = self.model.embed(distinct) if kind == "embed" else self.model.embed_queries(distinct)
        self.repeats += len(texts) - len(distinct)
        if len(distinct) < len(texts):
            row_of = {text: i for i, text in enumerate(distinct)}
            rows = rows[[row_of[text] for text in texts]]
        if len(requests) == 1:
            return [rows]
        out, start = [], 0
        for request in requests:
            # A copy, not a view: a caller keeping its rows must not keep the whole batch alive.
            out.append(rows[start : start + len(request)].copy())
            start += len(request)
        return out
