"""Long-term memory goes away mid-stream: recall degrades, writes wait it out, nothing is lost.

A real MariaDB behind a TCP proxy that the test takes down (connections
refused, open ones cut) and brings back, while the engine keeps diagnosing.
"""

from __future__ import annotations

import socket
import threading
import time
from datetime import timedelta

import pytest

from tests.services.mariadb import MariaDB
from tests.unit.test_engine import T0, Harness, alert
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.knowledge import load_pack
from vdoctor.models.offline import OfflineModel
from vdoctor.stores import open_store
from vdoctor.stores.retry import RetryingStore

pytestmark = pytest.mark.integration

VIN_A = "LSVAU2180N2183294"
VIN_C = "LSVAU2180N2100002"
OUTAGE_S = 4.0


class Proxy:
    """A TCP forwarder on a fixed local port that can refuse and cut connections."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.up()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked on it (Linux)
            except OSError:
                pass
            listener.close()
        with self._lock:
            for conn in self._conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()
            self._conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass


def test_outage_degrades_recall_and_delays_writes_without_losing_any(
    mariadb: MariaDB, mariadb_url: str
) -> None:
    proxy = Proxy(mariadb.port)
    url = mariadb_url.replace(f":{mariadb.port}/", f":{proxy.port}/")
    store = RetryingStore(open_store(url), deadline_s=60)
    h = Harness(DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack()))

    first = h.diagnose(alert("e-1", T0, signals={"cell_voltage_diff_mv": 187}, vin=VIN_A))
    assert first.phase.value == "CONCLUDED" and not first.memory.degraded

    proxy.down()
    threading.Timer(OUTAGE_S, proxy.up).start()
    started = time.monotonic()
    during = h.diagnose(alert("e-2", T0 + timedelta(hours=1), signals={"cell_voltage_diff_mv": 160}, vin=VIN_C))
    waited = time.monotonic() - started

    assert during.memory.degraded  # recall could not reach memory: the diagnosis says so
    assert during.phase.value == "CONCLUDED" and "l3_write_failed" not in during.flags
    assert waited >= OUTAGE_S * 0.9  # the write waited the outage out
    assert store.write_retries > 0
    check = open_store(mariadb_url)
    try:
        keys = sorted((r.vin, r.session_id) for vin in (VIN_A, VIN_C) for r in check.history(vin))
    finally:
        check.close()
    assert keys == sorted(
        [(VIN_A, f"{VIN_A}-20261101T081530"), (VIN_C, f"{VIN_C}-20261101T091530")]
    )
    proxy.down()
