"""A local Mem0 folder in this process: one Mem0 instance per folder, its key index of record
versions, and the lock every use goes through (shared by the store and its read-only views)."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vdoctor.errors import ConfigError, StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores.mem0_mapping import (
    AGENT_ID,
    FORMAT,
    Facts,
    NoLlm,
    PinnedEmbedder,
    Version,
    from_item,
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

    def listing(self, filters: dict[str, Any]) -> list[dict[str, Any]]:
        """Every memory of this store matching Mem0 metadata ``filters``, all versions (hold ``lock``).

        One ``get_all`` of the whole match (Mem0 has no order or paging), [] for an empty folder.
        """
        if self.memory is None or not self.keys:
            return []
        with self.guard("get_all"):
            out = self.memory.get_all(
                filters={"agent_id": AGENT_ID, **filters}, top_k=self.total() + 1, show_expired=True
            )
        return list(out["results"])

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
