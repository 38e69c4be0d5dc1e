"""deploy/kubernetes/vdoctor.yaml, checked as far as a machine without Kubernetes allows.

The Flink Kubernetes Operator's CRD and API jars cannot be fetched here, so the
checks come from what the operator documents, each with its source (repository
apache/flink-kubernetes-operator, branch release-1.15 unless said otherwise):

- the schema deploy/kubernetes/schema/flinkdeployment-v1beta1.json, derived by
  hand from docs/content/docs/custom-resource/reference.md (fields), the
  FlinkVersion / UpgradeMode / JobState / KubernetesDeploymentMode enums and the
  CRD's field types (see the schema's $comment);
- rules of flink-kubernetes-operator/.../validation/DefaultValidator.java
  (checkpoint and savepoint directories per upgrade mode, forbidden keys);
- the operator's pod-template contract: the main container is named
  ``flink-main-container`` (docs/content/docs/custom-resource/pod-template.md);
- and our own wiring: the job's arguments parse with the entry point's parser,
  the job's own Flink options agree with the deployment's, the image has the
  files the manifest points at.

What only a real cluster proves (README, "Kubernetes"): that the operator
accepts and reconciles it, pods start from the image, the volume mounts,
savepoint upgrades and restores work, and Prometheus scrapes the pods.
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from jobs import kafka_job
from jobs.flink_env import PROMETHEUS_REPORTER, flink_configuration
from jobs.job_settings import CONNECTOR_JAR_ENV, CONNECTOR_JAR_NAME
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit

MANIFEST = REPO_ROOT / "deploy" / "kubernetes" / "vdoctor.yaml"
SCHEMA = json.loads((REPO_ROOT / "deploy" / "kubernetes" / "schema" / "flinkdeployment-v1beta1.json").read_text())
DOCKERFILE = (REPO_ROOT / "docker" / "flink" / "Dockerfile").read_text()
DOCS = list(yaml.safe_load_all(MANIFEST.read_text()))
DEPLOYMENT = next(d for d in DOCS if d and d["kind"] == "FlinkDeployment")
SPEC = DEPLOYMENT["spec"]
CONF: dict[str, str] = SPEC["flinkConfiguration"]
MAIN_CONTAINER = "flink-main-container"
# DefaultValidator.FORBIDDEN_CONF_KEYS: the operator owns these.
FORBIDDEN_KEYS = ("kubernetes.namespace", "kubernetes.cluster-id", "high-availability.cluster-id")
# Where the image puts Flink (docker/flink/Dockerfile) and the project.
IMAGE_FLINK_HOME = "/opt/flink"
IMAGE_PROJECT = "/opt/vdoctor"


def _errors(document: dict[str, Any]) -> list[str]:
    validator = Draft202012Validator(SCHEMA)
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document))


def _main_container() -> dict[str, Any]:
    containers = SPEC["podTemplate"]["spec"]["containers"]
    found = [c for c in containers if c["name"] == MAIN_CONTAINER]
    assert len(found) == 1, f"the operator merges its settings into the container named {MAIN_CONTAINER}"
    return found[0]


def _wheel_flink_home() -> Path:
    import pyflink

    return Path(pyflink.__file__).resolve().parent


def test_the_deployment_matches_the_derived_schema() -> None:
    assert _errors(DEPLOYMENT) == []
    Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize(
    ("path", "value", "error"),
    [
        (("spec", "job", "upgradeMode"), "savepoints", "is not one of"),
        (("spec", "job", "state"), "started", "is not one of"),
        (("spec", "flinkVersion"), "2.3", "is not one of"),
        (("spec", "flinkVersion"), "v1_17", "is not one of"),  # deprecated since operator 1.13
        (("spec", "job", "parallelism"), 0, "less than the minimum"),
        (("spec", "job", "jarURI"), "/opt/flink/opt/flink-python-2.3.0.jar", "does not match"),
        (("spec", "jobManager", "resource", "memory"), "lots", "does not match"),
        (("spec", "taskManager", "resource", "cpu"), 0, "less than or equal to the minimum"),
        (("spec", "flinkConfiguration", "taskmanager.numberOfTaskSlots"), 1, "is not of type 'string'"),
        (("spec", "upgradeMode"), "savepoint", "Additional properties are not allowed"),  # belongs under job
        (("metadata", "name"), "Vehicle_Doctor", "does not match"),
        (("spec", "logConfiguration", "log4j2.properties"), "x", "is not one of"),
    ],
)
def test_the_schema_refuses_what_the_operator_would(path: tuple[str, ...], value: object, error: str) -> None:
    broken = copy.deepcopy(DEPLOYMENT)
    node = broken
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    assert any(error in e for e in _errors(broken)), _errors(broken)


def test_flink_version_is_the_one_the_project_runs() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    pinned = next(d for d in project["project"]["dependencies"] if d.startswith("apache-flink=="))
    major, minor, *_ = pinned.split("==")[1].split(".")
    assert SPEC["flinkVersion"] == f"v{major}_{minor}"
    # The image the compose stack builds from docker/flink is the one deployed.
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    assert SPEC["image"] == compose["x-flink"]["image"]


def test_savepoint_upgrades_have_their_directories_on_the_shared_volume() -> None:
    job = SPEC["job"]
    assert job["upgradeMode"] == "savepoint" and job["state"] == "running"
    # DefaultValidator.validateJobSpec: last-state and savepoint modes need the checkpoint directory,
    # savepoint mode the savepoint directory.
    checkpoints = CONF["execution.checkpointing.dir"]
    savepoints = CONF["execution.checkpointing.savepoint-dir"]
    volumes = {v["name"]: v for v in SPEC["podTemplate"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in _main_container()["volumeMounts"]}
    claims = {d["metadata"]["name"]: d for d in DOCS if d and d["kind"] == "PersistentVolumeClaim"}
    for uri in (checkpoints, savepoints):
        assert uri.startswith("file:///"), "a local URI must be a mounted volume; s3:// needs an S3 plugin in the image"
        mount = next((p for p in mounts if uri[len("file://") :].startswith(p.rstrip("/") + "/")), None)
        assert mount is not None, f"{uri} is on no volume mount of {MAIN_CONTAINER}"
        claim = volumes[mounts[mount]]["persistentVolumeClaim"]["claimName"]
        # JobManager and TaskManagers on different nodes all write there.
        assert claims[claim]["spec"]["accessModes"] == ["ReadWriteMany"]
    assert not [k for k in FORBIDDEN_KEYS if k in CONF]


def test_a_lost_jobmanager_or_a_failed_job_recovers_from_the_latest_checkpoint() -> None:
    # Without HA a lost JobManager restarts from the last upgrade savepoint (or empty state), and a job
    # FAILED once its restart attempts are spent stays failed (docs/content/docs/custom-resource/
    # job-management.md: "Restart failed job deployments"; HighAvailabilityOptions in flink-dist 2.3).
    assert CONF["high-availability.type"] == "kubernetes"
    storage = CONF["high-availability.storageDir"]
    mounts = [m["mountPath"] for m in _main_container()["volumeMounts"]]
    assert storage.startswith("file:///") and any(storage[len("file://") :].startswith(p + "/") for p in mounts)
    assert CONF["kubernetes.operator.job.restart.failed"] == "true"


def _mib(size: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([mg])", size).groups()  # type: ignore[union-attr]
    return int(number) * (1024 if unit == "g" else 1)


def test_the_taskmanager_budget_keeps_room_for_python_outside_flinks_own_memory() -> None:
    # README, "Sizing": ~0.6-0.9 GB for the JVM and the interpreter, ~150 MB for the embedding child process.
    # The interpreter and the child allocate natively, outside Flink's heap, managed and network memory,
    # within the container's limit (= taskmanager.memory.process.size): task off-heap memory reserves it.
    off_heap = _mib(CONF["taskmanager.memory.task.off-heap.size"])
    assert off_heap >= 1024
    assert _mib(SPEC["taskManager"]["resource"]["memory"]) - off_heap >= 2048


def _job_args() -> list[str]:
    args = SPEC["job"]["args"]
    py = args.index("-py")
    return args[py + 2 :]


def test_the_job_is_the_python_entry_point_in_the_image() -> None:
    job = SPEC["job"]
    assert job["entryClass"] == "org.apache.flink.client.python.PythonDriver"
    jar = job["jarURI"][len("local://") :]
    assert jar.startswith(IMAGE_FLINK_HOME + "/opt/")
    # The image's /opt/flink/opt is the wheel's opt/ (docker/flink/Dockerfile moves it there).
    assert (_wheel_flink_home() / "opt" / Path(jar).name).is_file()
    assert f"FLINK_HOME={IMAGE_FLINK_HOME}" in DOCKERFILE and 'mv "$FLINK_WHEEL/$d" "/opt/flink/$d"' in DOCKERFILE
    args = job["args"]
    entry = args[args.index("-py") + 1]
    assert entry.startswith(IMAGE_PROJECT + "/")
    relative = entry[len(IMAGE_PROJECT) + 1 :]
    assert (REPO_ROOT / relative).is_file() and f"COPY {relative.split('/')[0]} " in DOCKERFILE
    assert args[args.index("-pyclientexec") + 1] == CONF["python.executable"] == CONF["python.client.executable"]


def test_job_arguments_parse_and_agree_with_the_deployment(tmp_path: Path) -> None:
    """The entry point's own parser takes the args; the options the job sets itself match the deployment's."""
    jar = tmp_path / CONNECTOR_JAR_NAME
    jar.write_bytes(b"PK")
    args = kafka_job._parse_args(_job_args())
    job = kafka_job.submitted_settings(args, env={CONNECTOR_JAR_ENV: str(jar)})
    assert job.flink.parallelism == SPEC["job"]["parallelism"]
    assert job.flink.python_env == "cluster"  # the cluster's Python, not the submitting machine's
    own = flink_configuration(job.flink)
    assert not {k for k in own if k.startswith("python.") and k != "python.execution-mode"}
    shared = sorted(set(own) & set(CONF))
    assert "execution.checkpointing.dir" in shared and "state.backend.type" in shared
    assert {k: own[k] for k in shared} == {k: CONF[k] for k in shared}


def test_thread_mode_python_is_configured_for_the_image() -> None:
    python = re.search(r"^FROM python:(\d+\.\d+)", DOCKERFILE, flags=re.M)
    assert python is not None
    assert f"/usr/local/lib/python{python.group(1)}/site-packages" in CONF["python.pythonpath"].split(":")
    assert IMAGE_PROJECT in CONF["python.pythonpath"].split(":")
    # Thread mode needs the flink-python jar on the cluster classpath (NOTES.md).
    assert "cp /opt/flink/opt/flink-python-*.jar /opt/flink/lib/" in DOCKERFILE
    # The operator's native mode starts pods through kubernetes.entry.path, /docker-entrypoint.sh by default.
    assert 'ENTRYPOINT ["/docker-entrypoint.sh"]' in DOCKERFILE
    assert 'exec "$@"' in (REPO_ROOT / "docker" / "flink" / "docker-entrypoint.sh").read_text()


def test_prometheus_reporter_is_on_and_its_port_exposed() -> None:
    assert CONF["metrics.reporter.prom.factory.class"] == PROMETHEUS_REPORTER
    port = CONF["metrics.reporter.prom.port"]
    assert [p["containerPort"] for p in _main_container()["ports"] if p["name"] == "metrics"] == [int(port)]
    assert SPEC["podTemplate"]["metadata"]["annotations"]["prometheus.io/port"] == port
    # The reporter is a plugin of the Flink distribution the image is made from.
    assert list((_wheel_flink_home() / "plugins" / "metrics-prometheus").glob("flink-metrics-prometheus-*.jar"))


def test_secrets_come_from_a_secret_and_name_real_settings() -> None:
    env = _main_container()["env"]
    domain_sources = "".join(p.read_text() for p in (REPO_ROOT / "vdoctor").rglob("*.py"))
    for var in env:
        assert "value" not in var or not re.search(r"://[^/]*@|sk-", var["value"]), var
        assert f'"{var["name"]}"' in domain_sources, f"{var['name']} is read nowhere in vdoctor/"
    by_name = {v["name"]: v for v in env}
    assert by_name["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert "secretKeyRef" in by_name["VDOCTOR_MEMORY_URL"]["valueFrom"]
