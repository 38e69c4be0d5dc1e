"""Concurrent embedding calls share one model call: the texts of threads that wait are embedded together.

The job runs up to ``VDOCTOR_CONCURRENCY`` diagnosis runs at once on worker
threads, and a model embeds one call at a time (``use.py``). A numpy model
spends most of a short text's time streaming its weight matrices, once per
call whatever the number of texts in it: on USE-m3 (``bench/embed_batching.py``) a
batch costs far less CPU per text than the same texts one call each. So
instead of queueing for the model one by one, callers leave their texts here:

- a caller that finds the model idle embeds at once, with whatever other
  callers left waiting (alone: exactly the call it would have made);
- a caller that finds the model busy waits; when the call in progress ends,
  one of the waiting callers embeds every waiting caller's texts in one call
  (up to ``MAX_BATCH`` texts) and hands each caller its rows.

A finished call wakes only the callers it served and the caller that waited
longest (the next to call the model), each on a condition of its own: with
hundreds of runs in flight sharing one interpreter, waking every waiter on
every call made each of them win the GIL again only to wait on.

Nothing waits for a batch to fill: a batch is whatever queued while the model
was busy, so an idle job embeds with no added delay, and a loaded one in
larger batches. Stored texts (``embed``) and queries (``embed_queries``) go in
separate model calls, since some models embed the two differently (e5's
prefixes). A model error reaches every caller whose texts were in that call.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np

from vdoctor.embedders.base import Embedder, Vectors

# Texts per model call at most: a caller never waits behind more than this.
MAX_BATCH = 64

Kind = Literal["embed", "embed_queries"]


@dataclass(eq=False)  # requests are told apart by identity
class _Request:
    kind: Kind
    texts: list[str]
    wake: threading.Condition
    rows: Vectors | None = None
    error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.rows is not None or self.error is not None


class CoalescingEmbedder:
    """An embedder whose concurrent callers share model calls (see the module doc)."""

    def __init__(self, model: Embedder, max_batch: int = MAX_BATCH) -> None:
        self.model = model
        self.name = model.name
        self.dim = model.dim
        self.max_batch = max_batch
        # Model calls made, and texts they embedded (``texts / calls`` is the mean batch).
        self.calls = 0
        self.texts = 0
        self._pending: list[_Request] = []
        self._busy = False
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> Vectors:
        return self._submit("embed", texts)

    def embed_queries(self, texts: list[str]) -> Vectors:
        return self._submit("embed_queries", texts)

    def _submit(self, kind: Kind, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        request = _Request(kind, list(texts), threading.Condition(self._lock))
        with self._lock:
            self._pending.append(request)
            while not request.done:
                if self._busy:
                    request.wake.wait()
                    continue
                # The model is idle: this caller embeds its own texts and what else waits.
                batch = self._take(request)
                self._busy = True
                self._lock.release()
                try:
                    self._run(batch)
                finally:
                    self._lock.acquire()
                    self._busy = False
                    for served in batch:
                        served.wake.notify()
                    if self._pending:
                        self._pending[0].wake.notify()  # the longest waiter calls the model next
        if request.error is not None:
            raise request.error
        return cast(Vectors, request.rows)  # done without an error: rows are set

    def _take(self, first: _Request) -> list[_Request]:
        """The waiting requests of ``first``'s kind, ``first`` first, up to ``max_batch`` texts (``first`` always)."""
        batch, size = [first], len(first.texts)
        for request in self._pending:
            if request is first or request.kind != first.kind or size + len(request.texts) > self.max_batch:
                continue
            batch.append(request)
            size += len(request.texts)
        self._pending = [r for r in self._pending if r not in batch]
        return batch

    def _run(self, batch: list[_Request]) -> None:
        """One model call for the batch; each request gets its rows, or the call's error."""
        texts = [text for request in batch for text in request.texts]
        try:
            rows = self.model.embed(texts) if batch[0].kind == "embed" else self.model.embed_queries(texts)
        except BaseException as e:
            for request in batch:
                request.error = e
            return
        self.calls += 1
        self.texts += len(texts)
        if len(batch) == 1:
            batch[0].rows = rows
            return
        start = 0
        for request in batch:
            # A copy, not a view: a caller keeping its rows must not keep the whole batch alive.
            request.rows = rows[start : start + len(request.texts)].copy()
            start += len(request.texts)
