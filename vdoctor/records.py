"""Output records: the diagnosis (DESIGN.md §3.2), dead letters, and the L3 record (§3.3)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, overload

import numpy as np
import numpy.typing as npt
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_validator,
)

# A case summary is read by people and injected into prompts: short by rule.
MAX_SUMMARY_CHARS = 300
# The stored source of a summary, for re-extraction: enough for a long session's
# event lines and required facts, small enough for a row.
MAX_SOURCE_CHARS = 64_000
# The symptom as reported (the opening alert's text) that a record is found by:
# alert texts are a sentence or two; a hostile 1 MB one is cut here.
MAX_ALERT_TEXT_CHARS = 500
# A dead letter is one record on the dead-letters topic, and a Kafka producer refuses a record over its
# max.request.size (1,048,576 bytes by default, which the job keeps). A sink that fails on a record fails the
# job, which restarts from its checkpoint, reads the same line again and fails again until its restarts run
# out: one bad line would stop the fleet. A line the broker took (up to ~1 MB) grows in its dead letter
# (its quotes escaped, the error added), so a dead letter's JSON is bounded well under the limit, in a file
# as on a topic (both write ``DeadLetter``'s JSON).
MAX_DEAD_LETTER_BYTES = 900_000
# JSON writes a character in at most 6 bytes (a control character as \u0001; a character of 4 UTF-8 bytes
# is one character): bounds in characters hold in bytes whatever the text.
JSON_MAX_BYTES_PER_CHAR = 6
# A dead letter's reason names the fault in a sentence or two; a longer one (a message that repeats what
# it refused) is cut.
MAX_DEAD_LETTER_ERROR_CHARS = 2_000
# The raw input a dead letter keeps: what MAX_DEAD_LETTER_BYTES leaves after the longest reason and the
# other fields (keys, stage, the cut raw's lengths and sha256: under 250 bytes; 1,000 set aside), each
# character counted at its most. 147,833 characters, many times an alert of the contract; a longer raw is
# cut to it, and the dead letter gives the whole raw's length and sha256 to find the line by at the source.
MAX_DEAD_LETTER_RAW_CHARS = (MAX_DEAD_LETTER_BYTES - MAX_DEAD_LETTER_ERROR_CHARS * JSON_MAX_BYTES_PER_CHAR - 1_000) // (
    JSON_MAX_BYTES_PER_CHAR
)


class Phase(StrEnum):
    """Lifecycle of a diagnosis session. INVESTIGATING -> CONCLUDED, never back."""

    INVESTIGATING = "INVESTIGATING"
    CONCLUDED = "CONCLUDED"


Priority = Literal["P1", "P2", "P3"]


class RecordKind(StrEnum):
    """A final record concludes a case; a milestone keeps a long open session's progress."""

    FINAL = "final"
    MILESTONE = "milestone"


class MemoryRef(BaseModel):
    """Names one long-term record: the unique key of the L3 table."""

    model_config = ConfigDict(frozen=True)

    vin: str
    session_id: str


class MemoryUse(BaseModel):
    """What long-term memory put into this event's context."""

    # Mutable defaults by factory (here and below): a literal [] or model is
    # deep-copied on every validation (a Diagnosis took ~6 us to build, ~1 us so).
    injected: bool = False
    tokens: int = 0
    own: list[MemoryRef] = Field(default_factory=list)
    similar: list[MemoryRef] = Field(default_factory=list)
    degraded: bool = False


class Diagnosis(BaseModel):
    """One record per alert processed, in per-VIN order."""

    vin: str
    series: str
    event_id: str
    session_id: str
    phase: Phase
    priority: Priority | None = None
    root_cause: str | None = None
    fix_action: str | None = None
    confidence: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    evidence: list[str] = Field(default_factory=list)
    llm_calls: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Wall time of this alert's run (model, tools, memory), and the model's share of it.
    latency_ms: float = 0.0
    model_latency_ms: float = 0.0
    memory: MemoryUse = Field(default_factory=MemoryUse)
    flags: list[str] = Field(default_factory=list)


def _absent(value: object) -> bool:
    return value is None


