"""The Mem0 L3 backend (``mem0:///path/to/dir``): a local, in-process Mem0 whose files live in that folder.

Built on the ``mem0ai`` package (``pip install '.[mem0]'``), run with no
network: Qdrant's local mode as the vector store (``<dir>/qdrant``), Mem0's
history database at ``<dir>/history.db``, no LLM (records are written with
``infer=False``: our faithful summaries as they are, no extraction), and
Mem0's telemetry off.

The mapping:

- one Mem0 memory per L3 record: the memory text is the record's summary, its
  embedding is the record's own ``summary_vec`` (Mem0 never embeds anything:
  its embedder slot holds ``_PinnedEmbedder``, which answers only with the
  vector the store hands it for that exact text, and refuses anything else);
- the VIN is the memory's ``user_id``; every memory also carries the
  ``agent_id`` ``vdoctor``, because Mem0's ``search`` and ``get_all`` need an
  entity id in their filters and similar-case search spans the fleet;
- every record field is metadata, under ``vd_<field>`` (Mem0 keeps
  ``updated_at`` and ``created_at`` for itself), event times as epoch seconds so
  that range filters work, enums as their values; the vector is also kept in
  metadata (``vd_summary_vec``, float32, base64), because Qdrant normalises
  stored vectors for cosine distance and Mem0's reads return no vectors;
- recheck, merge and soft delete are ``Memory.update`` calls with the whole
  record (text, metadata and its vector); nothing is ever deleted.

What Mem0 expresses and what the adapter does itself:

- similar cases: one ``Memory.search`` with every filter in the query (same
  series, ``recheck_ok`` true, valid, ``vd_vin`` ``ne`` the asking VIN; Mem0
  rejects operators on ``user_id`` itself); the hits are checked again here.
  Mem0 drops every candidate whose similarity is below ``threshold``, which it
  only accepts in [0, 1]: a case pointing away from the query (negative inner
  product) is never returned;
- exact-key lookups (upsert by (vin, session_id), get, recheck): Mem0 chooses
  its memory ids itself and cannot look a memory up by metadata without
  scanning, so the adapter keeps a key index, (vin, session_id) -> memory id,
  built from one ``get_all`` when the folder is opened and kept on every add;
- a vehicle's records (own history, history, dedup lookup, soft delete):
  Mem0's filters can say "this user, valid, concluded since T" but not "newest
  first, at most N", and in local mode every filtered listing scans the whole
  collection in Python; the adapter reads the vehicle's memories by id
  (``Memory.get``) from the key index, then filters, orders and limits them;
- prompt-version listings: ``get_all`` with the filters, ordered and cut here.

Qdrant's local mode locks the folder to one client: one process at a time may
open a ``mem0://`` folder. Within a process, every store opened on the same
folder shares one Mem0 instance (and its key index), used under one lock
(neither Mem0's local Qdrant nor the index are thread-safe).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, get_args

import numpy as np

from vdoctor.errors import ConfigError, StoreError
from vdoctor.records import MemoryRecord, utc_now
from vdoctor.stores.base import Scored, SimilarQuery

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install '.[mem0]'"
# Every memory of this store carries this agent id: Mem0's search and get_all
# need an entity id in their filters, and similar-case search spans vehicles.
AGENT_ID = "vdoctor"
# Metadata keys are the record's field names with this prefix (Mem0 owns
# `created_at`, `updated_at`, `role`, ... in the same payload).
PREFIX = "vd_"
VEC_KEY = PREFIX + "summary_vec"
FORMAT = 1
COLLECTION = "vdoctor_cases"
# The folder's own description: the collection's vector dimension, fixed when
# the first record is written.
MARKER = "vdoctor-mem0.json"
# The text a similar-case search hands Mem0; its vector is the caller's query vector.
QUERY_TEXT = "vdoctor similar-case query"
# Mem0 builds OpenAI clients for its embedder and LLM slots before we replace
# them; they get a placeholder key and the discard port, so that no real key is
# read from the environment and nothing could ever leave the machine.
_UNUSED_KEY = "unused-offline"
_UNUSED_URL = "http://127.0.0.1:9/v1"
# Record fields kept outside the metadata: the summary is the memory text.
_TEXT_FIELD = "summary"
_VEC_FIELD = "summary_vec"


def _is_time(annotation: Any) -> bool:
    return annotation is datetime or datetime in get_args(annotation)


# Derived from the record model, so that fields added later (event times) are
# stored and read back without touching this module.
_META_FIELDS = [name for name in MemoryRecord.model_fields if name not in (_TEXT_FIELD, _VEC_FIELD)]
_TIME_FIELDS = frozenset(name for name, f in MemoryRecord.model_fields.items() if _is_time(f.annotation))


def to_metadata(record: MemoryRecord) -> dict[str, Any]:
    """The record's fields as Mem0 metadata: times as epoch seconds, enums as values, the vector as base64."""
    meta: dict[str, Any] = {PREFIX + "format": FORMAT}
    for name in _META_FIELDS:
        value = getattr(record, name)
        if isinstance(value, datetime):
            value = int(value.timestamp())
        elif isinstance(value, Enum):
            value = value.value
        elif isinstance(value, list):
            value = list(value)
        meta[PREFIX + name] = value
    meta[VEC_KEY] = base64.b64encode(np.asarray(record.summary_vec, dtype="<f4").tobytes()).decode("ascii")
    return meta


