"""The Mem0 L3 backend (``mem0:///path/to/dir``): a local, in-process Mem0 whose files live in that folder.

Built on the ``mem0ai`` package (``pip install '.[mem0]'``), run with no
network: Qdrant's local mode as the vector store (``<dir>/qdrant``), Mem0's
history database at ``<dir>/history.db``, no LLM (records are written with
``infer=False``: our faithful summaries as they are, no extraction), and
Mem0's telemetry off.

The mapping (``mem0_mapping``): one Mem0 memory per record *version*, with
the version's span of event time in its metadata (``vd_version_from``,
``vd_version_to``, None while current) and every record field beside it; the
VIN is the memory's ``user_id``, every memory has the ``agent_id``
``vdoctor``. Its text is the summary and its embedding the record's own
``summary_vec`` (Mem0's embedder slot answers only with the vector the store
pinned for that text). A write follows ``stores.base`` like every backend: an
upsert that concludes later than the current version began (a merge), or a
recheck that overturns a verdict, adds a memory for the new version and then
closes the old one at the new version's start (``Memory.update`` of its
``vd_version_to``); other writes (re-runs, re-extractions, a first verdict, a
soft delete) update the current version's memory in place. Nothing is deleted.

Mem0's ``Memory.search`` does similar-case recall as of T, every rule in its
metadata filters before its top-k (``mem0_mapping.similar_filters``); the
adapter checks each hit again against the version's span in its key index.
Exact-key lookups and a vehicle's records (own history as of T, history, the
dedup lookup, soft delete) go through that key index, (vin, session_id) ->
the ids and spans of the record's versions, built from one ``get_all`` when
the folder is opened: Mem0 picks its memory ids itself, finds a memory by
metadata only by scanning the whole collection, and its listings have no
order or limit. The README's *Mem0* section tabulates which rule runs where.
The read-only views for people are in ``mem0_audit``.

Qdrant's local mode locks the folder to one client: one process at a time may
open a ``mem0://`` folder. Within a process, every store opened on the same
folder shares one Mem0 instance (and its key index), used under one lock
(neither Mem0's local Qdrant nor the index are thread-safe).
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from vdoctor.errors import ConfigError, StoreError
from vdoctor.records import MemoryRecord, utc_now
from vdoctor.stores.base import (
    Scored,
    SimilarQuery,
    check_dimensions,
    check_embedders,
    effective_at,
    invalidated_earlier,
    newest_duplicate,
    newest_first,
    recheck_write,
    separate_channels,
    stale_recheck,
    upsert_version_from,
)
from vdoctor.stores.mem0_audit import Mem0Audit
from vdoctor.stores.mem0_mapping import (
    QUERY_TEXT,
    epoch,
    from_epoch,
    from_item,
    key,
    similar_filters,
)
from vdoctor.stores.mem0_retrieval import Mem0Retrieval

log = logging.getLogger(__name__)

from vdoctor.stores.mem0_folder import (  # noqa: E402
    MARKER,
    _acquire,
    _check_user_id,
    _Record,
    _release,
)


class Mem0Store(Mem0Audit, Mem0Retrieval):
    """The MemoryStore protocol over a local Mem0 (see the module docstring for the mapping)."""

    def __init__(self, path: Path, read_only: bool = False) -> None:
        """Open the folder (created by the first write); ``read_only`` opens an existing one for reads only.

        A read-only store refuses every write before it reaches Mem0, and
        leaves a span an interrupted write left wrong to the next writer
        (it reads the repaired span from the key index).
        """
        self.path = path
        self.read_only = read_only
        if read_only and not (path / MARKER).is_file():
            raise StoreError(f"cannot open the mem0 store at {path} read-only: no such store (no {MARKER})")
        self._folder = _acquire(path)
        self._closed = False
        if not read_only:
            with self._folder.lock:
                self._folder.write_repairs()

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise StoreError(f"mem0 store {self.path} is read-only: refusing {what}")

    # -- writes ----------------------------------------------------------------------------

    def _new_version(self, row: _Record, record: MemoryRecord, start: int, old: MemoryRecord) -> None:
        """Archive the current version ``old`` at ``start`` and make ``record`` the current one from then on.

        The new memory is added first: a process stopped before the old one is
        closed leaves two open versions, which the next open repairs.
        """
        new = self._folder.add(record, start)
        row.current.end = start
        self._folder.write(old, row.current)
        row.archived.append(row.current)
        row.current = new

    def _upsert(self, record: MemoryRecord) -> None:
        folder = self._folder
        folder.ensure(len(record.summary_vec))
        row = folder.keys.get((record.vin, record.session_id))
        if row is None:
            _check_user_id(record.vin)
            version = folder.add(record, epoch(upsert_version_from(None, record.concluded_at)))
            folder.keys[(record.vin, record.session_id)] = _Record(version)
            folder.by_vin.setdefault(record.vin, []).append(record.session_id)
            return
        start = epoch(upsert_version_from(from_epoch(row.current.start), record.concluded_at))
        if start > row.current.start:
            self._new_version(row, record, start, folder.read(row.current))
        else:
            folder.write(record, row.current)

    def upsert(self, record: MemoryRecord) -> None:
        self.upsert_many([record])

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        # Mem0 has no batch write for memories with different metadata: one add or update each.
        self._writable("upsert")
        with self._folder.lock:
            for record in records:
                self._upsert(record)

    def set_recheck(self, vin: str, session_id: str, ok: bool, at: datetime) -> bool:
        self._writable("set_recheck")
        folder = self._folder
        with folder.lock:
            row = folder.keys.get((vin, session_id))
            if row is None:
                return False
            cur = folder.read(row.current)
            if stale_recheck(bool(cur.merged_sessions), cur.concluded_at, at):
                return False
            change = recheck_write(cur.recheck_ok, cur.verified_ts, from_epoch(row.current.start), ok, at)
            if change.noop:
                return True
            update = {"recheck_ok": ok, "verified_ts": change.verified_ts, "updated_at": utc_now()}
            updated = cur.model_copy(update=update)
            if change.archive:
                self._new_version(row, updated, epoch(change.version_from), cur)
            else:
                folder.write(updated, row.current)
            return True

    def soft_delete(self, vin: str, at: datetime) -> int:
        self._writable("soft_delete")
        folder = self._folder
        with folder.lock:
            changed = 0
            for session_id in folder.by_vin.get(vin, []):
                row = folder.keys[(vin, session_id)]
                cur = folder.read(row.current)
                start = from_epoch(row.current.start)
                if cur.valid or invalidated_earlier(cur.invalid_ts, start, at):
                    invalid = effective_at(at, start)
                    update = {"valid": False, "invalid_ts": invalid, "updated_at": utc_now()}
                    folder.write(cur.model_copy(update=update), row.current)
                    changed += 1
            return changed

    # -- reads ------------------------------------------------------------------------------

    def _current(self, vin: str) -> list[MemoryRecord]:
        """The current version of every record of the VIN, read by id from the key index."""
        folder = self._folder
        with folder.lock:
            return [folder.read(folder.keys[(vin, sid)].current) for sid in folder.by_vin.get(vin, [])]

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        folder = self._folder
        with folder.lock:
            row = folder.keys.get((vin, session_id))
            return None if row is None else folder.read(row.current)

    def own_history(self, vin: str, since: datetime, limit: int, as_of: datetime) -> list[MemoryRecord]:
        folder, at = self._folder, epoch(as_of)
        with folder.lock:
            versions = [v for sid in folder.by_vin.get(vin, []) if (v := folder.keys[(vin, sid)].at(at))]
            seen = [folder.read(v).as_of(as_of) for v in versions]
        rows = [r for r in seen if r.vin == vin and r.valid and since <= r.concluded_at <= as_of]
        return [r.model_copy(update={"source": ""}) for r in newest_first(rows, max(limit, 0))]

    def history(self, vin: str) -> list[MemoryRecord]:
        records = self._current(vin)
        return newest_first(records, len(records))

    def find_duplicate(
        self, vin: str, root_cause: str, since: datetime, until: datetime | None = None
    ) -> MemoryRecord | None:
        return newest_duplicate(self._current(vin), root_cause, since, until)

    def channels(self, query: SimilarQuery, dense_k: int, lexical_k: int) -> tuple[list[Scored], list[Scored]]:
        return separate_channels(self, query, dense_k, lexical_k)

    def similar(self, query: SimilarQuery) -> list[Scored]:
        folder = self._folder
        if query.k <= 0:
            return []
        vector = [float(x) for x in query.vector]
        with folder.lock:
            if folder.memory is None:
                return []
            # Another model's vectors: refused (EmbedderMismatch), as every backend does.
            check_dimensions(query, {folder.dim})
            with folder.embedder.pinned(QUERY_TEXT, vector), folder.guard("search"):
                out = folder.memory.search(QUERY_TEXT, top_k=query.k, filters=similar_filters(query), threshold=0.0)
            at, hits = epoch(query.as_of), []
            for item in out["results"]:
                record, version = from_item(item)
                # The key index's span: it holds a repair a read-only store has not written.
                version = folder.span(record.vin, record.session_id, version)
                record = record.as_of(query.as_of).model_copy(update={"source": ""})
                # Mem0 filtered already; checked again so that a filter it dropped can never leak a case.
                if version.holds(at) and query.admits(record):
                    hits.append(Scored(record, float(item["score"])))
        # Mem0's search cannot filter on "another embedder": the hits carry theirs, checked here.
        check_embedders(query, {s.record.embedder for s in hits})
        hits.sort(key=lambda s: -s.score)
        return hits[: query.k]

    def _list(self, filters: dict[str, Any]) -> list[MemoryRecord]:
        """The current versions among the memories matching Mem0 metadata filters (unordered)."""
        folder = self._folder
        with folder.lock:
            items = folder.listing(filters)
            current = {row.current.memory_id for row in folder.keys.values()}
        return [from_item(item)[0] for item in items if str(item["id"]) in current]

    def by_prompt_version(self, prompt_version: str, limit: int) -> list[MemoryRecord]:
        found = self._list({key("prompt_version"): prompt_version, key("valid"): True})
        found.sort(key=lambda r: (r.vin, r.session_id))
        return found[: max(limit, 0)]

    def prompt_versions(self) -> list[str]:
        return sorted({r.prompt_version for r in self._list({key("valid"): True})})

    def count(self) -> int:
        with self._folder.lock:
            return len(self._folder.keys)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _release(self._folder)


def open_mem0(url: str, read_only: bool = False) -> Mem0Store:
    """``mem0:///relative/dir`` or ``mem0:////absolute/dir`` (as sqlite URLs are read)."""
    path = url[len("mem0:///") :] if url.startswith("mem0:///") else ""
    if not path.strip("/"):
        # Not the URL itself: whatever sits between mem0:// and the folder could be credentials.
        raise ConfigError(
            "this mem0 memory URL names no folder: give the folder after mem0:/// (mem0:///relative/dir or "
            "mem0:////absolute/dir, e.g. mem0:///var/lib/vdoctor/mem0)"
        )
    return Mem0Store(Path(path).resolve(), read_only=read_only)
