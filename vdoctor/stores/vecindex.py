"""An exact, per-series vector index for the embedded store, persisted beside the database.

Similar-case recall only ever searches verified (recheck_ok = true), valid
versions of records of one series, so the index holds exactly those, one
float32 matrix per series (and vector dimension), each with the span of event
time in which it is verified and valid: ``[start, end)`` in epoch seconds.
It also counts, per series, which embedder made the vectors (``embedder`` of
the record), so that a search over vectors of another model is refused
(``stores.base.EmbedderMismatch``) rather than ranked by meaningless scores. A query is one
matrix-vector product over that series (an exact scan: no recall loss; on a
large series, half of it on a helper thread the caller gives), with
the asking vehicle masked out by a 64-bit VIN hash and every version whose
span does not hold the query's time (``as_of``) masked out as well; the store
re-checks every filter when it fetches the winning rows.

Rows are named by the SQLite rowid (stable: the store upserts in place);
archived versions (the ``case_history`` table) by their negated rowid. The
index follows the database through a change sequence: every write stamps its
row with the next ``seq``; the index remembers the highest ``seq`` it has
applied and catches up on rows with a higher one. On disk it is a folder of
``.npy`` files plus ``meta.json`` (database epoch, seq, the parts' series and dimensions, embedder names). Each row
also keeps the change seq it was applied at, so that recall can tell whether a record it decoded before is still
the version the index ranked (``seq_of``). On start it
is loaded if it belongs to this database and is not ahead of it, caught up
incrementally, and rebuilt from the table when missing, foreign or corrupt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from vdoctor.embedders.threads import pin_blas_threads

log = logging.getLogger(__name__)
# A matrix-vector product is memory-bound: BLAS threads do not speed it up,
# and on busy cores their spin-waits made a scan 2-3x slower (bench/). So from
# the first scan on, the process runs BLAS on one thread for good, the same
# pin an in-process embedding model sets when it loads (``embedders.threads``).
# Limiting each scan and setting BLAS back after it (threadpoolctl's ``limit``)
# cost ~25 us of ctypes calls a scan in a job's process, ~40% of a fleet-sized
# series' search, and two threads doing so at once could leave one's scan on
# the library's default.


INDEX_FORMAT = 4
# The end of a span that is still open.
OPEN_END = int(np.iinfo(np.int64).max)
# Growth factor of a series matrix: amortised O(1) appends without holding
# twice the memory for long.
_GROWTH = 1.5
_MIN_CAPACITY = 64
# Below this many rows in a series, a scan is shorter than handing part of it to another thread.
PARALLEL_MIN_ROWS = 8192


def fresh_temp_folder(folder: Path) -> Path:
    """An empty temporary folder beside ``folder``, named per process (several Flink workers may share one
    database), for ``swap_in``."""
    tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def swap_in(tmp: Path, folder: Path) -> None:
    """Put the fully written ``tmp`` in the place of ``folder`` (a rename: readers see the old or the new one)."""
    old = folder.with_name(f"{folder.name}.old{os.getpid()}")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        os.replace(folder, old)
    os.replace(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)


def vin_hash(vin: str) -> int:
    """A 64-bit hash of a VIN, to mask the asking vehicle inside a vectorised scan."""
    return int.from_bytes(hashlib.blake2b(vin.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


@dataclass
class _Series:
    """One series' verified, valid vectors: rows [0, size) of each array are in use."""

    dim: int
    vectors: npt.NDArray[np.float32] = field(init=False)
    rowids: npt.NDArray[np.int64] = field(init=False)
    vins: npt.NDArray[np.int64] = field(init=False)
    # The event-time span [start, end) (epoch seconds) in which the version is verified and valid.
    starts: npt.NDArray[np.int64] = field(init=False)
    ends: npt.NDArray[np.int64] = field(init=False)
    # Which embedder made each vector: an index into the index's ``model_names``.
    models: npt.NDArray[np.int64] = field(init=False)
    # The change seq of the row's version that was applied (-1: not known).
    seqs: npt.NDArray[np.int64] = field(init=False)
    size: int = 0

    def __post_init__(self) -> None:
        self.vectors = np.zeros((_MIN_CAPACITY, self.dim), dtype=np.float32)
        for name in _ROW_ARRAYS:
            setattr(self, name, np.zeros(_MIN_CAPACITY, dtype=np.int64))

    def _grow(self, need: int) -> None:
        cap = len(self.rowids)
        if need <= cap:
            return
        new_cap = max(need, int(cap * _GROWTH) + 1)
        for name in ("vectors", *_ROW_ARRAYS):
            old = getattr(self, name)
            new = np.zeros((new_cap, *old.shape[1:]), dtype=old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def append(
        self, rowid: int, vin_h: int, span: tuple[int, int], vector: npt.NDArray[np.float32], model: int, seq: int
    ) -> int:
        self._grow(self.size + 1)
        slot = self.size
        self.vectors[slot] = vector
        self.rowids[slot] = rowid
        self.vins[slot] = vin_h
        self.starts[slot], self.ends[slot] = span
        self.models[slot] = model
        self.seqs[slot] = seq
        self.size += 1
        return slot

    def remove(self, slot: int) -> int | None:
        """Remove a slot by moving the last row into it; returns the rowid that moved, if any."""
        last = self.size - 1
        moved = None
        if slot != last:
            self.vectors[slot] = self.vectors[last]
            for name in _ROW_ARRAYS:
                array = getattr(self, name)
                array[slot] = array[last]
            moved = int(self.rowids[slot])
        self.size -= 1
        return moved


_ROW_ARRAYS = ("rowids", "vins", "starts", "ends", "models", "seqs")


class SeriesVectorIndex:
    """Exact per-series inner-product index over verified, valid record versions, by event-time span."""

    def __init__(self) -> None:
        self.seq = 0
        # One part per (series, dimension): a model change leaves vectors of two dimensions until re-embedded.
        self._parts: dict[tuple[str, int], _Series] = {}
        self._where: dict[int, tuple[tuple[str, int], int]] = {}  # rowid -> (part, slot)
        self.model_names: list[str] = []
        self._model_ids: dict[str, int] = {}
        # series -> embedder id -> vectors it made in the index
        self._models: dict[str, dict[int, int]] = {}

    def __len__(self) -> int:
        return len(self._where)

    def _model_id(self, model: str) -> int:
        found = self._model_ids.get(model)
        if found is None:
            found = self._model_ids[model] = len(self.model_names)
            self.model_names.append(model)
        return found

    def apply(
        self,
        rowid: int,
        series: str,
        vin: str,
        span: tuple[int, int] | None,
        vector: npt.NDArray[np.float32] | None,
        model: str = "",
        seq: int = -1,
    ) -> None:
        """Bring one row up to date: present (with this vector and span) iff it is ever eligible for similar recall.

        ``span`` is the event time [start, end) in which the row is verified
        and valid; None (or an empty span) when it never is. ``model`` names
        the embedder that made the vector, ``seq`` the change seq of the
        row's version (-1: not known).
        """
        self._discard(rowid)
        if span is None or span[0] >= span[1] or vector is None:
            return
        key = (series, int(vector.shape[0]))
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _Series(key[1])
        model_id = self._model_id(model)
        self._where[rowid] = (key, part.append(rowid, vin_hash(vin), span, vector, model_id, seq))
        counts = self._models.setdefault(series, {})
        counts[model_id] = counts.get(model_id, 0) + 1

    def seq_of(self, rowid: int) -> int | None:
        """The change seq of the row's version in the index; None if the row is not here or its seq is not known."""
        hit = self._where.get(rowid)
        if hit is None:
            return None
        key, slot = hit
        seq = int(self._parts[key].seqs[slot])
        return seq if seq >= 0 else None

    def _discard(self, rowid: int) -> None:
        hit = self._where.pop(rowid, None)
        if hit is None:
            return
        key, slot = hit
        part = self._parts[key]
        counts = self._models[key[0]]
        model_id = int(part.models[slot])
        counts[model_id] -= 1
        if not counts[model_id]:
            del counts[model_id]
        moved = part.remove(slot)
        if moved is not None:
            self._where[moved] = (key, slot)

    def dims(self, series: str) -> set[int]:
        """The vector dimensions the series' indexed versions have."""
        return {dim for (name, dim), part in self._parts.items() if name == series and part.size}

    def rows(self, series: str, dim: int) -> int:
        """How many vectors of this dimension the series holds."""
        part = self._parts.get((series, dim))
        return part.size if part is not None else 0

    def models(self, series: str) -> set[str]:
        """The embedders that made the series' indexed vectors."""
        return {self.model_names[m] for m in self._models.get(series, {})}

    def search(
        self,
        series: str,
        exclude_vin: str,
        vector: npt.NDArray[np.float32],
        k: int,
        at: int,
        helper: Executor | None = None,
        seqs: dict[int, int | None] | None = None,
    ) -> list[tuple[int, float]]:
        """Top-k (rowid, inner product) of the series at event time ``at`` (more when tied at the k-th); the excluded
        VIN's rows masked out.

        ``helper``: a thread that scores half of the rows meanwhile (a scan is
        memory-bound, and two cores read memory almost twice as fast as one).
        ``seqs``: given, it gets each hit's ``seq_of``, read a column at a time.
        """
        part = self._parts.get((series, int(vector.shape[0])))
        if part is None or part.size == 0 or k <= 0:
            return []
        n = part.size
        scores = np.empty(n, dtype=np.float32)
        query = vector.astype(np.float32, copy=False)
        pin_blas_threads()
        half, other = 0, None
        if helper is not None and n >= PARALLEL_MIN_ROWS:
            half = n // 2
            other = helper.submit(np.matmul, part.vectors[:half], query, out=scores[:half])
        np.matmul(part.vectors[half:n], query, out=scores[half:])
        if other is not None:
            other.result()
        hidden = part.vins[:n] == vin_hash(exclude_vin)
        hidden |= part.starts[:n] > at
        hidden |= part.ends[:n] <= at
        scores[hidden] = -np.inf
        if n > k:
            # Every row tied with the k-th score comes along: which of equal scores make the cut must not
            # depend on the order rows were inserted in (the store breaks ties by vin and session).
            idx = np.flatnonzero(scores >= np.partition(scores, n - k)[n - k])
        else:
            idx = np.arange(n)
        idx = idx[np.argsort(-scores[idx], kind="stable")]
        idx = idx[np.isfinite(scores[idx])]
        # Converted a column at a time: per hit, numpy's scalars cost more than the scan (~100 rows a series).
        rowids = part.rowids[idx].tolist()
        if seqs is not None:
            seqs.update(zip(rowids, [seq if seq >= 0 else None for seq in part.seqs[idx].tolist()], strict=True))
        return list(zip(rowids, scores[idx].tolist(), strict=True))

    # -- persistence ---------------------------------------------------------------

    def save(self, folder: Path, epoch: str) -> None:
        """Write the index atomically (a temp folder renamed over the old one)."""
        tmp = fresh_temp_folder(folder)
        keys = sorted(self._parts)
        for i, key in enumerate(keys):
            part = self._parts[key]
            np.save(tmp / f"s{i}.vectors.npy", part.vectors[: part.size])
            for name in _ROW_ARRAYS:
                np.save(tmp / f"s{i}.{name}.npy", getattr(part, name)[: part.size])
        meta = {
            "format": INDEX_FORMAT,
            "epoch": epoch,
            "seq": self.seq,
            "parts": [[series, dim] for series, dim in keys],
            "models": self.model_names,
        }
        (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        swap_in(tmp, folder)

    @classmethod
    def load(cls, folder: Path, epoch: str) -> SeriesVectorIndex | None:
        """The saved index if it exists and belongs to this database, else None (rebuild)."""
        if not (folder / "meta.json").is_file():
            return None  # never saved yet: a first build, not a problem
        try:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
            if meta.get("format") != INDEX_FORMAT or meta.get("epoch") != epoch:
                return None
            index = cls()
            index.seq = int(meta["seq"])
            for name in meta["models"]:
                index._model_id(str(name))
            for i, (series, dim) in enumerate(meta["parts"]):
                key = (str(series), int(dim))
                vectors = np.load(folder / f"s{i}.vectors.npy")
                rows = {a: np.load(folder / f"s{i}.{a}.npy") for a in _ROW_ARRAYS}
                if any(len(a) != len(vectors) for a in rows.values()) or vectors.shape[1:] != (key[1],):
                    return None
                part = _Series(key[1])
                part.vectors, part.size = vectors, len(vectors)
                for a, array in rows.items():
                    setattr(part, a, array)
                index._parts[key] = part
                index._where.update((int(r), (key, slot)) for slot, r in enumerate(part.rowids.tolist()))
                counts = index._models.setdefault(key[0], {})
                for model_id, n in zip(*np.unique(part.models, return_counts=True), strict=True):
                    if not 0 <= int(model_id) < len(index.model_names):
                        return None
                    counts[int(model_id)] = counts.get(int(model_id), 0) + int(n)
            return index
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            log.warning("vector index at %s unreadable (%s); rebuilding", folder, e)
            return None
