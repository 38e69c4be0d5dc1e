"""The lexical index saved in one pass over its postings: the files the compaction-based save wrote."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from vdoctor.retrieval.tokens import TOKENIZER
from vdoctor.stores.lexindex import _DOC_ARRAYS, INDEX_FORMAT, SeriesLexicalIndex
from vdoctor.stores.vecindex import fresh_temp_folder, swap_in

pytestmark = pytest.mark.unit

WORDS = [f"w{i}" for i in range(60)] + ["电", "池", "电池", "p0a7f"]


def plain_save(index: SeriesLexicalIndex, folder: Path, epoch: str) -> None:
    """The save this replaced: each series compacted term by term, then written."""
    tmp = fresh_temp_folder(folder)
    names = sorted(index._parts)
    for i, name in enumerate(names):
        part, _ = index._parts[name].compacted()
        for a in _DOC_ARRAYS:
            np.save(tmp / f"s{i}.{a}.npy", getattr(part, a)[: part.size])
        terms = sorted(part.terms, key=part.terms.__getitem__)
        lengths = np.array([len(part.docs[part.terms[t]]) for t in terms], dtype=np.int64)
        np.save(tmp / f"s{i}.offsets.npy", np.concatenate([[0], np.cumsum(lengths)]))
        np.save(tmp / f"s{i}.docs.npy", np.frombuffer(b"".join(bytes(part.docs[part.terms[t]]) for t in terms),
                                                      dtype=np.int32))  # fmt: skip
        np.save(tmp / f"s{i}.tfs.npy", np.frombuffer(b"".join(bytes(part.tfs[part.terms[t]]) for t in terms),
                                                     dtype=np.uint16))  # fmt: skip
        (tmp / f"s{i}.terms.json").write_text(json.dumps(terms, ensure_ascii=False), encoding="utf-8")
    meta = {"format": INDEX_FORMAT, "tokenizer": TOKENIZER, "epoch": epoch, "seq": index.seq, "series": names}
    (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    swap_in(tmp, folder)


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_saved_files_are_those_of_the_compacted_index(tmp_path: Path) -> None:
    rng = random.Random(21)
    for trial in range(40):
        index = SeriesLexicalIndex()
        index.seq = trial
        for _ in range(rng.randint(0, 300)):
            rowid = rng.randint(-40, 120)
            span = None if rng.random() < 0.25 else (rng.randint(0, 5), rng.randint(3, 10))
            tokens = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 30)))
            index.apply(rowid, rng.choice(["EV-A", "EV-B", "PHEV"]), f"V{rng.randint(0, 9)}", span, tokens)
        index.save(tmp_path / "new", "e")
        plain_save(index, tmp_path / "plain", "e")
        assert files(tmp_path / "new") == files(tmp_path / "plain"), trial
        loaded = SeriesLexicalIndex.load(tmp_path / "new", "e")
        assert loaded is not None and len(loaded) == len(index)
        for name in index._parts:
            for at in (0, 4, 9):
                terms = rng.sample(WORDS, 5)
                assert loaded.search(name, "V1", terms, 10, at) == index.search(name, "V1", terms, 10, at)
