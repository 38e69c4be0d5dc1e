"""CPU per model call on the client side: the ways of calling an OpenAI-compatible endpoint, side by side.

The diagnosis operator's runs share one Python interpreter per TaskManager,
so every millisecond of CPU a model call costs on the client is taken from
every other run in flight. This bench sends the engine's own requests (the
two calls of a diagnosis run, captured from the engine with the offline
model) to the local model server running as its own process, and measures
this process's CPU time per call (``time.process_time``: every thread of the
client, nothing of the server) for each way of calling, at several numbers
of calls in flight:

- ``sync create``: ``client.chat.completions.create`` (request params walked
  through the client's TypedDict transformer, reply parsed into pydantic
  models), a client per 8 threads;
- ``sync raw response``: ``chat.completions.with_raw_response.create``, the
  body read as text and parsed with ``json.loads``;
- ``sync post text``: ``client.post(..., cast_to=str)`` (what
  ``OpenAIChatModel`` does) on the default transport, a client per 8 threads, and
  on 1 client, on 8 clients (the earlier sharing), a client per thread;
- ``sync post text, stdlib transport``: the same on ``vdoctor.http_transport``'s
  ``StdlibTransport`` (what ``OpenAIChatModel`` does unless a proxy is set);
- ``sync post text, new connection``: the same with ``Connection: close``
  (no connection reuse);
- ``async create`` / ``async post text``: ``AsyncOpenAI`` on one event loop,
  one task per call in flight;
- ``bridge``: threads (as the run pool has) handing the async call to one
  event-loop thread and waiting for its result;
- floors without the ``openai`` package: ``httpx2`` directly, and the
  standard library's ``http.client`` with a kept-alive connection per thread.

    .venv/bin/python bench/model_client_cpu.py                       # 64 @ 200 ms and 256 @ 1 s
    .venv/bin/python bench/model_client_cpu.py --levels 64:200 --rounds 20

Prints one table (CPU ms per call, calls/s, wall) and writes
out/bench/model_client_cpu.json.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import openai  # noqa: E402

from vdoctor.models.base import ChatResponse, Message, ToolSpec  # noqa: E402
from vdoctor.models.openai import to_wire, tools_to_wire  # noqa: E402

KEY = "bench-key-not-secret"
# Threads per HTTP client, as vdoctor.openai_clients shares them out.
THREADS_PER_CLIENT = 8
# Enough keep-alive connections for every call in flight on one client.
LIMITS = {"max_connections": 4096, "max_keepalive_connections": 4096}


@dataclass
class Row:
    variant: str
    in_flight: int
    latency_ms: float
    calls: int
    cpu_ms_per_call: float
    calls_per_s: float
    wall_s: float
    load_avg: float


def capture_bodies() -> list[dict[str, Any]]:
    """The request bodies of one vehicle's first two diagnosis runs (4 calls), as the engine sends them."""
    from vdoctor.diagnosis import DiagnosisEngine
    from vdoctor.embedders.hashing import HashingEmbedder
    from vdoctor.events import parse_event
    from vdoctor.knowledge import load_pack
    from vdoctor.memory.session import DedupState
    from vdoctor.models.offline import OfflineModel
    from vdoctor.stores import open_store

    bodies: list[dict[str, Any]] = []
    offline = OfflineModel()

    class Recording:
        name = "bench"

        def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
            bodies.append({"model": "bench", "messages": to_wire(messages), "tools": tools_to_wire(tools)})
            return offline.chat(messages, tools)

        def close(self) -> None:
            return None

    engine = DiagnosisEngine(open_store("memory://"), Recording(), HashingEmbedder(), load_pack())
    session, dedup = None, DedupState()
    for k in range(2):
        line = json.dumps({
            "type": "alert", "event_id": f"cpu-{k}", "vin": "LSVBENCH000000001", "series": "EV-A",
            "ts": f"2026-11-01T{8 + k:02d}:00:00Z", "alert_text": "CAN bus communication lost with battery module",
            "dtc_codes": ["U0140"], "signals": {"can_timeout_s": 0.2},
        })  # fmt: skip
        result = engine.on_event(session, dedup, parse_event(line), line)
        session, dedup = result.session, result.dedup
    engine.close()
    return bodies


