"""The long-term memory (L3) store interface, shared by every backend.

Per-VIN isolation is enforced here, in the API, not left to callers: own
history takes a VIN and returns that VIN's records only; similar-case search
takes the asking VIN and never returns it, and only returns verified
(recheck_ok = true), valid records of the same series.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import numpy as np
import numpy.typing as npt

from vdoctor.records import MemoryRecord


@dataclass(frozen=True)
class Scored:
    record: MemoryRecord
    score: float


@dataclass(frozen=True)
class SimilarQuery:
    """Similar verified cases of other vehicles of one series."""

    exclude_vin: str
    series: str
    vector: npt.NDArray[np.float32]
    k: int


class MemoryStore(Protocol):
    """Every backend implements this; one contract test suite runs over all of them."""

    def upsert(self, record: MemoryRecord) -> None:
        """Insert, or replace the whole row with the same (vin, session_id)."""
        ...

    def upsert_many(self, records: list[MemoryRecord]) -> None:
        """Upsert a batch (one round trip where the backend allows; Doris wants batches)."""
        ...

    def get(self, vin: str, session_id: str) -> MemoryRecord | None: ...

    def own_history(self, vin: str, since: datetime, limit: int) -> list[MemoryRecord]:
        """Valid records of this VIN concluded at or after ``since``, newest first."""
        ...

    def similar(self, query: SimilarQuery) -> list[Scored]:
        """Top-k by inner product among valid, recheck_ok = true records of the series, other VINs."""
        ...

    def set_recheck(self, vin: str, session_id: str, ok: bool) -> bool:
        """Store a recheck result; False when no such record exists."""
        ...

    def soft_delete(self, vin: str) -> int:
        """Mark every record of the VIN invalid (kept for audit, never recalled). Returns rows."""
        ...

    def history(self, vin: str) -> list[MemoryRecord]:
        """Every record of the VIN, valid or not, newest first (for audit and the CLI)."""
        ...

    def by_prompt_version(self, prompt_version: str, limit: int) -> list[MemoryRecord]:
        """Valid records written by this summary-prompt version, by (vin, session_id); for re-extraction."""
        ...

    def prompt_versions(self) -> list[str]:
        """Every summary-prompt version that valid records were written with, sorted."""
        ...

    def find_duplicate(self, vin: str, root_cause: str, since: datetime) -> MemoryRecord | None:
        """The newest valid record of this VIN with this root cause concluded at or after ``since``.

        The write policy uses it to update an existing case instead of adding a
        near-identical one (same vin and root_cause within 30 days).
        """
        ...

    def count(self) -> int: ...

    def close(self) -> None: ...


def top_k(
    records: list[MemoryRecord], matrix: npt.NDArray[np.float32], vector: npt.NDArray[np.float32], k: int
) -> list[Scored]:
    """Rank candidate records by inner product with the (normalised) query vector."""
    if not records or k <= 0:
        return []
    scores = matrix @ vector.astype(np.float32)
    if len(records) > k:
        idx = np.argpartition(-scores, k - 1)[:k]
    else:
        idx = np.arange(len(records))
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    return [Scored(records[i], float(scores[i])) for i in idx]
