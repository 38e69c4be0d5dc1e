"""Query vectors kept by text: a fleet asks memory the same things again and again.

A session's recall query is its opening alert's text and its codes'
definitions, and a fleet's alert texts come from the vehicles' own alert
catalogue: the same few hundred phrasings recur across thousands of vehicles.
A model embeds a text to the same vector every time (the embedder contract),
so the vector of a query seen before is taken from here instead of running
the model again (or, for a remote embedder, instead of a round trip). Stored
texts (``embed``: case summaries, knowledge chunks) carry readings and rarely
repeat, and go to the model every time.

Bounded (least recently used first out); shared by every thread of the
process, as the model is. Behind it, a file can share the vectors with the
machine's other processes and with the next run (``query_file.py``): a text
this process has not seen is looked up there before the model runs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from vdoctor.embedders.base import Embedder, Vectors
from vdoctor.embedders.query_file import QueryVectorFile

# Query vectors kept per process: 4096 x 512 float32 is 8 MB.
QUERY_CACHE_SIZE = 4096


class QueryCache:
    """An embedder whose ``embed_queries`` remembers the last ``size`` texts' vectors."""

    def __init__(self, model: Embedder, size: int = QUERY_CACHE_SIZE, shared: QueryVectorFile | None = None) -> None:
        self.model = model
        self.name = model.name
        self.dim = model.dim
        self.size = size
        self.shared = shared
        self.hits = 0
        self.misses = 0  # texts this process had not kept: found in the shared file or embedded by the model
        self.shared_hits = 0
        self._vectors: OrderedDict[str, Vectors] = OrderedDict()
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> Vectors:
        return self.model.embed(texts)

    def embed_queries(self, texts: list[str]) -> Vectors:
        if len(texts) == 1:
            return self._one(texts[0])
        return self._many(texts)

    def _one(self, text: str) -> Vectors:
        """``_many([text])``, the usual call (a session's recall query): the same vector, counts and cache
        order, with less bookkeeping. With the model in a child process it runs just after the thread wakes
        from the model's call, on cold caches, where ``_many``'s steps cost ~30 us."""
        with self._lock:
            row = self._vectors.get(text)
            if row is not None:
                self._vectors.move_to_end(text)
                self.hits += 1
            else:
                self.misses += 1
        if row is None:
            row = self._keep(self._fetch([text]))[text]
        return row.reshape(1, -1).copy()  # what np.stack([row]) gives: a new array of its own

    def _many(self, texts: list[str]) -> Vectors:
        rows: list[Vectors | None] = []
        with self._lock:
            for text in texts:
                row = self._vectors.get(text)
                if row is not None:
                    self._vectors.move_to_end(text)
                rows.append(row)
            missing = sorted({t for t, row in zip(texts, rows, strict=True) if row is None})
            self.misses += len(missing)
            self.hits += len(texts) - len(missing)
        if missing:
            fresh = self._keep(self._fetch(missing))
            rows = [fresh[t] if row is None else row for t, row in zip(texts, rows, strict=True)]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([row for row in rows if row is not None])

    def _fetch(self, texts: list[str]) -> dict[str, Vectors]:
        """The vectors of texts this process has not kept: from the shared file, the rest from the model
        (and then into the file)."""
        found = self.shared.get(self.name, self.dim, texts) if self.shared is not None else {}
        if found:
            with self._lock:
                self.shared_hits += len(found)
        rest = [t for t in texts if t not in found]
        if rest:
            # A model that gives other than one row per text fails the call (zip's strict).
            fresh = dict(zip(rest, self.model.embed_queries(rest), strict=True))
            if self.shared is not None:
                self.shared.put(self.name, self.dim, fresh)
            found.update(fresh)
        return found

    def flush(self) -> None:
        """Write the query vectors waiting for the shared file (``QueryVectorFile.flush``)."""
        if self.shared is not None:
            self.shared.flush()

    def _keep(self, fresh: dict[str, Vectors]) -> dict[str, Vectors]:
        """Keep the model's new rows (newest last; the least recently used go past ``size``); returns the kept rows."""
        kept: dict[str, Vectors] = {}
        with self._lock:
            for text, row in fresh.items():
                kept[text] = row.copy()  # not a view that would keep the whole batch alive
                kept[text].setflags(write=False)
                self._vectors[text] = kept[text]
                self._vectors.move_to_end(text)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        return kept
