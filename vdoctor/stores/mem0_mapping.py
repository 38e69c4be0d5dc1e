"""How an L3 record version maps onto one Mem0 memory, and the Mem0 filters recall asks with.

Pure: no mem0 import (the backend, ``mem0.py``, owns the package). One Mem0
memory holds one version of a record: the memory text is the version's
summary, every record field is metadata under ``vd_<field>`` (event times as
epoch seconds, so that Mem0's range filters work on them; enums as their
values; the vector also as base64 float32, because Qdrant normalises stored
vectors and Mem0's reads return none), and the version's span of event time
is ``vd_version_from`` / ``vd_version_to`` (epoch seconds; ``vd_version_to`` is
None while the version is current). Any Mem0 tool can filter on every field;
a later lexical channel can read the whole record from a memory's metadata.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any, NamedTuple, get_args

import numpy as np

from vdoctor.errors import StoreError
from vdoctor.records import MemoryRecord
from vdoctor.stores.base import SimilarQuery

# Every memory of this store carries this agent id: Mem0's search and get_all
# need an entity id in their filters, and similar-case search spans vehicles.
AGENT_ID = "vdoctor"
# Metadata keys are the record's field names with this prefix (Mem0 owns
# `created_at`, `updated_at`, `role`, ... in the same payload).
PREFIX = "vd_"
VEC_KEY = PREFIX + "summary_vec"
# The span of event time [from, to) in which a version is the record's current one.
VERSION_FROM = PREFIX + "version_from"
VERSION_TO = PREFIX + "version_to"
# 2: one memory per record version, with its span (1 was one memory per record).
FORMAT = 2
# The text a similar-case search hands Mem0; its vector is the caller's query vector.
QUERY_TEXT = "vdoctor similar-case query"
# Record fields kept outside the metadata: the summary is the memory text.
_TEXT_FIELD = "summary"
_VEC_FIELD = "summary_vec"


def _is_time(annotation: Any) -> bool:
    return annotation is datetime or datetime in get_args(annotation)


# Derived from the record model, so that fields added later are stored and read back without touching this module.
_META_FIELDS = [name for name in MemoryRecord.model_fields if name not in (_TEXT_FIELD, _VEC_FIELD)]
_TIME_FIELDS = frozenset(name for name, f in MemoryRecord.model_fields.items() if _is_time(f.annotation))


def epoch(value: datetime) -> int:
    return int(value.timestamp())


def from_epoch(value: int) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def key(field: str) -> str:
    """The metadata key of a record field."""
    return PREFIX + field


class Facts(NamedTuple):
    """What the read-only views count and order versions by, kept in the key index beside each version."""

    series: str
    kind: str
    valid: bool
    recheck_ok: bool | None
    concluded_at: int

    @classmethod
    def of(cls, record: MemoryRecord) -> Facts:
        return cls(record.series, record.kind.value, record.valid, record.recheck_ok, epoch(record.concluded_at))


@dataclass
class Version:
    """One stored version of a record: its Mem0 memory, its span [start, end) in epoch seconds, its facts."""

    memory_id: str
    start: int
    # None: the current version (open-ended).
    end: int | None
    # Set for every version in the key index (None on a version read from a search hit).
    facts: Facts | None = None

    def holds(self, at: int) -> bool:
        return self.start <= at and (self.end is None or at < self.end)


def to_metadata(record: MemoryRecord, start: int, end: int | None) -> dict[str, Any]:
    """The version's fields as Mem0 metadata: times as epoch seconds, enums as values, the vector as base64."""
    meta: dict[str, Any] = {PREFIX + "format": FORMAT, VERSION_FROM: start, VERSION_TO: end}
    for name in _META_FIELDS:
        value = getattr(record, name)
        if isinstance(value, datetime):
            value = epoch(value)
        elif isinstance(value, Enum):
            value = value.value
        elif isinstance(value, list):
            value = list(value)
        meta[PREFIX + name] = value
    meta[VEC_KEY] = base64.b64encode(np.asarray(record.summary_vec, dtype="<f4").tobytes()).decode("ascii")
    return meta