def from_item(item: dict[str, Any]) -> MemoryRecord:
    """A record from one of Mem0's result items (``get``, ``get_all``, ``search``)."""
    meta = item.get("metadata") or {}
    try:
        vector = np.frombuffer(base64.b64decode(meta[VEC_KEY]), dtype="<f4")
        data: dict[str, Any] = {_TEXT_FIELD: item.get("memory", ""), _VEC_FIELD: [float(x) for x in vector]}
        for name in _META_FIELDS:
            if PREFIX + name not in meta:
                continue  # written before the field existed: the record's default
            value = meta[PREFIX + name]
            if name in _TIME_FIELDS and value is not None:
                value = datetime.fromtimestamp(value, UTC)
            data[name] = value
        return MemoryRecord.model_validate(data)
    except (KeyError, TypeError, ValueError) as e:
        raise StoreError(f"mem0 memory {item.get('id')} is not a vdoctor record: {e}") from e


class _PinnedEmbedder:
    """Mem0's embedder slot: returns the vector the store pinned for this exact text, and nothing else.

    The caller embedded the summary (and the query) already, with the embedder
    from the project's registry; Mem0 must store and search exactly that
    vector. Any other text Mem0 asks about is refused (its entity linking,
    which only runs where spaCy is installed, catches the refusal and logs it).
    Used only under the folder's lock.
    """

    def __init__(self) -> None:
        self._pins: dict[str, list[float]] = {}

    @contextmanager
    def pinned(self, text: str, vector: list[float]) -> Iterator[None]:
        self._pins[text] = vector
        try:
            yield
        finally:
            self._pins.pop(text, None)

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        vector = self._pins.get(text)
        if vector is None:
            raise StoreError(f"mem0 asked to embed a text the store did not hand it (for {memory_action})")
        return vector

    def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
        return [self.embed(text, memory_action) for text in texts]


class _NoLlm:
    """Mem0's LLM slot: records are written with infer=False, so a call is a bug, never a network request."""

    def generate_response(self, *args: Any, **kwargs: Any) -> str:
        raise StoreError("the mem0 store never calls an LLM (records are written with infer=False)")


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


