"""The embedded store's lexical index: BM25 per series, beside the vector index, over the same versions.

It holds exactly what the vector index holds (verified, valid versions of
records, each with the event-time span in which it is so, the asking vehicle
masked out by its VIN hash) and follows the database the same way (the change
``seq``; saved beside the file as ``<db>.lexindex/``, caught up on open and
rebuilt when missing, foreign, corrupt, or built with another tokeniser), so
a lexical search sees the same set, as of the same time, as a vector search.

Why not SQLite's FTS5: its MATCH runs over every row of the table before any
filter (series, verified, event time), and common Chinese characters have
posting lists as long as the table; ``bench/recall_latency.py --fts5`` times
both at 1M records in one run.

Each series is an inverted index of the versions' tokens (``search_tokens``:
``retrieval.tokens`` of ``retrieval.text.record_text``). Documents are
numbered as they are added; a version that changes or leaves is marked dead
(its postings stay until the series is compacted, when the dead outnumber the
live, and when it is saved). BM25 (``retrieval.bm25``) is exact over the
versions a session may be given: N, the average length and each term's
document frequency count the series' versions that hold at the session's
time, its own vehicle's left out (what the in-memory twin scores over), so a
score never depends on what was written later.
"""

from __future__ import annotations

import json
import logging
import math
from array import array
from collections import Counter
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from vdoctor.retrieval.bm25 import BM25_B, BM25_K1, contenders
from vdoctor.retrieval.tokens import TOKENIZER
from vdoctor.stores.vecindex import fresh_temp_folder, swap_in, vin_hash

log = logging.getLogger(__name__)

INDEX_FORMAT = 1
_MIN_CAPACITY = 64
_GROWTH = 1.5
# Compact a series when its dead documents outnumber the live ones (and there are enough to bother).
_COMPACT_MIN_DEAD = 1024
_DOC_ARRAYS = ("rowids", "vins", "starts", "ends", "lengths")
# A query's postings scored in one pass up to this many, term by term beyond: one pass saves the numpy
# calls of each term but not the arithmetic, and holds several arrays of this length at once
# (bench/lexical_search.py: 0.71-0.74x the time at 160 postings a query, 0.86-1.02x at 15,000-77,000,
# 1.01-1.02x at 154,000).
ONE_PASS_POSTINGS = 1 << 17
# The end of a dead document's span: before every time, so a search's span test masks it out.
_DEAD_END = int(np.iinfo(np.int64).min)