# -- the ways of calling -------------------------------------------------------------


def _sync_clients(url: str, per_client: int, **kw: Any) -> Callable[[], openai.OpenAI]:
    """Each client serves ``per_client`` threads, a thread always the same one (vdoctor.openai_clients)."""
    from vdoctor.openai_clients import ThreadClients

    clients = ThreadClients(lambda: openai.OpenAI(api_key=KEY, base_url=url, max_retries=0, **kw), per_client)
    return clients.get


def sync_variant(name: str, url: str, per_client: int = THREADS_PER_CLIENT) -> Callable[[dict[str, Any]], object]:
    get = _sync_clients(url, per_client)
    if name == "create":
        return lambda body: get().chat.completions.create(**body)
    if name == "raw":
        return lambda body: json.loads(get().chat.completions.with_raw_response.create(**body).text)
    if name == "post":
        return lambda body: json.loads(get().post("/chat/completions", cast_to=str, body=body))
    if name == "post-stdlib":
        from vdoctor.http_transport import StdlibTransport

        transport = StdlibTransport()
        get = _sync_clients(url, per_client, http_client=openai.DefaultHttpxClient(transport=transport))
        return lambda body: json.loads(get().post("/chat/completions", cast_to=str, body=body))
    if name == "post-close":
        return lambda body: json.loads(
            get().post("/chat/completions", cast_to=str, body=body, options={"headers": {"Connection": "close"}})
        )
    raise ValueError(name)


def httpx2_variant(url: str) -> Callable[[dict[str, Any]], object]:
    import httpx2

    local = threading.local()
    headers = {"Authorization": f"Bearer {KEY}"}

    def call(body: dict[str, Any]) -> object:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx2.Client(base_url=url, headers=headers, timeout=60)
        return json.loads(client.post("/chat/completions", json=body).text)

    return call


def stdlib_variant(url: str) -> Callable[[dict[str, Any]], object]:
    parsed = urlparse(url)
    local = threading.local()
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}

    def call(body: dict[str, Any]) -> object:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
        conn.request("POST", parsed.path + "/chat/completions", json.dumps(body).encode(), headers)
        return json.loads(conn.getresponse().read())

    return call


def run_threads(call: Callable[[dict[str, Any]], object], bodies: list[dict[str, Any]], in_flight: int,
                rounds: int) -> tuple[int, float, float]:  # fmt: skip
    """``in_flight`` threads, each making ``rounds`` calls after one warm-up call; (calls, cpu s, wall s)."""
    barrier = threading.Barrier(in_flight + 1)
    done = threading.Barrier(in_flight + 1)

    def worker(i: int) -> None:
        call(bodies[i % len(bodies)])  # warm-up: connection, client
        barrier.wait()
        for r in range(rounds):
            call(bodies[(i + r) % len(bodies)])
        done.wait()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(in_flight)]
    for t in threads:
        t.start()
    barrier.wait()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    done.wait()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    for t in threads:
        t.join()
    return in_flight * rounds, cpu, wall


def run_async(
    name: str, url: str, bodies: list[dict[str, Any]], in_flight: int, rounds: int
) -> tuple[int, float, float]:
    async def main() -> tuple[int, float, float]:
        client = openai.AsyncOpenAI(
            api_key=KEY, base_url=url, max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(limits=__import__("httpx2").Limits(**LIMITS)),
        )  # fmt: skip

        async def call(body: dict[str, Any]) -> object:
            if name == "create":
                return await client.chat.completions.create(**body)
            return json.loads(await client.post("/chat/completions", cast_to=str, body=body))

        async def worker(i: int, n: int) -> None:
            for r in range(n):
                await call(bodies[(i + r) % len(bodies)])

        await asyncio.gather(*(worker(i, 1) for i in range(in_flight)))  # warm-up
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker(i, rounds) for i in range(in_flight)))
        result = in_flight * rounds, time.process_time() - cpu0, time.perf_counter() - wall0
        await client.close()
        return result

    return asyncio.run(main())