def _escaped(text: str) -> str:
    """``text`` with each lone surrogate as its escape (``\\ud83d``)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def utf8_writable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class DeadLetter(BaseModel):
    """An input that could not be used, kept with the reason so nothing is lost.

    Bounded, however it is built (``MAX_DEAD_LETTER_BYTES``): a raw input over ``MAX_DEAD_LETTER_RAW_CHARS``
    is cut to it, and the record says so (``raw_truncated``) with the whole raw's length in characters and
    in UTF-8 bytes and its sha256 (of the UTF-8 bytes), to match it with the line in the source; those
    fields are left out of the JSON of a raw kept whole (``{"raw", "error", "stage"}``). A reason over
    ``MAX_DEAD_LETTER_ERROR_CHARS`` is cut and ends in "…". A lone surrogate in either is kept as its escape.
    """

    raw: str
    error: str
    stage: Literal["parse", "validate", "process"]
    raw_truncated: bool = Field(default=False, exclude_if=lambda cut: not cut)
    raw_chars: int | None = Field(default=None, exclude_if=_absent)
    raw_bytes: int | None = Field(default=None, exclude_if=_absent)
    raw_sha256: str | None = Field(default=None, exclude_if=_absent)

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        raw, error = data.get("raw"), data.get("error")
        # Writable, however it is built: a lone surrogate (half an emoji, decoded from a JSON escape in a stored
        # state or an error's text) cannot be written as UTF-8, and the letter's own write then failed. It is kept
        # as its escape, ``\ud83d``, before the bounds are applied (an escape is longer than its character).
        if isinstance(error, str) and not utf8_writable(error):
            error = _escaped(error)
            data = data | {"error": error}
        if isinstance(error, str) and len(error) > MAX_DEAD_LETTER_ERROR_CHARS:
            data = data | {"error": error[: MAX_DEAD_LETTER_ERROR_CHARS - 1] + "…"}
        if isinstance(raw, str):
            kept = raw if utf8_writable(raw) else _escaped(raw)
            if len(kept) > MAX_DEAD_LETTER_RAW_CHARS:
                encoded = raw.encode("utf-8", "surrogatepass")  # (the whole raw as given: a lone surrogate hashed)
                data = data | {
                    "raw": kept[:MAX_DEAD_LETTER_RAW_CHARS],
                    "raw_truncated": True,
                    "raw_chars": len(raw),
                    "raw_bytes": len(encoded),
                    "raw_sha256": hashlib.sha256(encoded).hexdigest(),
                }
            elif kept is not raw:
                data = data | {"raw": kept}
        return data


def utc_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class PackedVector(Sequence[float]):
    """A stored vector kept as its float32 bytes and read as floats: what a store reads back as ``summary_vec``.

    A list of 512 Python floats is ~16 KB (a float object and a pointer per
    dimension); its float32 bytes are 2 KB. The embedded store keeps up to
    1,024 decoded records for recall (``stores.sqlite_rows.DecodedRows``),
    whose vectors as lists were ~16 MB, filling as the store grew. The
    values are the list's exactly (a stored vector is float32).
    ``np.asarray`` reads the bytes without a copy (read-only); iterating,
    indexing or ``list()`` give Python floats.
    """

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        if len(data) % 4:
            raise ValueError(f"a float32 vector's bytes come in fours, got {len(data)}")
        self._data = bytes(data)

    @property
    def array(self) -> npt.NDArray[np.float32]:
        return np.frombuffer(self._data, dtype=np.float32)

    def tolist(self) -> list[float]:
        values: list[float] = self.array.tolist()
        return values

    def __len__(self) -> int:
        return len(self._data) // 4

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> list[float]: ...
    def __getitem__(self, index: int | slice) -> float | list[float]:
        item: float | list[float] = self.array[index].tolist()  # one value, not the whole vector, as floats
        return item

    def __iter__(self) -> Iterator[float]:
        return iter(self.tolist())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        array = self.array
        if dtype is not None and np.dtype(dtype) != array.dtype:
            return array.astype(dtype)
        return array.copy() if copy else array

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedVector):
            return self._data == other._data
        if isinstance(other, list | tuple):
            return self.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to a list, which is not hashable

    @classmethod
    def packed_row(cls, row: npt.NDArray[Any]) -> Sequence[float]:
        """A model's vector as a record's ``summary_vec``: a float32 one as its bytes (a ``PackedVector``, the
        same floats as its ``tolist()``), any other as its floats (packing would round them)."""
        if row.dtype == np.float32 and row.ndim == 1:
            return cls(row.tobytes())
        values: list[float] = row.tolist()
        return values

    def __reduce__(self) -> tuple[type[PackedVector], tuple[bytes]]:
        return PackedVector, (self._data,)

    def __repr__(self) -> str:
        return f"PackedVector({len(self)} dimensions)"


class MemoryRecord(BaseModel):
    """One concluded case in long-term memory, unique by (vin, session_id).

    Event times (from the events' ``ts``, never from the clock) say what was
    true when: ``opened_ts`` (the session opened), ``concluded_at`` (the
    conclusion, and the time from which a case exists), ``verified_ts`` (the
    recheck that set ``recheck_ok``) and ``invalid_ts`` (the lifecycle event
    that set ``valid`` to false). A change with event time t holds for a
    session opening at T exactly when t <= T. ``updated_at`` is the clock
    time of the last write, for audit only.
    """

    vin: str
    session_id: str
    series: str
    # The conclusion's event time (the concluding alert's ts). DESIGN.md calls
    # it concluded_ts; the column keeps its first name (one column per fact).
    concluded_at: datetime
    summary: Annotated[str, Field(max_length=MAX_SUMMARY_CHARS)]
    # The embedding of the case's text (``retrieval.text.dense_text``: the alert
    # text, codes, cause, fix and the summary's words), normalised; the name is the column's.
    # A list of floats, or a ``PackedVector`` (the engine's own vectors, and a record read back from the
    # embedded store): read it as a sequence of floats, or with ``np.asarray``.
    summary_vec: Sequence[float]
    root_cause: str
    fix_action: str
    # None: no priority yet (a milestone of a session that has not named one).
    priority: Priority | None
    dtc_codes: list[str] = Field(default_factory=list)
    recheck_ok: bool | None = None
    prompt_version: str
    valid: bool = True
    updated_at: datetime = Field(default_factory=utc_now)
    kind: RecordKind = RecordKind.FINAL
    # Later sessions of the same fault within the dedup window, merged into this record.
    merged_sessions: list[str] = Field(default_factory=list)
    # What the summary was written from (the summarizer's request, as JSON), kept
    # so that a new summary prompt can re-extract it; bounded.
    source: Annotated[str, Field(max_length=MAX_SOURCE_CHARS)] = ""
    # The key facts (readings, codes, exclusions, voided conclusions) that did
    # not fit in the 300-character summary, verbatim: a non-empty list flags the
    # record as carrying less in its summary than its session knew.
    omitted: list[str] = Field(default_factory=list)
    # When the session this version concludes opened (None: written before event times were kept).
    opened_ts: datetime | None = None
    # Event time of the recheck that set recheck_ok (None while recheck_ok is None).
    verified_ts: datetime | None = None
    # Event time of the lifecycle event (or superseding write) that set valid to false.
    invalid_ts: datetime | None = None
    # The symptom as the vehicle reported it: the text of the alert that opened the
    # session, bounded. With the codes, cause, fix and summary it is what a later
    # session finds the case by (``retrieval.text``: the lexical channel indexes
    # ``case_text``, the vector embeds ``dense_text``).
    alert_text: Annotated[str, Field(max_length=MAX_ALERT_TEXT_CHARS)] = ""
    # Which embedder made summary_vec, as ``<name>/<dim>`` (``embedders.embedder_id``);
    # "" when not known (written before it was kept: ``vdoctor memory reembed`` re-embeds those).
    embedder: str = ""

    @field_validator("concluded_at", "updated_at", "opened_ts", "verified_ts", "invalid_ts")
    @classmethod
    def _second_precision(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is UTC and not value.microsecond:
            # The usual case (an event's time, utc_now()): what the conversion below returns.
            return value
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).replace(microsecond=0)

    @model_validator(mode="after")
    def _consistent(self) -> MemoryRecord:
        # One validator for the record's rules (a Python validator is a call on every record built).
        # A verdict or an invalidation without its time counts from the
        # conclusion (the earliest it can be): records built by hand and rows
        # of older stores read the same on every backend.
        if self.recheck_ok is None:
            if self.verified_ts is not None:
                raise ValueError("verified_ts is set but recheck_ok is None")
        elif self.verified_ts is None:
            self.verified_ts = self.concluded_at
        if self.valid:
            if self.invalid_ts is not None:
                raise ValueError("invalid_ts is set on a valid record")
        elif self.invalid_ts is None:
            self.invalid_ts = self.concluded_at
        if self.kind is RecordKind.FINAL and self.priority is None:
            # A final record is a conclusion; only a milestone may not have a priority yet.
            raise ValueError("a final record needs a priority; only a milestone may have none yet")
        return self

    @field_validator("summary_vec", mode="wrap")
    @classmethod
    def _finite(cls, vec: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # Vectors end up as SQL literals in the Doris backend: only finite floats.
        if isinstance(vec, PackedVector):
            # A float32 vector as its bytes (``packed_row``: the engine's own writes), checked as one array
            # and kept so: no list of 512 floats made here, nor turned back into bytes by the store.
            if not len(vec) or not bool(np.isfinite(vec.array).all()):
                raise ValueError("summary_vec must be a non-empty list of finite floats")
            return vec
        if isinstance(vec, np.ndarray):
            vec = vec.tolist()
        elif not isinstance(vec, list | str | bytes | bytearray | Mapping) and isinstance(vec, Iterable):
            vec = list(vec)  # a tuple, a deque, a generator: read as a list[float] field reads them, into a list
        vec = handler(vec)
        # A sum is finite only when every term is (an inf or a NaN makes it inf or
        # NaN), and summing 512 floats takes ~1.3 us where numpy's check takes ~9;
        # only a sum that is not (a bad term, or finite terms that overflowed) is
        # checked term by term. numpy checks a vector ~5x faster than a Python loop.
        if not vec or not (math.isfinite(sum(vec)) or bool(np.isfinite(np.asarray(vec, dtype=np.float64)).all())):
            raise ValueError("summary_vec must be a non-empty list of finite floats")
        return vec

    @field_serializer("summary_vec", mode="wrap")
    def _plain_vector(self, vec: Sequence[float], handler: SerializerFunctionWrapHandler) -> Any:
        return handler(vec.tolist() if isinstance(vec, PackedVector) else vec)

    @classmethod
    def from_store(cls, **fields: Any) -> MemoryRecord:
        """A record read back from a store that validated it when it was written, built without validating again.

        Recall reads up to a hundred candidates per session open; validating
        each field of each again was most of a read's cost. The caller hands
        the fields already typed (UTC datetimes at whole seconds, a RecordKind);
        the defaults the validators fill (a verdict's or an invalidation's
        time) are filled here the same way.
        """
        if fields.get("recheck_ok") is not None and fields.get("verified_ts") is None:
            fields["verified_ts"] = fields["concluded_at"]
        if fields.get("valid") is False and fields.get("invalid_ts") is None:
            fields["invalid_ts"] = fields["concluded_at"]
        return cls.model_construct(**fields)

    def ref(self) -> MemoryRef:
        return MemoryRef(vin=self.vin, session_id=self.session_id)

    def as_of(self, at: datetime) -> MemoryRecord:
        """This version as a session opening at ``at`` knew it: a later recheck or invalidation is left out.

        Stores return a record's version current at ``at``; this removes what
        happened to that version after ``at`` (its verdict, its invalidation),
        so that nothing from the future reaches a prompt.
        """
        # The embedded store's recall takes the same test inline for the records it decoded before
        # (``SqliteStore._records``): a rule added here goes there too.
        update: dict[str, object] = {}
        if self.verified_ts is not None and self.verified_ts > at:
            update.update(recheck_ok=None, verified_ts=None)
        if self.invalid_ts is not None and self.invalid_ts > at:
            update.update(valid=True, invalid_ts=None)
        return self.model_copy(update=update) if update else self

    def public_dict(self) -> dict[str, object]:
        """The record as users see it (``memory history --json``): vectors left out, and the conclusion's
        event time under the design's name ``concluded_ts`` as well as its column's, ``concluded_at``."""
        shown = self.model_dump(mode="json", exclude={"summary_vec", "source"})
        shown["concluded_ts"] = shown["concluded_at"]
        return shown
