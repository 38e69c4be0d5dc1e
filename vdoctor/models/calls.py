"""How the chat model's HTTP requests are sent: by the ``openai`` client in this process, or in a child process.

``ClientPoster`` sends a request body with the ``openai`` client's generic
POST and returns the reply's text; the client's errors become ``PostError``
(timed out, connection failed, or an HTTP status), which the model maps to
retry or fail.

``ChildPoster`` does the same in a child Python process (``python -m
vdoctor.models.calls``) that runs a ``ClientPoster``. Why: in Flink's thread
mode every run of a TaskManager shares one interpreter and one GIL, and the
``openai`` client's Python (building the request, its URL and headers, the
HTTP exchange, wrapping the reply) was ~1.5 ms of CPU per call that every
other run's Python waited behind. Here the job's side of a call is writing
the body to a pipe and waiting for the text, and the client runs on the
other core. The child is the same ``openai`` client over the same HTTP, with
the same timeouts and errors; retries, backoff and the reading of the reply
stay in the model.

Many calls are in flight at once (one per run waiting on the model): each
request carries a number, the child answers each on its own thread as its
reply comes, and a reader thread here hands every answer to the caller
waiting for that number. A child that exits fails the calls in flight as
connection failures (the model retries them) and is started again by the
next call. One child serves every model of a process with the same endpoint
(the chat model and a hosted summarizer), and stops when the last of them
closes, or when this process's end of its pipe closes.

Frames, big-endian: a request is (number u32, length u32, JSON
``{"path", "body"}``); a reply is (number u32, kind u8, HTTP status u16,
length u32, UTF-8 text): kind 0 the reply's text, 1 timed out, 2 connection
failed, 3 an HTTP error status. The first frame to the child is its
configuration (base URL, key, timeout) as JSON behind a length; it answers
with reply number 0 once its client is built. The key travels only on the
pipe, never on the command line or in the child's environment.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import select
import struct
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any

import openai

from vdoctor.embedders.child import python_executable
from vdoctor.errors import ConfigError
from vdoctor.openai_clients import ThreadClients, http_client

log = logging.getLogger(__name__)

_REQUEST = struct.Struct(">II")
_REPLY = struct.Struct(">IBHI")
_LENGTH = struct.Struct(">I")
OK, TIMED_OUT, CONNECTION, STATUS = 0, 1, 2, 3
# The key's variable (the openai package's, which settings read too): not passed on to the child.
_KEY_VARIABLE = "OPENAI_API_KEY"
# How long the child may take to start and build its client.
START_TIMEOUT_S = 60.0
# A call waits for the child's answer at most this much longer than its own timeout.
GRACE_S = 10.0
# Threads in the child: one per call in flight (the job's runs in flight are at most 4096).
CHILD_THREADS = 4096


class PostError(Exception):
    """A request that got no usable reply: ``kind`` TIMED_OUT, CONNECTION or STATUS (with ``status``)."""

    def __init__(self, kind: int, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


class ClientPoster:
    """The ``openai`` client's generic POST in this process, its errors as ``PostError``."""

    def __init__(self, base_url: str | None, api_key: str, timeout_s: float) -> None:
        # Retries are the model's (counted, logged, jittered); the client must not add its own.
        shared = http_client(timeout_s)
        self._clients = ThreadClients(
            lambda: openai.OpenAI(
                api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0, http_client=shared
            )
        )
        self._clients.get()  # a bad base URL fails here, not in the first run

    @property
    def clients(self) -> int:
        """``openai`` clients built so far (a few threads share each)."""
        return self._clients.size

    def client(self) -> openai.OpenAI:
        """This thread's ``openai`` client."""
        return self._clients.get()

    def post(self, path: str, body: dict[str, Any]) -> str:
        try:
            # The client's documented way to send a request as built, with the reply as text.
            return self._clients.get().post(path, cast_to=str, body=body)
        except openai.APITimeoutError as e:
            raise PostError(TIMED_OUT, str(e)) from e
        except openai.APIConnectionError as e:
            raise PostError(CONNECTION, str(e)) from e
        except openai.APIStatusError as e:
            raise PostError(STATUS, str(e), e.status_code) from e

    def close(self) -> None:
        self._clients.close()


@dataclass
class _Waiting:
    """A call waiting for its answer."""

    done: threading.Event = field(default_factory=threading.Event)
    kind: int = CONNECTION
    status: int = 0
    text: str = "the model call process exited"