def from_item(item: dict[str, Any]) -> tuple[MemoryRecord, Version]:
    """The record version in one of Mem0's result items (``get``, ``get_all``, ``search``), and its span."""
    meta = item.get("metadata") or {}
    try:
        vector = np.frombuffer(base64.b64decode(meta[VEC_KEY]), dtype="<f4")
        data: dict[str, Any] = {_TEXT_FIELD: item.get("memory", ""), _VEC_FIELD: [float(x) for x in vector]}
        for name in _META_FIELDS:
            if PREFIX + name not in meta:
                continue  # written before the field existed: the record's default
            value = meta[PREFIX + name]
            if name in _TIME_FIELDS and value is not None:
                value = from_epoch(value)
            data[name] = value
        end = meta[VERSION_TO]
        version = Version(str(item["id"]), int(meta[VERSION_FROM]), None if end is None else int(end))
        return MemoryRecord.model_validate(data), version
    except (KeyError, TypeError, ValueError) as e:
        raise StoreError(f"mem0 memory {item.get('id')} is not a vdoctor record version: {e}") from e


def version_of(item: dict[str, Any]) -> tuple[str, str, Version]:
    """(vin, session_id, version with its facts) of a Mem0 result item, without building the record.

    Opening a folder reads every memory: only the metadata the key index keeps is decoded.
    """
    meta = item.get("metadata") or {}
    try:
        end = meta[VERSION_TO]
        facts = Facts(
            str(meta[key("series")]),
            str(meta[key("kind")]),
            bool(meta[key("valid")]),
            None if meta[key("recheck_ok")] is None else bool(meta[key("recheck_ok")]),
            int(meta[key("concluded_at")]),
        )
        version = Version(str(item["id"]), int(meta[VERSION_FROM]), None if end is None else int(end), facts)
        vin, session_id = meta[key("vin")], meta[key("session_id")]
    except (KeyError, TypeError, ValueError) as e:
        raise StoreError(f"mem0 memory {item.get('id')} is not a vdoctor record version: {e}") from e
    if not isinstance(vin, str) or not isinstance(session_id, str):
        raise StoreError(f"mem0 memory {item.get('id')} is not a vdoctor record version: no vin or session id")
    return vin, session_id, version


def similar_filters(query: SimilarQuery) -> dict[str, Any]:
    """Mem0 metadata filters for similar cases as of ``query.as_of``: every rule of ``SimilarQuery.admits``.

    A version is a candidate when it was the record's current version at T
    (from <= T < to), concluded and verified (recheck_ok true) at or before T,
    and not invalidated at or before T. "Not at or before T" is ``NOT`` of a
    ``lte`` range, because a missing time (still current, never invalidated)
    matches no range. Other vehicles: ``ne`` on ``vd_vin`` (Mem0 refuses
    operators on ``user_id``). The series, the cheapest test that rules most
    versions out, comes first: local Qdrant tests conditions in order.
    """
    at = epoch(query.as_of)
    return {
        "agent_id": AGENT_ID,
        key("series"): query.series,
        key("recheck_ok"): True,
        key("vin"): {"ne": query.exclude_vin},
        key("concluded_at"): {"lte": at},
        key("verified_ts"): {"lte": at},
        VERSION_FROM: {"lte": at},
        "NOT": [{VERSION_TO: {"lte": at}}, {key("invalid_ts"): {"lte": at}}],
    }


class PinnedEmbedder:
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


class NoLlm:
    """Mem0's LLM slot: records are written with infer=False, so a call is a bug, never a network request."""

    def generate_response(self, *args: Any, **kwargs: Any) -> str:
        raise StoreError("the mem0 store never calls an LLM (records are written with infer=False)")
