"""The embedding child's frames: texts arrive as sent, and a reply read whole or in parts gives the same vectors.

The child here runs the hashing embedder (no weights), written to the pipe
as the real child writes, or a few bytes at a time, so that the parent's
one-read path and its reading of the rest are both compared with the
vectors of the same model in this process.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from vdoctor.embedders import child as child_module
from vdoctor.embedders.child import ChildProcessEmbedder, read_request, request_frame
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.errors import ModelError

pytestmark = pytest.mark.unit

DIM = 64
# A child of the hashing embedder: "boom" fails the call; CHUNK > 0 writes every frame that many bytes at a time.
FAKE_CHILD = """
import sys, time
from vdoctor.embedders import child, models
from vdoctor.embedders.hashing import HashingEmbedder

class Failing(HashingEmbedder):
    def embed(self, texts):
        if "boom" in texts:
            raise RuntimeError("boom " + "x" * 5000)
        return super().embed(texts)

class Trickle:
    def __init__(self, out, chunk):
        self.out, self.chunk = out, chunk
    def write(self, data):
        for at in range(0, len(data), self.chunk):
            self.out.write(data[at : at + self.chunk])
            self.out.flush()
            if at < 64:  # the parent's first read finds a part (of the header, at 7 bytes a write)
                time.sleep(0.0005)
    def flush(self):
        self.out.flush()

models.load_model = lambda name: Failing(DIM)
chunk = CHUNK
out = sys.stdout.buffer
child.serve("hashing", sys.stdin.buffer, Trickle(out, chunk) if chunk else out)
"""

TEXTS = [
    "",
    "cell voltage difference too large",
    "单体压差过大，电芯电压差得很多",
    "P0A7F | soc_pct=36% | signal://LSVAU2180N2000001/bms\nsecond line\ttab",
    "emoji 🚗🔋 and a NUL \x00 inside",
    "x" * 3000,
]


def random_texts(rng: random.Random, n: int) -> list[str]:
    alphabet = "ab c\n\x00é电池包🚗\t|=\\\"'{}[]"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(n)]


def test_a_request_frame_carries_the_texts_and_their_kind() -> None:
    rng = random.Random(5)
    for texts in [TEXTS, [""], ["a"], *(random_texts(rng, rng.randint(1, 12)) for _ in range(200))]:
        for queries in (True, False):
            frame = request_frame(texts, queries)
            (length,) = child_module._LENGTH.unpack_from(frame)
            assert length == len(frame) - child_module._LENGTH.size
            assert read_request(frame[child_module._LENGTH.size :]) == (queries, texts)


@pytest.fixture(params=[0, 7, 1000], ids=["whole", "7-byte-writes", "1000-byte-writes"])
def child(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ChildProcessEmbedder:
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD.replace("DIM", str(DIM)).replace("CHUNK", str(request.param)))
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    python.chmod(0o755)
    monkeypatch.setattr(child_module, "python_executable", lambda: str(python))
    embedder = ChildProcessEmbedder("hashing")
    request.addfinalizer(embedder.close)
    return embedder


def test_the_childs_vectors_are_the_models_in_this_process(child: ChildProcessEmbedder) -> None:
    model = HashingEmbedder(DIM)
    assert (child.name, child.dim) == (model.name, model.dim)
    rng = random.Random(11)
    for texts in [TEXTS, TEXTS[1:2], *(random_texts(rng, rng.randint(1, 9)) for _ in range(15))]:
        got = child.embed(texts)
        assert got.shape == (len(texts), DIM) and got.dtype == np.float32
        assert got.tobytes() == model.embed(texts).tobytes()
        assert child.embed_queries(texts).tobytes() == model.embed_queries(texts).tobytes()
    assert child.embed([]).shape == (0, DIM)
    many = [f"text {i} 电池" for i in range(700)]  # a reply larger than a pipe holds (64 KiB)
    assert child.embed_queries(many).tobytes() == model.embed_queries(many).tobytes()


def test_a_failed_call_says_why_and_leaves_nothing_on_the_pipe(child: ChildProcessEmbedder) -> None:
    with pytest.raises(ModelError, match="embedding failed: RuntimeError: boom x"):
        child.embed(["a", "boom"])
    assert child.embed(TEXTS).tobytes() == HashingEmbedder(DIM).embed(TEXTS).tobytes()


def test_a_child_that_died_is_started_again_and_the_call_sent_once_more(child: ChildProcessEmbedder) -> None:
    expected = HashingEmbedder(DIM).embed(TEXTS).tobytes()
    assert child.embed(TEXTS).tobytes() == expected
    assert child._proc is not None
    child._proc.kill()
    child._proc.wait()
    assert child.embed(TEXTS).tobytes() == expected


def test_a_child_that_cannot_be_started_again_is_a_model_that_is_down(
    child: ChildProcessEmbedder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The engine degrades recall on a ModelError (and flags a case it could not write); any other error
    would make the event a dead letter."""
    assert child.embed(TEXTS).shape == (len(TEXTS), DIM)
    gone = tmp_path / "gone-python"
    gone.write_text("#!/bin/sh\nexit 3\n")
    gone.chmod(0o755)
    monkeypatch.setattr(child_module, "python_executable", lambda: str(gone))
    assert child._proc is not None
    child._proc.kill()
    child._proc.wait()
    with pytest.raises(ModelError, match="embedding child failed twice"):
        child.embed_queries(TEXTS)
