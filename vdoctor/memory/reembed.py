"""Re-embedding long-term memory with the configured embedder (``vdoctor memory reembed``).

Vectors of two models cannot be compared, so a store refuses a search over
records another model embedded (``stores.base.EmbedderMismatch``). After the
embedder changes, ``reembed`` walks every record version (current and
archived) whose vector another embedder made (or an unrecorded one), embeds
what the record is found by (``retrieval.text.record_dense_text``) in batches, and
writes each vector in place with the embedder's id. Nothing else changes: no
new version, no event time (a re-embed changes how a case is found, never
what it says).

Resumable: each batch is written before the next is read, and the stale
list is the store's own query (embedder != the configured one), so a walk
stopped at any point goes on where it stopped. A version re-written by the
job meanwhile is skipped by ``set_vectors`` (its embedder or start moved) and
comes back in a later listing only if it still needs it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from vdoctor.embedders import Embedder, embedder_id
from vdoctor.errors import StoreError
from vdoctor.stores.base import MemoryStore

# Versions per round trip (one embedder batch, one store write): progress shows often.
BATCH = 64
# Rounds in a row in which no listed version could be written before giving up.
MAX_IDLE_ROUNDS = 3


@dataclass
class ReembedReport:
    embedder: str
    stale_at_start: int
    rewritten: int = 0
    skipped: int = 0
    seconds: float = 0.0

    def render(self) -> str:
        rate = self.rewritten / self.seconds if self.seconds > 0 else 0.0
        return (
            f"re-embedded {self.rewritten} of {self.stale_at_start} record versions with {self.embedder} "
            f"({self.skipped} changed meanwhile and left for the next run; {self.seconds:.1f} s, {rate:.1f}/s)"
        )


def reembed(
    store: MemoryStore,
    embedder: Embedder,
    batch: int = BATCH,
    limit: int | None = None,
    progress: Callable[[ReembedReport], None] | None = None,
) -> ReembedReport:
    """Re-embed up to ``limit`` (None: all) stale versions; returns what was done."""
    if batch <= 0:
        raise ValueError("batch must be positive")
    target = embedder_id(embedder)
    report = ReembedReport(target, store.count_stale(target))
    started = time.perf_counter()
    done = 0
    idle_rounds = 0
    while limit is None or done < limit:
        want = batch if limit is None else min(batch, limit - done)
        stale = store.stale_versions(target, want)
        if not stale:
            break
        vectors = embedder.embed([v.text for v in stale])
        written = store.set_vectors(
            [(v, [float(x) for x in vec]) for v, vec in zip(stale, vectors, strict=True)], target
        )
        report.rewritten += written
        report.skipped += len(stale) - written
        done += len(stale)
        report.seconds = time.perf_counter() - started
        if progress is not None:
            progress(report)
        idle_rounds = idle_rounds + 1 if written == 0 else 0
        if idle_rounds >= MAX_IDLE_ROUNDS:
            # Every listed version changed between listing and writing, round after round: stop
            # rather than loop (the versions are still stale; a later run picks them up).
            raise StoreError(
                f"memory reembed: none of {len(stale)} listed versions could be written {idle_rounds} times in a row; "
                "run it again when the store is quieter"
            )
    report.seconds = time.perf_counter() - started
    return report
