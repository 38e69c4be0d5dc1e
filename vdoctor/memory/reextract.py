"""Re-extraction: rewrite long-term summaries when the summary prompt changes.

Every final record keeps the summarizer's request (its source, required facts
and event lines) beside the summary. When the summary prompt's version moves
on, ``reextract`` walks the records written with older versions, summarizes
each request again with the current summarizer, checks fidelity, re-embeds
what the record is found by (``retrieval.text``, one batch per round trip),
and upserts the record with the new version. A record whose new summary fails
the check keeps its old one (and is counted); a record written before sources
were kept is skipped (and counted). The walk is resumable: records already at
the new version are not touched, so running it again after an interruption
picks up where it stopped. Records of a newer version (written by a later
release, before a rollback) are left as they are, and their versions named.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from vdoctor.embedders import Embedder, embedder_id
from vdoctor.memory.summarizer import (
    FidelityMetrics,
    Summarizer,
    request_from_json,
    request_to_json,
    summarize_checked,
)
from vdoctor.memory.summary import upgrade_case_request
from vdoctor.records import RecordKind
from vdoctor.retrieval.text import record_dense_text
from vdoctor.stores.base import MemoryStore

# Records per store round trip: small enough to show progress often.
BATCH = 100


@dataclass
class ReextractReport:
    target_version: str
    seen: int = 0
    rewritten: int = 0
    no_source: int = 0
    failed_check: int = 0
    # Prompt versions newer than the target (a later release's, before a rollback): their records left alone.
    newer: list[str] = field(default_factory=list)

    def render(self) -> str:
        return (
            f"re-extracted to {self.target_version}: {self.rewritten} rewritten, {self.no_source} without a stored "
            f"source (kept as they are), {self.failed_check} failed the fidelity check (old summary kept); "
            f"{self.seen} records of older versions seen"
            + (f"; records of newer versions left as they are: {', '.join(self.newer)}" if self.newer else "")
        )


_VERSION_RE = re.compile(r"^(.*)-v(\d+)$")


def is_newer(version: str, target: str) -> bool:
    """Whether ``version`` is a later one of ``target``'s prompt (``case-summary-v4`` of ``case-summary-v3``)."""
    mine, theirs = _VERSION_RE.match(version), _VERSION_RE.match(target)
    return bool(mine and theirs and mine.group(1) == theirs.group(1) and int(mine.group(2)) > int(theirs.group(2)))


def reextract(
    store: MemoryStore,
    summarizer: Summarizer,
    embedder: Embedder,
    target_version: str,
    progress: Callable[[ReextractReport], None] | None = None,
) -> ReextractReport:
    report = ReextractReport(target_version=target_version)
    metrics = FidelityMetrics()
    for version in store.prompt_versions():
        if version == target_version:
            continue
        if is_newer(version, target_version):
            # Written by a later release (a rollback since): rewritten, it would be labelled older than it is.
            report.newer.append(version)
            continue
        left_alone: set[tuple[str, str]] = set()
        while True:
            # Rewritten records leave this version, so each query returns the next ones.
            batch = [
                r
                for r in store.by_prompt_version(version, len(left_alone) + BATCH)
                if (r.vin, r.session_id) not in left_alone
            ]
            if not batch:
                break
            rewritten = []
            for record in batch:
                report.seen += 1
                key = (record.vin, record.session_id)
                if record.kind is not RecordKind.FINAL or not record.source:
                    report.no_source += 1
                    left_alone.add(key)
                    continue
                # A request stored before readings and decisions were kept is rebuilt from its source.
                request = upgrade_case_request(request_from_json(record.source))
                checked = summarize_checked(summarizer, request, metrics)
                if not checked.ok:
                    report.failed_check += 1
                    left_alone.add(key)
                    continue
                rewritten.append(
                    record.model_copy(
                        update={
                            "summary": checked.text,
                            "prompt_version": target_version,
                            "source": request_to_json(request),
                            "omitted": request.omitted,
                            "embedder": embedder_id(embedder),
                        }
                    )
                )
            if rewritten:
                # One batch through the embedder: what each record is found by, its new summary included.
                vectors = embedder.embed([record_dense_text(r) for r in rewritten])
                rewritten = [
                    r.model_copy(update={"summary_vec": [float(x) for x in v]})
                    for r, v in zip(rewritten, vectors, strict=True)
                ]
                store.upsert_many(rewritten)
                report.rewritten += len(rewritten)
            if progress is not None:
                progress(report)
    return report
