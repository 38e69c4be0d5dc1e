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

Frames: a request is a 4-byte big-endian length, then one byte (1: queries,
0: stored texts) and each text as a 4-byte big-endian length and its UTF-8
bytes; a reply is two big-endian int32 (rows, dim) and rows x dim float32s,
or (-1, n) and an n-byte UTF-8 error. The child's first reply, before any
request, names the model: (0, n) and an n-byte JSON object with its name
and dim, or (1, n) and an n-byte error if the model could not load.

The parent's side of a call is this interpreter's whole cost of an
embedding, and most of it is the wait: the two context switches, and the
steps around them run on cold caches (frombuffer and a header's unpack took
~15 us after the wake, ~0.5 warm). So a call does little: the request is
packed without JSON, written with one system call, and the reply read
whole, straight into the vectors, with one more. On ``bench/engine_cpu.py
--embed-child``'s calls (one text each) the parent's CPU per call went
from ~90 to ~79 us (5 runs each way, alternating, without the liveness
check each call still makes: ~1 us).
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
from vdoctor.errors import ConfigError, ModelError

_HEADER = struct.Struct(">ii")
_LENGTH = struct.Struct(">I")
# A request's frame length and its kind (1: queries).
_REQUEST = struct.Struct(">IB")
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
            bufsize=0,  # read and written with os.read / os.write on the descriptors
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

    def _read(self, n: int, data: bytes = b"") -> bytes:
        """``data`` and then the pipe's next bytes, up to ``n`` in all."""
        fd = self._pipes()[1].fileno()
        while len(data) < n:
            more = os.read(fd, n - len(data))
            if not more:
                raise BrokenPipeError("the embedding child exited")
            data += more
        return data

    def _header(self) -> tuple[int, int]:
        rows, size = _HEADER.unpack(self._read(_HEADER.size))
        return int(rows), int(size)

    def _call(self, texts: list[str], queries: bool) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        request = request_frame(texts, queries)
        with self._lock:
            try:
                return self._exchange(request, len(texts))
            except (OSError, ConfigError):  # the child died (a broken pipe, an early end of its output), or
                self._stop()  # could not be started again: once more, on a new one
            try:
                return self._exchange(request, len(texts))
            except (OSError, ConfigError) as e:
                self._stop()  # never leave a half-read reply on the pipe for the next call
                # A model that is down, as an embedding endpoint that is: the engine degrades recall and
                # flags the case it could not write, where any other error would be the event's dead letter.
                raise ModelError(f"the {self.model} embedding child failed twice: {e}") from None

    def _exchange(self, request: bytes, rows: int) -> Vectors:
        """One request and its reply, with the lock held; a child not running (never started, or exited since
        the last call) is started first, so a child that died while idle does not use up ``_call``'s retry."""
        if self._proc is None or self._proc.poll() is not None:  # poll: one waitpid(WNOHANG), ~1 us
            self._stop()
            self._start()
        stdin, stdout = self._pipes()
        # Everything a reply needs is made before the wait: the thread wakes from it on cold caches, where
        # each step costs several times what it does warm. The reply is then read whole, straight into the
        # vectors, by one system call (only one frame is ever in flight).
        vectors = np.empty((rows, self.dim), dtype=np.float32)
        header = bytearray(_HEADER.size)
        expected = _HEADER.pack(rows, self.dim)
        sent = os.write(stdin.fileno(), request)
        if sent < len(request):  # a pipe takes a large frame in parts
            view = memoryview(request)[sent:]
            while view:
                view = view[os.write(stdin.fileno(), view) :]
        got = os.readv(stdout.fileno(), [header, vectors.data])
        if got >= _HEADER.size and header == expected:
            # The vectors asked for; a large reply (more than a pipe holds) comes in parts.
            flat, done = vectors.data.cast("B"), got - _HEADER.size
            while done < vectors.nbytes:
                more = os.readv(stdout.fileno(), [flat[done:]])
                if not more:
                    raise BrokenPipeError("the embedding child exited")
                done += more
            return vectors
        return self._other_reply(bytes(header) + vectors.tobytes()[: max(0, got - _HEADER.size)], got)

    def _other_reply(self, start: bytes, got: int) -> Vectors:
        """A reply that is not the vectors asked for (an error), or whose header came in parts."""
        reply = self._read(_HEADER.size, start[:got])
        rows, size = _HEADER.unpack_from(reply)
        if rows < 0:
            problem = self._read(_HEADER.size + size, reply)[_HEADER.size :].decode("utf-8", "replace")
            raise ModelError(f"{self.model} embedding failed: {problem}")
        reply = self._read(_HEADER.size + rows * size * 4, reply)
        return np.frombuffer(reply, dtype=np.float32, offset=_HEADER.size).reshape(rows, size)

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
        try:
            queries, texts = read_request(stdin.read(_LENGTH.unpack(head)[0]))
            rows = embedder.embed_queries(texts) if queries else embedder.embed(texts)
            out = np.ascontiguousarray(rows, dtype=np.float32)
            stdout.write(_HEADER.pack(out.shape[0], out.shape[1]) + out.tobytes())
        except Exception as e:  # one bad request does not stop the child
            message = f"{type(e).__name__}: {e}".encode()
            stdout.write(_HEADER.pack(-1, len(message)) + message)
        stdout.flush()


def request_frame(texts: list[str], queries: bool) -> bytes:
    """A request's frame (see the module doc)."""
    encoded = [text.encode("utf-8") for text in texts]
    body = b"".join(_LENGTH.pack(len(e)) + e for e in encoded)
    return _REQUEST.pack(len(body) + 1, queries) + body


def read_request(body: bytes) -> tuple[bool, list[str]]:
    """(queries, texts) from a request's frame after its length."""
    texts, at = [], 1
    while at < len(body):
        (n,) = _LENGTH.unpack_from(body, at)
        texts.append(body[at + _LENGTH.size : at + _LENGTH.size + n].decode("utf-8"))
        at += _LENGTH.size + n
    return body[0] == 1, texts


if __name__ == "__main__":
    # Frames go to the pipe the parent reads; anything else written to standard output (a library's
    # print) goes to standard error instead of into a frame.
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.argv[1], sys.stdin.buffer, frames)
