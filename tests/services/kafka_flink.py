"""Real services as plain local processes, on free ports: a Kafka 4.x KRaft broker and a Flink cluster.

Used by the integration tests (session-scoped fixtures) and the benchmarks.
Both need the jars that ``scripts/setup.sh`` fetches into ``.services/``; a
service that cannot start raises ServiceError with the tail of its log.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from devtools.browser import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICES = REPO_ROOT / ".services"
KAFKA_LIB = SERVICES / "kafka" / "lib"
CONNECTOR_JAR = SERVICES / "flink" / "lib" / "flink-sql-connector-kafka-5.0.0-2.2.jar"
KAFKA_START_TIMEOUT_S = 90
FLINK_START_TIMEOUT_S = 120
# As docker/flink/config.yaml sets it (README: "Scale-out").
JOBMANAGER_JAVA_OPTS = "-XX:TieredStopAtLevel=1"


class ServiceError(RuntimeError):
    """A test service could not start; the message says why and how to install it."""


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


class KafkaBroker:
    """A single-node Kafka 4.x broker+controller (KRaft) from the Maven Central jars."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.controller_port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "broker.log"

    def _write_config(self) -> Path:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": "2",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def start(self) -> KafkaBroker:
        if not any(KAFKA_LIB.glob("kafka_2.13-*.jar")):
            raise ServiceError(f"Kafka jars missing in {KAFKA_LIB}: run `bash scripts/install/kafka.sh`")
        java = shutil.which("java")
        if java is None:
            raise ServiceError("java not found: run `bash scripts/setup.sh`")
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        cp = f"{KAFKA_LIB}/*"
        if not (self.workdir / "data" / "meta.properties").exists():  # a restart keeps its storage
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            # Joined to its flag: an id may start with "-", which the tool's parser would read as a flag.
            fmt = subprocess.run(
                [
                    java,
                    "-cp",
                    cp,
                    "kafka.tools.StorageTool",
                    "format",
                    "--standalone",
                    f"--cluster-id={cluster_id}",
                    "-c",
                    str(config),
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if fmt.returncode != 0:
                raise ServiceError(f"formatting Kafka storage failed: {fmt.stderr[-2000:]}")
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [java, "-Xmx512m", "-XX:+UseSerialGC", "-cp", cp, "kafka.Kafka", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        if self.proc is None:
            raise ServiceError("Kafka broker process was not started")
        deadline = time.monotonic() + KAFKA_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServiceError(f"Kafka broker exited with {self.proc.returncode}:\n{_tail(self.log)}")
            if _port_open(self.port) and self._ready():
                return
            time.sleep(0.5)
        raise ServiceError(f"Kafka broker not ready after {KAFKA_START_TIMEOUT_S} s:\n{_tail(self.log)}")

    def _ready(self) -> bool:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)
        except KafkaError:
            return False
        try:
            admin.list_topics()
            return True
        except KafkaError:
            return False
        finally:
            admin.close()

    def create_topics(self, names: Iterable[str], partitions: int = 2) -> None:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names])
        finally:
            admin.close()

    def restart(self) -> KafkaBroker:
        """Stop the broker and start it again on the same ports and storage (a rolling restart of one node)."""
        self.stop()
        return self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


