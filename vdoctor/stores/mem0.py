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

import json
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from vdoctor.errors import ConfigError, StoreError
from vdoctor.records import MemoryRecord, utc_now
from vdoctor.stores.base import (
    Scored,
    SimilarQuery,
    effective_at,
    newest_first,
    recheck_write,
    upsert_version_from,
)
from vdoctor.stores.mem0_audit import Mem0Audit
from vdoctor.stores.mem0_mapping import (
    AGENT_ID,
    FORMAT,
    QUERY_TEXT,
    Facts,
    NoLlm,
    PinnedEmbedder,
    Version,
    epoch,
    from_epoch,
    from_item,
    key,
    similar_filters,
    to_metadata,
    version_of,
)

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install '.[mem0]'"
COLLECTION = "vdoctor_cases"
# The folder's own description: format, and the collection's vector dimension,
# fixed when the first record is written.
MARKER = "vdoctor-mem0.json"
# Mem0 builds OpenAI clients for its embedder and LLM slots before we replace
# them; they get a placeholder key and the discard port, so that no real key is
# read from the environment and nothing could ever leave the machine.
_UNUSED_KEY = "unused-offline"
_UNUSED_URL = "http://127.0.0.1:9/v1"

_import_lock = threading.Lock()


def _memory_class(home: Path) -> Any:
    """Import mem0 with its telemetry off, and return ``mem0.Memory``.

    Mem0 reads ``MEM0_TELEMETRY`` and ``MEM0_DIR`` (where it writes its
    config.json) once, at import. Both are set for the import only and put back
    afterwards, so the user's environment is left as it was; a ``MEM0_DIR``
    the user set is kept. If mem0 was imported earlier with telemetry on, the
    flags it reads later are switched off as well.
    """
    with _import_lock:
        saved = {name: os.environ.get(name) for name in ("MEM0_TELEMETRY", "MEM0_DIR")}
        os.environ["MEM0_TELEMETRY"] = "False"
        if not saved["MEM0_DIR"]:
            os.environ["MEM0_DIR"] = str(home)
        try:
            import mem0.memory.main as mem0_main  # type: ignore[import-untyped]
            import mem0.memory.telemetry as mem0_telemetry  # type: ignore[import-untyped]
        except ImportError as e:
            raise ConfigError(f"the mem0 backend needs the mem0ai package: {INSTALL_HINT} ({e})") from e
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        mem0_telemetry.MEM0_TELEMETRY = False
        mem0_main.MEM0_TELEMETRY = False
        # Mem0 logs every update with the memory's text at INFO, and Qdrant every
        # insert: case text in logs, and in a Flink worker each record crosses to
        # the JVM. Warnings only, unless the user configured the logger.
        mem0_log = logging.getLogger("mem0")
        if mem0_log.level == logging.NOTSET:
            mem0_log.setLevel(logging.WARNING)
        return mem0_main.Memory


@dataclass
class _Record:
    """The key index's entry for one record: its current version and the versions it replaced."""

    current: Version
    archived: list[Version] = field(default_factory=list)

    def at(self, t: int) -> Version | None:
        """The version current at event time ``t`` (None before the record existed)."""
        if self.current.start <= t:
            return self.current
        return next((v for v in self.archived if v.holds(t)), None)