class ChildPoster:
    """A ``ClientPoster`` in a child process; many calls in flight on one pair of pipes."""

    def __init__(self, base_url: str | None, api_key: str, timeout_s: float) -> None:
        self.base_url = base_url
        self.timeout_s = timeout_s
        self._secret = api_key
        self._config = json.dumps({"base_url": base_url, "api_key": api_key, "timeout_s": timeout_s}).encode()
        self._lock = threading.Lock()  # starting the child, and writing a request whole
        self._waiting: dict[int, _Waiting] = {}
        self._numbers = itertools.count(1)
        self._proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        with self._lock:
            self._start()

    def _start(self) -> None:
        """Start the child and wait for its client (the lock held)."""
        # The key goes on the pipe: not in the child's environment, nor on its command line.
        env = {k: v for k, v in os.environ.items() if k != _KEY_VARIABLE}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        proc = subprocess.Popen(
            [python_executable(), "-m", "vdoctor.models.calls"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(_LENGTH.pack(len(self._config)) + self._config)
            proc.stdin.flush()
            if not select.select([proc.stdout], [], [], START_TIMEOUT_S)[0]:
                raise ConfigError(f"the model call process did not start within {START_TIMEOUT_S:.0f} s")
            number, kind, _, text = _read_reply(proc.stdout)
            if number != 0 or kind != OK:
                text = text.replace(self._secret, "[redacted]") if self._secret else text
                raise ConfigError(f"the model call process failed to start: {text}")
        except (OSError, EOFError) as e:
            _stop(proc)
            raise ConfigError("the model call process exited while starting (see its standard error)") from e
        except ConfigError:
            _stop(proc)
            raise
        self._proc = proc
        self.starts += 1
        threading.Thread(target=self._read, args=(proc,), name="model-call-replies", daemon=True).start()

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        """Hand every answer to its caller; when the child's output ends, fail the calls still waiting."""
        assert proc.stdout is not None
        try:
            while True:
                number, kind, status, text = _read_reply(proc.stdout)
                with self._lock:
                    waiting = self._waiting.pop(number, None)
                if waiting is not None:
                    waiting.kind, waiting.status, waiting.text = kind, status, text
                    waiting.done.set()
        except (OSError, EOFError, ValueError):
            pass
        with self._lock:
            if self._proc is proc:
                self._proc = None
            # Every call still waiting went to this child (a new one starts only once this one is gone).
            lost, self._waiting = self._waiting, {}
        for waiting in lost.values():
            waiting.done.set()  # kind CONNECTION: the model retries it on a new child
        _stop(proc)

    def post(self, path: str, body: dict[str, Any]) -> str:
        request = json.dumps({"path": path, "body": body}, ensure_ascii=False).encode("utf-8")
        waiting = _Waiting()
        with self._lock:
            if self._proc is not None and self._proc.poll() is not None:
                # It exited and its reader has not yet failed the calls in flight: fail this one too.
                raise PostError(CONNECTION, waiting.text)
            if self._proc is None:
                self._start()
            proc = self._proc
            assert proc is not None and proc.stdin is not None
            number = next(self._numbers)
            self._waiting[number] = waiting
            try:
                proc.stdin.write(_REQUEST.pack(number, len(request)) + request)
                proc.stdin.flush()
            except OSError as e:
                self._waiting.pop(number, None)
                raise PostError(CONNECTION, waiting.text) from e
        if not waiting.done.wait(self.timeout_s + GRACE_S):
            with self._lock:
                self._waiting.pop(number, None)
            raise PostError(TIMED_OUT, f"no answer from the model call process within {self.timeout_s + GRACE_S:g} s")
        if waiting.kind != OK:
            raise PostError(waiting.kind, waiting.text, waiting.status)
        return waiting.text

    def close(self) -> None:
        """Stop the child (it also stops when this process's end of the pipe closes)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            _stop(proc)


def _read_exactly(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError("the stream ended")
    return data


def _read_reply(stream: IO[bytes]) -> tuple[int, int, int, str]:
    number, kind, status, size = _REPLY.unpack(_read_exactly(stream, _REPLY.size))
    return int(number), int(kind), int(status), _read_exactly(stream, size).decode("utf-8", "replace")


def _stop(proc: subprocess.Popen[bytes], wait_s: float = 5.0) -> None:
    """Close the pipes (the child exits at their end) and reap it; kill it after ``wait_s``."""
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class _Shared:
    """One child per endpoint in a process, shared by the models that use it, stopped when the last one closes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._children: dict[tuple[str | None, str, float], tuple[ChildPoster, int]] = {}

    def acquire(self, base_url: str | None, api_key: str, timeout_s: float) -> ChildPoster:
        key = (base_url, api_key, timeout_s)
        with self._lock:
            poster, users = self._children.get(key, (None, 0))
            if poster is None:
                poster = ChildPoster(base_url, api_key, timeout_s)
            self._children[key] = (poster, users + 1)
            return poster

    def release(self, poster: ChildPoster) -> None:
        with self._lock:
            for key, (shared, users) in list(self._children.items()):
                if shared is poster:
                    if users > 1:
                        self._children[key] = (shared, users - 1)
                        return
                    del self._children[key]
                    break
        poster.close()


SHARED = _Shared()


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The child's loop: build the client from the first frame, then answer requests until the pipe closes."""
    write = threading.Lock()

    def reply(number: int, kind: int, text: str, status: int = 0) -> None:
        data = text.encode("utf-8", "replace")
        with write:
            stdout.write(_REPLY.pack(number, kind, status, len(data)) + data)
            stdout.flush()

    try:
        config = json.loads(_read_exactly(stdin, _LENGTH.unpack(_read_exactly(stdin, _LENGTH.size))[0]))
        poster = ClientPoster(config["base_url"], config["api_key"], float(config["timeout_s"]))
    except Exception as e:  # reported to the parent, which raises it
        reply(0, CONNECTION, f"{type(e).__name__}: {e}")
        return
    reply(0, OK, "")

    def answer(number: int, request: bytes) -> None:
        try:
            asked = json.loads(request)
            reply(number, OK, poster.post(str(asked["path"]), asked["body"]))
        except PostError as e:
            reply(number, e.kind, str(e), e.status)
        except Exception as e:  # a request this child cannot send: a connection failure to the model
            reply(number, CONNECTION, f"{type(e).__name__}: {e}")

    calls = ThreadPoolExecutor(CHILD_THREADS, thread_name_prefix="model-call")
    while True:
        try:
            number, size = _REQUEST.unpack(_read_exactly(stdin, _REQUEST.size))
            request = _read_exactly(stdin, size)
        except EOFError:
            break  # the parent closed the pipe (or exited)
        calls.submit(answer, number, request)
    os._exit(0)  # calls in flight have no one to answer to


if __name__ == "__main__":
    # Frames go to the pipe the parent reads; anything else written to standard output goes to standard error.
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, frames)
