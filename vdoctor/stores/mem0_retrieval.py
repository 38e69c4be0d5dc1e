"""The lexical channel and re-embedding of the mem0 backend; mixed into ``Mem0Store``.

Mem0 has no lexical search and cannot filter on "another embedder", so both
read the memories with one ``get_all`` (of a series, or of the folder) and
work in the client:

- ``lexical``: exact BM25 (``retrieval``) over the versions a session may be
  given (the version holding at the query's time, ``SimilarQuery.admits``),
  as the in-memory twin does: a scan of the series' memories per query;
- ``count_stale``/``stale_versions``/``set_vectors`` (``vdoctor memory
  reembed``): every version whose ``embedder`` is another one, rewritten in
  place (``Memory.update`` of its memory: text, metadata and vector) unless
  it changed since it was listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord
from vdoctor.retrieval.bm25 import Bm25Corpus, top_scored
from vdoctor.retrieval.text import record_dense_text, record_text
from vdoctor.retrieval.tokens import query_terms, tokens
from vdoctor.stores.base import Scored, SimilarQuery, StaleVersion
from vdoctor.stores.mem0_mapping import Version, epoch, from_epoch, from_item, key

if TYPE_CHECKING:
    from vdoctor.stores.mem0_folder import _Folder


class Mem0Retrieval:
    """``MemoryStore.lexical`` and the re-embedding methods for ``Mem0Store``."""

    path: Path
    read_only: bool
    _folder: _Folder

    def _writable(self, what: str) -> None: ...

    def _series_versions(self, series: str) -> list[tuple[MemoryRecord, Version]]:
        """Every version (current and archived) of the series' records, with the key index's span."""
        folder = self._folder
        with folder.lock:
            found = []
            for item in folder.listing({key("series"): series}):
                record, version = from_item(item)
                found.append((record, folder.span(record.vin, record.session_id, version)))
        return found

    def lexical(self, query: SimilarQuery) -> list[Scored]:
        """Exact BM25 over the versions a session may be given, in the client.

        Mem0 has no lexical search: one ``get_all`` of the series' memories,
        the same admission as ``similar`` (the version holding at the query's
        time, ``query.admits``), then BM25 of each version's indexed text
        (``retrieval``) over the admitted set, as the in-memory twin does.
        """
        terms = query_terms(query.text)
        if query.k <= 0 or not terms:
            return []
        at = epoch(query.as_of)
        admitted = []
        for record, version in self._series_versions(query.series):
            seen = record.as_of(query.as_of).model_copy(update={"source": ""})
            if version.holds(at) and query.admits(seen):
                admitted.append(seen)
        if not admitted:
            return []
        scores = Bm25Corpus([tokens(record_text(r)) for r in admitted]).scores(terms)
        return [Scored(admitted[i], score) for i, score in top_scored(scores, query.k)]

    # -- re-embedding (``vdoctor memory reembed``) -----------------------------------------

    def _stale(self, embedder: str) -> list[tuple[StaleVersion, Version]]:
        folder = self._folder
        with folder.lock:
            found = []
            for item in folder.listing({}):
                record, stored = from_item(item)
                if record.embedder == embedder:
                    continue
                version = folder.span(record.vin, record.session_id, stored)
                archived = version.end is not None
                stale = StaleVersion(record.vin, record.session_id, from_epoch(version.start), archived,
                                     record_dense_text(record), record.embedder)  # fmt: skip
                found.append((stale, version))
        found.sort(key=lambda f: (f[0].vin, f[0].session_id, f[0].version_from))
        return found

    def count_stale(self, embedder: str) -> int:
        return len(self._stale(embedder))

    def stale_versions(self, embedder: str, limit: int) -> list[StaleVersion]:
        return [stale for stale, _ in self._stale(embedder)[: max(limit, 0)]]

    def set_vectors(self, rows: list[tuple[StaleVersion, list[float]]], embedder: str) -> int:
        """Rewrite each listed version's memory with its new vector, unless it changed since it was listed."""
        self._writable("set_vectors")
        folder = self._folder
        done = 0
        with folder.lock:
            if rows and len(rows[0][1]) != folder.dim:
                raise StoreError(
                    f"mem0 store {self.path} holds {folder.dim}-dimensional vectors (Qdrant fixes a collection's "
                    f"dimension); re-embedding to {len(rows[0][1])} dimensions needs a new folder"
                )
            for stale, vector in rows:
                row = folder.keys.get((stale.vin, stale.session_id))
                if row is None:
                    continue
                start = epoch(stale.version_from)
                version = next((v for v in [row.current, *row.archived] if v.start == start), None)
                if version is None or (version.end is not None) != stale.archived:
                    continue
                record = folder.read(version)
                if record.embedder != stale.embedder:
                    continue  # re-written since it was listed
                folder.write(record.model_copy(update={"summary_vec": list(vector), "embedder": embedder}), version)
                done += 1
        return done