@dataclass
class _Part:
    """One series: per-document arrays by document number, and the postings of each term."""

    terms: dict[str, int] = field(default_factory=dict)
    docs: list[array[int]] = field(default_factory=list)  # term id -> document numbers ('i')
    tfs: list[array[int]] = field(default_factory=list)  # term id -> term frequencies ('H')
    rowids: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(_MIN_CAPACITY, dtype=np.int64))
    vins: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(_MIN_CAPACITY, dtype=np.int64))
    starts: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(_MIN_CAPACITY, dtype=np.int64))
    ends: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(_MIN_CAPACITY, dtype=np.int64))
    lengths: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(_MIN_CAPACITY, dtype=np.int64))
    alive: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(_MIN_CAPACITY, dtype=bool))
    size: int = 0  # documents numbered so far (live and dead)
    live: int = 0
    live_length: int = 0

    def _grow(self, need: int) -> None:
        cap = len(self.rowids)
        if need <= cap:
            return
        new_cap = max(need, int(cap * _GROWTH) + 1)
        for name in (*_DOC_ARRAYS, "alive"):
            old = getattr(self, name)
            new = np.zeros(new_cap, dtype=old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def add(self, rowid: int, vin_h: int, span: tuple[int, int], tokens: list[str]) -> int:
        self._grow(self.size + 1)
        doc = self.size
        self.rowids[doc], self.vins[doc] = rowid, vin_h
        self.starts[doc], self.ends[doc] = span
        self.lengths[doc] = len(tokens)
        self.alive[doc] = True
        terms, docs, tfs = self.terms, self.docs, self.tfs
        for term, tf in Counter(tokens).items():
            term_id = terms.get(term)
            if term_id is None:
                term_id = terms[term] = len(docs)
                docs.append(array("i"))
                tfs.append(array("H"))
            docs[term_id].append(doc)
            tfs[term_id].append(tf if tf < 65535 else 65535)
        self.size += 1
        self.live += 1
        self.live_length += len(tokens)
        return doc

    def kill(self, doc: int) -> None:
        self.alive[doc] = False
        self.ends[doc] = _DEAD_END  # never visible: ``search`` needs no look at ``alive``
        self.live -= 1
        self.live_length -= int(self.lengths[doc])

    def saved(
        self,
    ) -> tuple[list[npt.NDArray[np.int64]], list[str], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
        """What ``save`` writes of this series, as ``compacted`` would leave it: the live documents'
        arrays (``_DOC_ARRAYS``), the terms with a live posting in term-id order, where each one's
        postings start (and the end of the last), and the postings (document numbers without the
        dead, term frequencies) one term after the other.

        In one pass over all the postings: term by term (``compacted``), a handful of numpy calls per
        term for a fleet's thousands of terms made saving the index most of closing the store.
        """
        keep = np.flatnonzero(self.alive[: self.size])
        renumber = np.full(self.size, -1, dtype=np.int64)
        renumber[keep] = np.arange(len(keep))
        sizes = [len(docs) for docs in self.docs]
        new = renumber[np.frombuffer(b"".join(self.docs), dtype=np.int32)]
        kept = new >= 0
        # Per term id (0, 1, ...: its place in self.docs), how many of its postings are of live documents.
        live_postings = np.bincount(np.repeat(np.arange(len(sizes)), sizes)[kept], minlength=len(sizes))
        by_id = sorted(self.terms, key=self.terms.__getitem__)
        terms = [term for term, live in zip(by_id, live_postings.tolist(), strict=True) if live]
        offsets = np.concatenate([[0], np.cumsum(live_postings[live_postings > 0])])
        docs = new[kept].astype(np.int32)
        tfs = np.frombuffer(b"".join(self.tfs), dtype=np.uint16)[kept]
        return [getattr(self, a)[keep] for a in _DOC_ARRAYS], terms, offsets, docs, tfs

    def compacted(self) -> tuple[_Part, dict[int, int]]:
        """The same live documents renumbered without the dead; returns it and rowid -> new number."""
        keep = np.flatnonzero(self.alive[: self.size])
        renumber = np.full(self.size, -1, dtype=np.int64)
        renumber[keep] = np.arange(len(keep))
        out = _Part()
        out._grow(len(keep))
        for name in _DOC_ARRAYS:
            getattr(out, name)[: len(keep)] = getattr(self, name)[keep]
        out.alive[: len(keep)] = True
        out.size = out.live = len(keep)
        out.live_length = self.live_length
        for term, term_id in self.terms.items():
            docs = np.frombuffer(self.docs[term_id], dtype=np.int32)
            new = renumber[docs]
            kept = new >= 0
            if not kept.any():
                continue
            out.terms[term] = len(out.docs)
            out.docs.append(_int_array(new[kept]))
            out.tfs.append(_tf_array(np.frombuffer(self.tfs[term_id], dtype=np.uint16)[kept]))
        return out, {int(self.rowids[d]): int(renumber[d]) for d in keep}

    def search(self, terms: list[str], exclude: int, at: int, k: int) -> list[tuple[int, float]]:
        """BM25 top-k (more when tied at the k-th) over the versions a session of another vehicle may get at ``at``.

        N, the average length and each term's document frequency are taken over
        those versions alone (as the in-memory twin does), never over versions
        that hold at another time: a score must not depend on what was written
        after ``at`` (nor on the order in which the job applied it).
        """
        n = self.size
        if not self.live or k <= 0:
            return []
        visible = self.ends[:n] > at  # a dead document's end is _DEAD_END
        visible &= self.starts[:n] <= at
        visible &= self.vins[:n] != exclude
        count = int(np.count_nonzero(visible))
        if not count:
            return []
        term_ids = [t for t in map(self.terms.get, dict.fromkeys(terms)) if t is not None]
        if not term_ids:
            return []
        lengths = self.lengths[:n]
        # The mean without numpy's own calls: the integer sum is exact, and so is numpy's float64 sum below 2**53.
        avg = int(lengths[visible].sum()) / count or 1.0
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths / avg)
        postings = [self.docs[t] for t in term_ids]
        tfs = [self.tfs[t] for t in term_ids]
        scores = _bm25_scores(postings, tfs, visible, count, norm)
        hits = contenders(scores, np.flatnonzero(scores > 0), k)
        # Equal scores are common here (cases of one fault told alike): the cut at k breaks ties by the
        # vehicle (its VIN's hash), never by insertion order, and keeps every row tied with the k-th on
        # both, so which rows make it does not depend on the order the job wrote them in. (Keeping every
        # row tied on the score alone, as the vector index does, fetched thousands of rows at 1M records.)
        rowids, vins, hit_scores = self.rowids[hits], self.vins[hits], scores[hits]
        order = np.lexsort((rowids, vins, -hit_scores))
        if len(order) > k:
            last, rest = order[k - 1], order[k:]
            tied = (hit_scores[rest] == hit_scores[last]) & (vins[rest] == vins[last])
            order = np.concatenate([order[:k], rest[tied]])
        return list(zip(rowids[order].tolist(), hit_scores[order].tolist(), strict=True))


def _idf(count: int, df: int) -> float:
    return math.log1p((count - df + 0.5) / (df + 0.5))


def _bm25_scores(
    postings: list[array[int]],
    tfs: list[array[int]],
    visible: npt.NDArray[np.bool_],
    count: int,
    norm: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """BM25 of every visible document for the query terms whose postings (document numbers,
    ``_Part.docs``) and term frequencies (``_Part.tfs``) are given; 0 for the others.

    Up to ``ONE_PASS_POSTINGS`` postings in all, every term's postings go into one array, scored with a
    handful of numpy calls instead of a handful per term: at fleet sizes (a few thousand versions per
    series, ~20-30 terms per query) the calls, not the arithmetic, were most of a search. Each document's
    contributions are still added in the terms' order, starting from zero, so both ways give the same
    scores to the last bit. (A term none of whose documents is visible adds nothing; term by term it is
    skipped. In one pass the invisible documents' postings weigh 0: a weight is positive, times 1 it is
    itself and times 0 it is +0.0, so the visible documents' sums are those of term by term, and the
    others are 0.0, as zeroed there.)
    """
    sizes = [len(docs) for docs in postings]
    if sum(sizes) > ONE_PASS_POSTINGS:
        scores = np.zeros(len(visible), dtype=np.float64)
        for term_docs, term_tfs in zip(postings, tfs, strict=True):
            docs = np.frombuffer(term_docs, dtype=np.int32)
            df = int(np.count_nonzero(visible[docs]))
            if not df:
                continue
            # Scored over the whole posting list (no copy of the visible part).
            tf = np.frombuffer(term_tfs, dtype=np.uint16).astype(np.float64)
            scores[docs] += _idf(count, df) * tf * (BM25_K1 + 1.0) / (tf + norm[docs])
        scores[~visible] = 0.0
        return scores
    firsts = np.array([0, *accumulate(sizes[:-1])], dtype=np.intp)
    # The terms' arrays joined as bytes: one numpy call, not one view per term and a concatenation.
    docs = np.frombuffer(b"".join(postings), dtype=np.int32)
    seen = visible[docs]
    dfs = np.add.reduceat(seen, firsts, dtype=np.intp).tolist()
    idf = np.repeat(np.array([_idf(count, df) for df in dfs], dtype=np.float64), sizes)
    tf = np.frombuffer(b"".join(tfs), dtype=np.uint16).astype(np.float64)
    weights = idf * tf * (BM25_K1 + 1.0) / (tf + norm[docs])
    weights *= seen
    # (With weights, bincount's sums are float64; its stubs say integers.)
    return cast("npt.NDArray[np.float64]", np.bincount(docs, weights=weights, minlength=len(visible)))


def _int_array(values: npt.NDArray[np.integer[Any]]) -> array[int]:
    out = array("i")
    out.frombytes(np.ascontiguousarray(values, dtype=np.int32).tobytes())
    return out


def _tf_array(values: npt.NDArray[np.integer[Any]]) -> array[int]:
    out = array("H")
    out.frombytes(np.ascontiguousarray(values, dtype=np.uint16).tobytes())
    return out


class SeriesLexicalIndex:
    """BM25 per series over verified, valid record versions, by event-time span (rows named like the vector index)."""

    def __init__(self) -> None:
        self.seq = 0
        self._parts: dict[str, _Part] = {}
        self._where: dict[int, tuple[str, int]] = {}  # rowid -> (series, document number)

    def __len__(self) -> int:
        return len(self._where)

    def apply(self, rowid: int, series: str, vin: str, span: tuple[int, int] | None, tokens: str | None) -> None:
        """Bring one row up to date: present (with these tokens and span) iff it is ever eligible for recall."""
        self._discard(rowid)
        if span is None or span[0] >= span[1] or tokens is None:
            return
        part = self._parts.get(series)
        if part is None:
            part = self._parts[series] = _Part()
        self._where[rowid] = (series, part.add(rowid, vin_hash(vin), span, tokens.split()))

    def _discard(self, rowid: int) -> None:
        hit = self._where.pop(rowid, None)
        if hit is None:
            return
        series, doc = hit
        part = self._parts[series]
        part.kill(doc)
        dead = part.size - part.live
        if dead >= _COMPACT_MIN_DEAD and dead > part.live:
            compact, renumbered = part.compacted()
            self._parts[series] = compact
            self._where.update((r, (series, d)) for r, d in renumbered.items())

    def search(self, series: str, exclude_vin: str, terms: list[str], k: int, at: int) -> list[tuple[int, float]]:
        """Top-k (rowid, BM25) of the series at event time ``at``, sharing a term; the excluded VIN masked out."""
        part = self._parts.get(series)
        if part is None or not terms:
            return []
        return part.search(terms, vin_hash(exclude_vin), at, k)

    # -- persistence ---------------------------------------------------------------

    def save(self, folder: Path, epoch: str) -> None:
        """Write the index atomically: per series, the live documents and their postings (compacted)."""
        tmp = fresh_temp_folder(folder)
        names = sorted(self._parts)
        for i, name in enumerate(names):
            doc_arrays, terms, offsets, docs, tfs = self._parts[name].saved()
            for a, values in zip(_DOC_ARRAYS, doc_arrays, strict=True):
                np.save(tmp / f"s{i}.{a}.npy", values)
            np.save(tmp / f"s{i}.offsets.npy", offsets)
            np.save(tmp / f"s{i}.docs.npy", docs)
            np.save(tmp / f"s{i}.tfs.npy", tfs)
            (tmp / f"s{i}.terms.json").write_text(json.dumps(terms, ensure_ascii=False), encoding="utf-8")
        meta = {"format": INDEX_FORMAT, "tokenizer": TOKENIZER, "epoch": epoch, "seq": self.seq, "series": names}
        (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        swap_in(tmp, folder)

    @classmethod
    def load(cls, folder: Path, epoch: str) -> SeriesLexicalIndex | None:
        """The saved index if it exists, belongs to this database and used this tokeniser, else None (rebuild)."""
        if not (folder / "meta.json").is_file():
            return None
        try:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
            if meta.get("format") != INDEX_FORMAT or meta.get("epoch") != epoch or meta.get("tokenizer") != TOKENIZER:
                return None
            index = cls()
            index.seq = int(meta["seq"])
            for i, name in enumerate(meta["series"]):
                part = _Part()
                docs = {a: np.load(folder / f"s{i}.{a}.npy") for a in _DOC_ARRAYS}
                size = len(docs["rowids"])
                if any(len(v) != size for v in docs.values()):
                    return None
                part._grow(size)
                for a, values in docs.items():
                    getattr(part, a)[:size] = values
                part.alive[:size] = True
                part.size = part.live = size
                part.live_length = int(docs["lengths"].sum())
                offsets = np.load(folder / f"s{i}.offsets.npy")
                all_docs = np.load(folder / f"s{i}.docs.npy")
                all_tfs = np.load(folder / f"s{i}.tfs.npy")
                terms = json.loads((folder / f"s{i}.terms.json").read_text(encoding="utf-8"))
                if len(offsets) != len(terms) + 1 or offsets[-1] != len(all_docs) or len(all_tfs) != len(all_docs):
                    return None
                if len(all_docs) and (all_docs.min() < 0 or all_docs.max() >= size):
                    return None
                for term_id, term in enumerate(terms):
                    lo, hi = int(offsets[term_id]), int(offsets[term_id + 1])
                    part.terms[str(term)] = term_id
                    part.docs.append(_int_array(all_docs[lo:hi]))
                    part.tfs.append(_tf_array(all_tfs[lo:hi]))
                index._parts[str(name)] = part
                index._where.update((int(r), (str(name), d)) for d, r in enumerate(part.rowids[:size].tolist()))
            return index
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            log.warning("lexical index at %s unreadable (%s); rebuilding", folder, e)
            return None