class _Folder:
    """One Mem0 instance per folder per process, its key index, and the lock all use of it goes through."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.RLock()
        self.users = 0
        self.memory: Any = None
        self.dim = 0
        self.embedder = PinnedEmbedder()
        self.keys: dict[tuple[str, str], _Record] = {}
        self.by_vin: dict[str, list[str]] = {}
        # Spans an interrupted write left wrong: fixed in the index on open, written by the first writer.
        self.unrepaired: list[Version] = []
        marker = path / MARKER
        if marker.exists():
            try:
                info = json.loads(marker.read_text(encoding="utf-8"))
                dim, fmt = int(info["dim"]), int(info["format"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise StoreError(f"mem0 store {path}: unreadable {MARKER}: {e}") from e
            if fmt != FORMAT:
                raise StoreError(
                    f"mem0 store {path} was written in format {fmt} (one memory per record, before record "
                    f"versions were kept); this build reads format {FORMAT}: start a new folder"
                )
            self._open(dim)

    @contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Wrap whatever mem0 or Qdrant raise (many types) once, here."""
        try:
            yield
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - the foreign library boundary
            text = str(e)
            if "already accessed by another instance" in text:
                text = (
                    "the folder is open in another process (Qdrant's local mode allows one process "
                    "per folder; stop the other process, or use sqlite://, mysql:// or doris://)"
                )
            raise StoreError(f"mem0 store {self.path}: {what} failed: {text}") from e

    def _open(self, dim: int) -> None:
        memory_class = _memory_class(self.path / ".mem0")
        qdrant = {"path": str(self.path / "qdrant"), "collection_name": COLLECTION, "embedding_model_dims": dim}
        config = {
            "vector_store": {"provider": "qdrant", "config": qdrant},
            "embedder": {
                "provider": "openai",
                "config": {"api_key": _UNUSED_KEY, "openai_base_url": _UNUSED_URL, "embedding_dims": dim},
            },
            "llm": {"provider": "openai", "config": {"api_key": _UNUSED_KEY, "openai_base_url": _UNUSED_URL}},
            "history_db_path": str(self.path / "history.db"),
        }
        with self.guard("open"):
            memory = memory_class.from_config(config)
            memory.embedding_model = self.embedder
            memory.llm = NoLlm()
            self.memory, self.dim = memory, dim
            self._load_index()

    def total(self) -> int:
        """Memories in the collection (every version of every record)."""
        return int(self.memory.vector_store.col_info().points_count or 0)

    def _load_index(self) -> None:
        total = self.total()
        if total == 0:
            return
        listed = self.memory.get_all(filters={"agent_id": AGENT_ID}, top_k=total + 1, show_expired=True)
        found: dict[tuple[str, str], list[Version]] = {}
        for item in listed["results"]:
            vin, session_id, version = version_of(item)
            found.setdefault((vin, session_id), []).append(version)
        for (vin, session_id), versions in found.items():
            versions.sort(key=lambda v: v.start)
            self._repair(versions)
            self.keys[(vin, session_id)] = _Record(versions[-1], versions[:-1])
            self.by_vin.setdefault(vin, []).append(session_id)

    def _repair(self, versions: list[Version]) -> None:
        """Make a record's spans contiguous again, each version ending where the next begins, the newest open.

        A merge adds the new version's memory before it closes the old one: a
        process that stopped in between leaves two open versions, and the
        older one is closed here, as the write would have done: in the index
        at once, in Mem0 by the first store opened for writing
        (``write_repairs``), so that a reader never writes.
        """
        ends = [v.start for v in versions[1:]] + [None]
        for version, end in zip(versions, ends, strict=True):
            if version.end != end:
                log.warning("mem0 store %s: memory %s ends at %s, not %s (an interrupted write); repaired",
                            self.path, version.memory_id, version.end, end)  # fmt: skip
                version.end = end
                self.unrepaired.append(version)

    def span(self, vin: str, session_id: str, stored: Version) -> Version:
        """The index's entry for a version read from Mem0 (``stored``, if the index does not know it)."""
        row = self.keys.get((vin, session_id))
        versions = [] if row is None else [row.current, *row.archived]
        return next((v for v in versions if v.memory_id == stored.memory_id), stored)

    def write_repairs(self) -> None:
        while self.unrepaired:
            version = self.unrepaired[0]
            self.write(self.read(version), version)
            self.unrepaired.pop(0)

    def add(self, record: MemoryRecord, start: int) -> Version:
        """Add a memory for the record's new current version, from event time ``start`` (epoch seconds)."""
        metadata = to_metadata(record, start, None)
        with self.embedder.pinned(record.summary, list(record.summary_vec)), self.guard(f"add {record.session_id}"):
            out = self.memory.add(record.summary, user_id=record.vin, agent_id=AGENT_ID, metadata=metadata, infer=False)
        added = out.get("results") or []
        if len(added) != 1:
            raise StoreError(f"mem0 store {self.path}: add {record.session_id} made {len(added)} memories")
        return Version(str(added[0]["id"]), start, None, Facts.of(record))

    def write(self, record: MemoryRecord, version: Version) -> None:
        """Update the version's memory with all of the record (text, metadata, vector) and the version's span."""
        metadata = to_metadata(record, version.start, version.end)
        with self.embedder.pinned(record.summary, list(record.summary_vec)), self.guard(f"update {record.session_id}"):
            self.memory.update(version.memory_id, text=record.summary, metadata=metadata)
        version.facts = Facts.of(record)

    def read(self, version: Version) -> MemoryRecord:
        with self.guard("get"):
            item = self.memory.get(version.memory_id)
        if item is None:
            raise StoreError(f"mem0 store {self.path}: memory {version.memory_id} is gone (deleted outside vdoctor?)")
        return from_item(item)[0]

    def ensure(self, dim: int) -> None:
        """Create the collection on the first write, with the dimension of its vectors."""
        if self.memory is not None:
            if dim != self.dim:
                raise StoreError(
                    f"mem0 store {self.path} holds {self.dim}-dimensional vectors; got one of {dim} "
                    "(records embedded by another model need a new folder)"
                )
            return
        self.path.mkdir(parents=True, exist_ok=True)
        info = {"format": FORMAT, "dim": dim, "collection": COLLECTION, "agent_id": AGENT_ID}
        (self.path / MARKER).write_text(json.dumps(info), encoding="utf-8")
        self._open(dim)

    def close(self) -> None:
        if self.memory is None:
            return
        with self.guard("close"):
            self.memory.close()
            self.memory.vector_store.client.close()
        self.memory = None


