"""HTTP clients of the ``openai`` package, shared out among the threads that call them.

The diagnosis operator's worker threads (one per run in flight, 64 to 512 of
them) each make one call at a time. One client (one connection pool) for all
of them has its pool's lock and its scan over the pool's connections in every
request; a client per thread costs ~20 ms of CPU each to build (its TLS
context). So clients are built on demand, each serving up to
``THREADS_PER_CLIENT`` threads, and each thread keeps to the one it was given.
Measured with ``bench/model_client_cpu.py`` (256 calls in flight, 1 s model
latency, client CPU per call): 1 client 2.48 ms, 8 clients 1.86 ms, 32 clients
(8 threads each) 1.65 ms, a client per thread 1.58 ms.

All the clients of one model send through one ``httpx2`` client built by
``http_client``: on ``StdlibTransport`` (``vdoctor.http_transport``), whose
connections are per thread, unless the environment names a proxy (then each
client has its own default one, as before).
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable

import httpx2
import openai

from vdoctor.http_transport import StdlibTransport

# Threads sharing one HTTP client (connection pool).
THREADS_PER_CLIENT = 8


def env_proxy() -> bool:
    """Whether the environment routes HTTP through a proxy (HTTP_PROXY, HTTPS_PROXY or ALL_PROXY)."""
    return any(key in ("http", "https", "all") for key in urllib.request.getproxies_environment())


def http_client(timeout_s: float) -> httpx2.Client | None:
    """The ``httpx2`` client the ``openai`` clients of one model or embedder share: on ``StdlibTransport``.

    None with a proxy in the environment: each ``openai`` client then builds
    its own default, which goes through the proxy (a custom transport would
    bypass it) and has a connection pool of its own, as before the transport.
    """
    if env_proxy():
        return None
    return openai.DefaultHttpxClient(timeout=timeout_s, transport=StdlibTransport())


class ThreadClients:
    """Clients from ``build``, one per ``threads_per_client`` calling threads; a thread always gets the same one."""

    def __init__(self, build: Callable[[], openai.OpenAI], threads_per_client: int = THREADS_PER_CLIENT) -> None:
        if threads_per_client < 1:
            raise ValueError(f"threads_per_client must be at least 1, got {threads_per_client}")
        self._build = build
        self._per_client = threads_per_client
        self._local = threading.local()
        self._clients: list[openai.OpenAI] = []
        self._threads = 0
        self._lock = threading.Lock()

    def get(self) -> openai.OpenAI:
        client: openai.OpenAI | None = getattr(self._local, "client", None)
        if client is None:
            with self._lock:
                if self._threads % self._per_client == 0:
                    self._clients.append(self._build())
                client = self._clients[-1]
                self._threads += 1
            self._local.client = client
        return client

    @property
    def size(self) -> int:
        """Clients built so far."""
        return len(self._clients)

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()