def read_topic(
    bootstrap: str, topic: str, expect: int, timeout_s: float, committed_only: bool = True
) -> list[tuple[str | None, str]]:
    """Read (key, value) records from the start of ``topic`` until ``expect`` arrived or the time is up."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed" if committed_only else "read_uncommitted",
        consumer_timeout_ms=1000,
    )
    out: list[tuple[str | None, str]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and len(out) < expect:
            for msg in consumer:
                out.append((msg.key.decode() if msg.key is not None else None, msg.value.decode()))
                if len(out) >= expect:
                    break
    finally:
        consumer.close()
    return out


def flink_home(python: Path | None = None) -> Path:
    """The Flink distribution inside the apache-flink wheel of ``python`` (default: this interpreter's)."""
    if python is None:
        import pyflink

        return Path(pyflink.__file__).resolve().parent
    found = subprocess.run(
        [str(python), "-c", "import os, pyflink; print(os.path.dirname(os.path.realpath(pyflink.__file__)))"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    if found.returncode != 0:
        raise ServiceError(f"{python} has no apache-flink: {found.stderr[-1000:]}")
    return Path(found.stdout.strip())


def site_packages(python: Path) -> list[str]:
    found = subprocess.run(
        [str(python), "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd="/",
    )
    return found.stdout.split()


class FlinkCluster:
    """A standalone Flink cluster (JobManager + TaskManager processes) from the PyFlink wheel.

    It runs from the wheel's own distribution with its own conf, log and pid
    folders, and a lib folder that adds the flink-python jar, which thread-mode
    Python needs on the cluster classpath.
    """

    def __init__(
        self,
        workdir: Path,
        slots: int = 2,
        python: Path | None = None,
        taskmanagers: int = 1,
        conf: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """``python``: the interpreter whose apache-flink runs the cluster and its workers.

        By default this test run's own, with the repository on the workers' path (a cluster that shares
        this checkout). Any other is a cluster with nothing of ours: no repository on any path, no
        environment of this run's virtual environment; jobs bring their code (``flink run -pyfs``).
        ``taskmanagers`` TaskManager processes of ``slots`` slots each; ``conf`` and ``env`` override defaults.
        """
        self.workdir = workdir
        self.slots = slots
        self.taskmanagers = taskmanagers
        self.extra_conf = conf or {}
        self.extra_env = env or {}
        self.rest_port = free_port()
        self.rpc_port = free_port()
        self.python = Path(sys.executable) if python is None else python
        self.shares_checkout = python is None
        self.home = flink_home(python)
        self.env: dict[str, str] = {}

    def _prepare(self) -> None:
        conf_dir, lib_dir = self.workdir / "conf", self.workdir / "lib"
        for d in (conf_dir, lib_dir, self.workdir / "log", self.workdir / "pid", self.workdir / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        for jar in (self.home / "lib").glob("*.jar"):
            (lib_dir / jar.name).unlink(missing_ok=True)
            (lib_dir / jar.name).symlink_to(jar)
        for jar in (self.home / "opt").glob("flink-python-*.jar"):
            (lib_dir / jar.name).unlink(missing_ok=True)
            (lib_dir / jar.name).symlink_to(jar)
        for f in (self.home / "conf").glob("log4j*.properties"):
            shutil.copy(f, conf_dir / f.name)
        java_opts = ""
        for line in (self.home / "conf" / "config.yaml").read_text().splitlines():
            if line.strip().startswith("all: --add-exports"):
                java_opts = line.strip()[len("all: ") :]
        conf = {
            "env.java.opts.all": java_opts,
            "jobmanager.rpc.address": "localhost",
            "jobmanager.bind-host": "localhost",
            "jobmanager.rpc.port": str(self.rpc_port),
            "jobmanager.memory.process.size": "1024m",
            # The JobManager's JIT: C1 only. It shares the machine's cores with the TaskManagers here, and its
            # C2 compiler thread took 0.07-0.09 cores through a job's first minutes, 0.02-0.03 with C1
            # (bench/scale_out.py, "cores used outside the TaskManagers").
            "env.java.opts.jobmanager": JOBMANAGER_JAVA_OPTS,
            "taskmanager.bind-host": "localhost",
            "taskmanager.host": "localhost",
            "taskmanager.numberOfTaskSlots": str(self.slots),
            "taskmanager.memory.process.size": "2048m",
            "rest.address": "localhost",
            "rest.bind-address": "localhost",
            "rest.port": str(self.rest_port),
            "parallelism.default": "1",
            "io.tmp.dirs": str(self.workdir / "tmp"),
            # What a cluster needs for thread-mode Python (README: "Submitting to a cluster"): its
            # interpreter, and that interpreter's site-packages on the workers' path (pemja).
            "python.client.executable": str(self.python),
            "python.executable": str(self.python),
            "python.pythonpath": ":".join(
                ([str(REPO_ROOT)] if self.shares_checkout else []) + site_packages(self.python)
            ),
            **self.extra_conf,
        }
        (conf_dir / "masters").write_text(f"localhost:{self.rest_port}\n")
        (conf_dir / "workers").write_text("localhost\n" * self.taskmanagers)
        (conf_dir / "config.yaml").write_text("".join(f"{k}: {v}\n" for k, v in conf.items()))
        base = dict(os.environ)
        if not self.shares_checkout:
            # Nothing of this run's environment: no virtual environment, no project on any path.
            venv = str(REPO_ROOT / ".venv")
            for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
                base.pop(name, None)
            base["PATH"] = ":".join(p for p in base.get("PATH", "").split(":") if not p.startswith(venv))
            base = {k: v for k, v in base.items() if not k.startswith("VDOCTOR_")}
        self.env = {
            **base,
            "FLINK_HOME": str(self.home),
            "FLINK_CONF_DIR": str(conf_dir),
            "FLINK_LIB_DIR": str(lib_dir),
            "FLINK_LOG_DIR": str(self.workdir / "log"),
            "FLINK_PID_DIR": str(self.workdir / "pid"),
        }
        if self.shares_checkout:
            self.env["PYTHONPATH"] = str(REPO_ROOT)
            # The tests' fleets rely on file order across vehicles (one vehicle's verified case
            # informs another's next session): one run at a time.
            self.env["VDOCTOR_CONCURRENCY"] = "1"
        self.env.update(self.extra_env)

    def start(self) -> FlinkCluster:
        if shutil.which("java") is None:
            raise ServiceError("java not found: run `bash scripts/setup.sh`")
        self._prepare()
        proc = subprocess.run(
            ["bash", str(self.home / "bin" / "start-cluster.sh")],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.workdir,
        )
        if proc.returncode != 0:
            raise ServiceError(f"start-cluster.sh failed: {proc.stderr[-2000:]}")
        deadline = time.monotonic() + FLINK_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._taskmanagers() >= self.taskmanagers:
                return self
            time.sleep(1)
        logs = "\n".join(_tail(p, 1500) for p in (self.workdir / "log").glob("*.log"))
        self.stop()
        raise ServiceError(f"Flink cluster not ready after {FLINK_START_TIMEOUT_S} s:\n{logs}")

    def _taskmanagers(self) -> int:
        import json
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://localhost:{self.rest_port}/taskmanagers", timeout=2) as r:
                return len(json.load(r)["taskmanagers"])
        except (OSError, ValueError, KeyError):
            return 0

    def rest(self, path: str) -> dict[str, object]:
        import json
        import urllib.request

        with urllib.request.urlopen(f"http://localhost:{self.rest_port}{path}", timeout=10) as r:
            data: dict[str, object] = json.load(r)
            return data

    def flink(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run ``bin/flink`` against this cluster; on a time-out its whole process group (the client JVM) goes."""
        cmd = ["bash", str(self.home / "bin" / "flink"), *args]
        proc = subprocess.Popen(
            cmd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT if self.shares_checkout else self.workdir,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def stop(self) -> None:
        if not self.env:
            return
        subprocess.run(
            ["bash", str(self.home / "bin" / "stop-cluster.sh")],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        # stop-cluster.sh signals the pids it recorded; make sure none is left behind.
        for pid_file in (self.workdir / "pid").glob("*.pid"):
            for line in pid_file.read_text().split():
                if line.isdigit():
                    try:
                        os.kill(int(line), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