_folders: dict[Path, _Folder] = {}
_folders_lock = threading.Lock()


def _acquire(path: Path) -> _Folder:
    with _folders_lock:
        folder = _folders.get(path)
        if folder is None:
            folder = _folders[path] = _Folder(path)
        folder.users += 1
        return folder


def _release(folder: _Folder) -> None:
    with _folders_lock:
        folder.users -= 1
        if folder.users > 0:
            return
        _folders.pop(folder.path, None)
    with folder.lock:
        folder.close()


def _check_user_id(vin: str) -> None:
    # Mem0 trims user ids and refuses empty ones or ones with whitespace inside.
    if not vin or any(c.isspace() for c in vin):
        raise StoreError(f"mem0 cannot store the VIN {vin!r} as a user id (empty, or contains whitespace)")


class Mem0Store(Mem0Audit):
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
                if cur.valid:
                    invalid = effective_at(at, from_epoch(row.current.start))
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

    def find_duplicate(self, vin: str, root_cause: str, since: datetime) -> MemoryRecord | None:
        found = [r for r in self._current(vin) if r.valid and r.root_cause == root_cause and r.concluded_at >= since]
        return max(found, key=lambda r: (r.concluded_at, r.session_id)) if found else None

    def similar(self, query: SimilarQuery) -> list[Scored]:
        folder = self._folder
        if query.k <= 0:
            return []
        vector = [float(x) for x in query.vector]
        with folder.lock:
            if folder.memory is None:
                return []
            if len(vector) != folder.dim:
                raise StoreError(
                    f"mem0 store {self.path} holds {folder.dim}-dimensional vectors; the query has {len(vector)}"
                )
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
        hits.sort(key=lambda s: -s.score)
        return hits[: query.k]

    def _list(self, filters: dict[str, Any]) -> list[MemoryRecord]:
        """The current versions among the memories matching Mem0 metadata filters (unordered)."""
        folder = self._folder
        with folder.lock:
            if folder.memory is None or not folder.keys:
                return []
            with folder.guard("get_all"):
                out = folder.memory.get_all(
                    filters={"agent_id": AGENT_ID, **filters}, top_k=folder.total() + 1, show_expired=True
                )
            current = {row.current.memory_id for row in folder.keys.values()}
        return [from_item(item)[0] for item in out["results"] if str(item["id"]) in current]

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
        raise ConfigError(f"memory URL {url!r}: give the folder, e.g. mem0:///var/lib/vdoctor/mem0")
    return Mem0Store(Path(path).resolve(), read_only=read_only)