class _Folder:
    """One Mem0 instance per folder per process, its key index, and the lock all use of it goes through."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.RLock()
        self.users = 0
        self.memory: Any = None
        self.dim = 0
        self.embedder = _PinnedEmbedder()
        self.keys: dict[tuple[str, str], str] = {}
        self.by_vin: dict[str, list[str]] = {}
        marker = path / MARKER
        if marker.exists():
            try:
                info = json.loads(marker.read_text(encoding="utf-8"))
                dim = int(info["dim"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise StoreError(f"mem0 store {path}: unreadable {MARKER}: {e}") from e
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
            memory.llm = _NoLlm()
            self.memory, self.dim = memory, dim
            self._load_index()

    def _load_index(self) -> None:
        total = int(self.memory.vector_store.col_info().points_count or 0)
        if total == 0:
            return
        listed = self.memory.get_all(filters={"agent_id": AGENT_ID}, top_k=total + 1, show_expired=True)
        for item in listed["results"]:
            meta = item.get("metadata") or {}
            vin, sid = meta.get(PREFIX + "vin"), meta.get(PREFIX + "session_id")
            if isinstance(vin, str) and isinstance(sid, str):
                if (vin, sid) in self.keys:
                    log.warning("mem0 store %s: two memories hold %s/%s; using the first", self.path, vin, sid)
                    continue
                self.index(vin, sid, str(item["id"]))

    def index(self, vin: str, session_id: str, memory_id: str) -> None:
        self.keys[(vin, session_id)] = memory_id
        self.by_vin.setdefault(vin, []).append(memory_id)

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


class Mem0Store:
    """The MemoryStore protocol over a local Mem0 (see the module docstring for the mapping)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._folder = _acquire(path)
        self._closed = False

    # -- writes ----------------------------------------------------------------------------

    def _write(self, record: MemoryRecord, memory_id: str | None) -> None:
        """Add a memory for the record, or update ``memory_id`` with all of it (text, metadata, vector)."""
        folder = self._folder
        if memory_id is None:
            _check_user_id(record.vin)
        folder.ensure(len(record.summary_vec))
        metadata = to_metadata(record)
        with folder.embedder.pinned(record.summary, list(record.summary_vec)):
            if memory_id is None:
                with folder.guard(f"add {record.session_id}"):
                    out = folder.memory.add(
                        record.summary, user_id=record.vin, agent_id=AGENT_ID, metadata=metadata, infer=False
                    )
                added = out.get("results") or []
                if len(added) != 1:
                    raise StoreError(f"mem0 store {self.path}: add {record.session_id} made {len(added)} memories")
                folder.index(record.vin, record.session_id, str(added[0]["id"]))
            else:
                with folder.guard(f"update {record.session_id}"):
                    folder.memory.update(memory_id, text=record.summary, metadata=metadata)

    def upsert(self, record: MemoryRecord) -> None:
        self.upsert_many([record])

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        # Mem0 has no batch write for memories with different metadata: one add or update each.
        with self._folder.lock:
            for record in records:
                self._write(record, self._folder.keys.get((record.vin, record.session_id)))

    def set_recheck(self, vin: str, session_id: str, ok: bool) -> bool:
        with self._folder.lock:
            memory_id = self._folder.keys.get((vin, session_id))
            record = self._read(memory_id)
            if memory_id is None or record is None:
                return False
            self._write(record.model_copy(update={"recheck_ok": ok, "updated_at": utc_now()}), memory_id)
            return True

    def soft_delete(self, vin: str) -> int:
        with self._folder.lock:
            changed = 0
            for memory_id in self._folder.by_vin.get(vin, []):
                record = self._read(memory_id)
                if record is not None and record.valid:
                    self._write(record.model_copy(update={"valid": False, "updated_at": utc_now()}), memory_id)
                    changed += 1
            return changed

    # -- reads ------------------------------------------------------------------------------

    def _read(self, memory_id: str | None) -> MemoryRecord | None:
        if memory_id is None:
            return None
        folder = self._folder
        with folder.lock, folder.guard("get"):
            item = folder.memory.get(memory_id)
        return None if item is None else from_item(item)

    def _of_vin(self, vin: str) -> list[MemoryRecord]:
        """Every record of the VIN, newest first (read by id from the key index)."""
        with self._folder.lock:
            ids = list(self._folder.by_vin.get(vin, []))
            records = [r for r in map(self._read, ids) if r is not None]
        records.sort(key=lambda r: (r.concluded_at, r.session_id), reverse=True)
        return records

    def _list(self, filters: dict[str, Any]) -> list[MemoryRecord]:
        """Every record matching Mem0 metadata filters (unordered; Mem0's listing has no order or offset)."""
        folder = self._folder
        with folder.lock:
            if folder.memory is None or not folder.keys:
                return []
            with folder.guard("get_all"):
                out = folder.memory.get_all(
                    filters={"agent_id": AGENT_ID, **filters}, top_k=len(folder.keys) + 1, show_expired=True
                )
        return [from_item(item) for item in out["results"]]

    def get(self, vin: str, session_id: str) -> MemoryRecord | None:
        return self._read(self._folder.keys.get((vin, session_id)))

    def own_history(self, vin: str, since: datetime, limit: int) -> list[MemoryRecord]:
        return [r for r in self._of_vin(vin) if r.valid and r.concluded_at >= since][: max(limit, 0)]

    def history(self, vin: str) -> list[MemoryRecord]:
        return self._of_vin(vin)

    def find_duplicate(self, vin: str, root_cause: str, since: datetime) -> MemoryRecord | None:
        found = [r for r in self._of_vin(vin) if r.valid and r.root_cause == root_cause and r.concluded_at >= since]
        return found[0] if found else None

    def similar(self, query: SimilarQuery) -> list[Scored]:
        folder = self._folder
        if query.k <= 0:
            return []
        filters = {
            "agent_id": AGENT_ID,
            PREFIX + "series": query.series,
            PREFIX + "recheck_ok": True,
            PREFIX + "valid": True,
            PREFIX + "vin": {"ne": query.exclude_vin},
        }
        vector = [float(x) for x in query.vector]
        with folder.lock:
            if folder.memory is None:
                return []
            if len(vector) != folder.dim:
                raise StoreError(
                    f"mem0 store {self.path} holds {folder.dim}-dimensional vectors; the query has {len(vector)}"
                )
            with folder.embedder.pinned(QUERY_TEXT, vector), folder.guard("search"):
                out = folder.memory.search(QUERY_TEXT, top_k=query.k, filters=filters, threshold=0.0)
        hits = []
        for item in out["results"]:
            record = from_item(item)
            # Mem0 filtered already; checked again so that a filter it dropped can never leak a case.
            if (
                record.series == query.series
                and record.recheck_ok is True
                and record.valid
                and record.vin != query.exclude_vin
            ):
                hits.append(Scored(record, float(item["score"])))
        hits.sort(key=lambda s: -s.score)
        return hits[: query.k]

    def by_prompt_version(self, prompt_version: str, limit: int) -> list[MemoryRecord]:
        found = self._list({PREFIX + "prompt_version": prompt_version, PREFIX + "valid": True})
        found.sort(key=lambda r: (r.vin, r.session_id))
        return found[: max(limit, 0)]

    def prompt_versions(self) -> list[str]:
        return sorted({r.prompt_version for r in self._list({PREFIX + "valid": True})})

    def count(self) -> int:
        with self._folder.lock:
            return len(self._folder.keys)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _release(self._folder)


def open_mem0(url: str) -> Mem0Store:
    """``mem0:///relative/dir`` or ``mem0:////absolute/dir`` (as sqlite URLs are read)."""
    path = url[len("mem0:///") :] if url.startswith("mem0:///") else ""
    if not path.strip("/"):
        raise ConfigError(f"memory URL {url!r}: give the folder, e.g. mem0:///var/lib/vdoctor/mem0")
    return Mem0Store(Path(path).resolve())