def bridge_variant(url: str) -> tuple[Callable[[dict[str, Any]], object], Callable[[], None]]:
    """Blocking calls from many threads, each served by one event loop on its own thread."""
    import httpx2

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="model-loop", daemon=True)
    thread.start()

    async def make() -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            api_key=KEY,
            base_url=url,
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(limits=httpx2.Limits(**LIMITS)),
        )

    client = asyncio.run_coroutine_threadsafe(make(), loop).result()

    def call(body: dict[str, Any]) -> object:
        coro = client.post("/chat/completions", cast_to=str, body=body)
        return json.loads(asyncio.run_coroutine_threadsafe(coro, loop).result())

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(client.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()

    return call, stop


VARIANTS = [
    "sync create", "sync raw response", "sync post text", "sync post text, stdlib transport",
    "sync post text, 1 client", "sync post text, 8 clients",
    "sync post text, a client per thread",
    "sync post text, new connection", "async create", "async post text", "bridge: threads -> 1 loop",
    "httpx2 direct (floor)", "http.client (floor)",
]  # fmt: skip


def measure(
    variant: str, url: str, bodies: list[dict[str, Any]], in_flight: int, rounds: int
) -> tuple[int, float, float]:
    if variant.startswith("async"):
        return run_async("create" if variant == "async create" else "post", url, bodies, in_flight, rounds)
    if variant.startswith("bridge"):
        call, stop = bridge_variant(url)
        try:
            return run_threads(call, bodies, in_flight, rounds)
        finally:
            stop()
    call = {
        "sync create": lambda: sync_variant("create", url),
        "sync raw response": lambda: sync_variant("raw", url),
        "sync post text": lambda: sync_variant("post", url),
        "sync post text, stdlib transport": lambda: sync_variant("post-stdlib", url),
        "sync post text, 1 client": lambda: sync_variant("post", url, per_client=in_flight),
        "sync post text, 8 clients": lambda: sync_variant("post", url, per_client=max(1, in_flight // 8)),
        "sync post text, a client per thread": lambda: sync_variant("post", url, per_client=1),
        "sync post text, new connection": lambda: sync_variant("post-close", url),
        "httpx2 direct (floor)": lambda: httpx2_variant(url),
        "http.client (floor)": lambda: stdlib_variant(url),
    }[variant]()
    return run_threads(call, bodies, in_flight, rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", nargs="+", default=["64:200", "256:1000"], help="in-flight:latency-ms pairs")
    parser.add_argument("--rounds", type=int, default=12, help="calls per caller after its warm-up call")
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS, metavar="VARIANT")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench")
    args = parser.parse_args(argv)
    bodies = capture_bodies()
    sizes = [len(json.dumps(b)) for b in bodies]
    print(f"{len(bodies)} captured requests, {min(sizes)}-{max(sizes)} bytes each", flush=True)
    rows: list[Row] = []
    for level in args.levels:
        in_flight, latency = (float(x) for x in level.split(":"))
        server = subprocess.Popen(
            [sys.executable, "-m", "devtools.model_server", "--latency-ms", str(latency)],
            cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            url = (server.stdout.readline() if server.stdout else "").split()[-1]
            for variant in args.variants:
                calls, cpu, wall = measure(variant, url, bodies, int(in_flight), args.rounds)
                row = Row(variant, int(in_flight), latency, calls, cpu / calls * 1000, calls / wall, wall,
                          os.getloadavg()[0])  # fmt: skip
                rows.append(row)
                print(f"  {variant:<32} {int(in_flight):>4} @ {latency:g} ms: {row.cpu_ms_per_call:.2f} ms CPU/call, "
                      f"{row.calls_per_s:.0f} calls/s", flush=True)  # fmt: skip
        finally:
            server.terminate()
            server.communicate()
    print(f"\nclient CPU per model call (this process only; the model server is its own process), "
          f"{os.cpu_count()} cores, {args.rounds} calls per caller")  # fmt: skip
    print(f"{'variant':<32} {'in flight':>9} {'latency':>8} {'CPU ms/call':>11} {'calls/s':>8} {'load':>5}")
    for r in rows:
        print(f"{r.variant:<32} {r.in_flight:>9} {r.latency_ms:>6g}ms {r.cpu_ms_per_call:>11.2f} "
              f"{r.calls_per_s:>8.0f} {r.load_avg:>5.1f}")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "model_client_cpu.json").write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
