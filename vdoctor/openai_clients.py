"""HTTP clients of the ``openai`` package, shared out among the threads that call them.

The diagnosis operator's 64 worker threads each make one call at a time. One
client (one connection pool) for all of them had its pool's lock taken
several times per request by every thread; a client per thread costs ~20 ms
of CPU each to build (its TLS context). So a few clients are built on demand
and each thread keeps to the one it was given.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

import openai

# HTTP clients (connection pools) shared out among the calling threads.
CLIENTS = 8


class ThreadClients:
    """Up to ``size`` clients from ``build``; a thread always gets the same one."""

    def __init__(self, build: Callable[[], openai.OpenAI], size: int = CLIENTS) -> None:
        self._build = build
        self._size = size
        self._local = threading.local()
        self._clients: list[openai.OpenAI] = []
        self._lock = threading.Lock()
        self._turn = itertools.count()

    def get(self) -> openai.OpenAI:
        client: openai.OpenAI | None = getattr(self._local, "client", None)
        if client is None:
            with self._lock:
                if len(self._clients) < self._size:
                    client = self._build()
                    self._clients.append(client)
                else:
                    client = self._clients[next(self._turn) % self._size]
            self._local.client = client
        return client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()
