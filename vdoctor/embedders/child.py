"""A model embedder run in a child process, so that its forward pass never waits for the job's GIL.

In Flink's thread mode every run of a TaskManager shares one Python
interpreter. A model's forward pass is a few dozen numpy calls; each lets go
of the GIL for its arithmetic and must take it back to go on, and with
hundreds of runs in flight each taking back waits behind the others. So the
embeddings, ~4.4 ms of CPU per run on the concurrency bench's workload with
use-m3, ran in turn with the rest of the Python work instead of on the other
core. ``bench/concurrency.py`` with use-m3, both ways back to back in one
session: 0.54 / 0.56 / 0.57 of the bound at 64 @ 200 ms, 256 @ 1 s and
512 @ 2 s in this process, 0.66 / 0.71 / 0.72 in the child.

Here the model lives in a child Python process (``python -m
vdoctor.embedders.child <name>``) with its own interpreter; callers send it
texts over a pipe and wait on the reply without holding the GIL. The vectors
are the model's own, bit for bit: the child runs the same class. One child
per model per process; callers take turns (``batching.CoalescingEmbedder`` in
front shares a call among those that would wait). A child that dies is
started again on the next call, which is sent once more.

Frames: a request is a 4-byte big-endian length and a JSON object
``{"queries": bool, "texts": [...]}``; a reply is two big-endian int32
(rows, dim) and rows x dim float32s, or (-1, n) and an n-byte UTF-8 error.
The child's first reply, before any request, names the model: (0, dim) and
the name's bytes.
"""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import numpy as np

from vdoctor.embedders.base import Vectors
from vdoctor.errors import ConfigError

_HEADER = struct.Struct(">ii")
_LENGTH = struct.Struct(">I")
# How long the child may take to load its weights and name itself.
START_TIMEOUT_S = 120.0


def python_executable() -> str:
    """This environment's Python: ``sys.executable`` where it is one (inside a TaskManager's JVM, where
    the interpreter is embedded, it names the JVM or nothing), else the one beside ``sys.prefix``."""
    exe = Path(sys.executable) if sys.executable else None
    if exe is not None and exe.name.startswith("python") and exe.is_file():
        return str(exe)
    for name in (f"python{sys.version_info.major}.{sys.version_info.minor}", "python3", "python"):
        candidate = Path(sys.prefix) / "bin" / name
        if candidate.is_file():
            return str(candidate)
    raise ConfigError(f"no Python executable found for the embedding child (sys.prefix {sys.prefix})")


class ChildProcessEmbedder:
    """``name``'s model in a child process; the same vectors as the model in this one."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self.name, self.dim = self._start()

    def _start(self) -> tuple[str, int]:
        # The child imports this package from wherever this process did (a job's -pyfs zip included).
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._proc = subprocess.Popen(
            [python_executable(), "-m", "vdoctor.embedders.child", self.model],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        try:
            stdout = self._pipes()[1]
            if not select.select([stdout], [], [], START_TIMEOUT_S)[0]:
                self._stop(wait_s=0.0)
                raise ConfigError(f"the {self.model} embedding child did not start within {START_TIMEOUT_S:.0f} s")
            rows, size = self._header()
            payload = self._read(size)
        except BrokenPipeError as e:
            self._stop()
            message = f"the {self.model} embedding child exited while starting (see its standard error)"
            raise ConfigError(message) from e
        if rows != 0:
            self._stop()
            raise ConfigError(f"the {self.model} embedding child failed to start: {payload.decode('utf-8', 'replace')}")
        hello = json.loads(payload)
        return str(hello["name"]), int(hello["dim"])

    def _pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise BrokenPipeError("the embedding child is not running")
        return proc.stdin, proc.stdout

    def _read(self, n: int) -> bytes:
        data = self._pipes()[1].read(n)
        if len(data) != n:
            raise BrokenPipeError("the embedding child exited")
        return data

    def _header(self) -> tuple[int, int]:
        rows, size = _HEADER.unpack(self._read(_HEADER.size))
        return int(rows), int(size)

    def _call(self, texts: list[str], queries: bool) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        request = json.dumps({"queries": queries, "texts": texts}, ensure_ascii=False).encode("utf-8")
        with self._lock:
            try:
                return self._exchange(request)
            except OSError:  # the child died (a broken pipe, an early end of its output): once more, on a new one
                self._stop()
            try:
                return self._exchange(request)
            except OSError:
                self._stop()  # never leave a half-read reply on the pipe for the next call
                raise

    def _exchange(self, request: bytes) -> Vectors:
        """One request and its reply, with the lock held; a child that has exited is started first."""
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            self._start()
        stdin, _ = self._pipes()
        stdin.write(_LENGTH.pack(len(request)) + request)
        stdin.flush()
        rows, size = self._header()
        if rows < 0:
            problem = self._read(size).decode("utf-8", "replace")
            raise ValueError(f"{self.model} embedding failed: {problem}")
        vectors = np.frombuffer(self._read(rows * size * 4), dtype=np.float32)
        return vectors.reshape(rows, size)

    def embed(self, texts: list[str]) -> Vectors:
        return self._call(texts, queries=False)

    def embed_queries(self, texts: list[str]) -> Vectors:
        return self._call(texts, queries=True)

    def _stop(self, wait_s: float = 5.0) -> None:
        """Close the pipes (the child exits at their end) and reap it; kill it after ``wait_s``."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        """Stop the child (it also stops by itself when this process's end of the pipe closes)."""
        with self._lock:
            self._stop()


def serve(model: str, stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The child's loop: load the model, name it, then answer requests until the pipe closes."""
    from vdoctor.embedders.models import load_model

    try:
        embedder = load_model(model)
    except Exception as e:  # reported to the parent, which raises it
        message = f"{type(e).__name__}: {e}".encode()
        stdout.write(_HEADER.pack(1, len(message)) + message)
        stdout.flush()
        return
    hello = json.dumps({"name": embedder.name, "dim": embedder.dim}).encode()
    stdout.write(_HEADER.pack(0, len(hello)) + hello)
    stdout.flush()
    while True:
        head = stdin.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            return  # the parent closed the pipe (or exited)
        request = json.loads(stdin.read(_LENGTH.unpack(head)[0]))
        try:
            texts = [str(t) for t in request["texts"]]
            rows = embedder.embed_queries(texts) if request["queries"] else embedder.embed(texts)
            out = np.ascontiguousarray(rows, dtype=np.float32)
            stdout.write(_HEADER.pack(out.shape[0], out.shape[1]) + out.tobytes())
        except Exception as e:  # one bad request does not stop the child
            message = f"{type(e).__name__}: {e}".encode()
            stdout.write(_HEADER.pack(-1, len(message)) + message)
        stdout.flush()


if __name__ == "__main__":
    # Frames go to the pipe the parent reads; anything else written to standard output (a library's
    # print) goes to standard error instead of into a frame.
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.argv[1], sys.stdin.buffer, frames)
