"""docker-compose.yml and its Flink image: the references that can be checked without Docker."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit

COMPOSE = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def test_stack_has_the_pinned_versions() -> None:
    assert SERVICES["kafka"]["image"].startswith("apache/kafka:4.")
    assert SERVICES["doris-fe"]["image"] == "apache/doris:fe-4.1.4"
    assert SERVICES["doris-be"]["image"] == "apache/doris:be-4.1.4"
    assert {"jobmanager", "taskmanager", "vdoctor-job"} <= set(SERVICES)


def test_flink_image_builds_from_files_that_exist() -> None:
    build = SERVICES["jobmanager"]["build"]
    dockerfile = REPO_ROOT / build["context"] / build["dockerfile"]
    assert dockerfile.is_file()
    for src in re.findall(r"^COPY (\S+) ", dockerfile.read_text(), flags=re.M):
        assert (REPO_ROOT / src).exists(), f"Dockerfile copies missing {src}"
    assert "scripts/install/flink-kafka.sh" in dockerfile.read_text()


def test_job_is_submitted_with_the_kafka_entry_point_and_schema_applied_first() -> None:
    job = SERVICES["vdoctor-job"]
    command = " ".join(job["command"])
    assert "-py /opt/vdoctor/jobs/kafka_job.py" in command and "--kafka 127.0.0.1:9092" in command
    assert (REPO_ROOT / "jobs" / "kafka_job.py").is_file()
    # Started again by a later `docker compose up`, it does not submit a second job under the job's name.
    from jobs.job_settings import KafkaJobSettings

    name = KafkaJobSettings.model_fields["job_name"].default
    assert f"flink list -r -m 127.0.0.1:8081 2>/dev/null | grep -q ': {name} ('" in command
    assert command.index("flink list") < command.index("flink run")
    assert job["depends_on"]["doris-schema"]["condition"] == "service_completed_successfully"
    # The schema goes in through `vdoctor memory init` (it fills in the vector dimension and skips what exists),
    # from the job's own image, after the database is created: raw DDL through a mysql client cannot do that.
    schema = SERVICES["doris-schema"]
    assert schema["image"] == job["image"]
    assert schema["command"][:2] == ["python", "/opt/vdoctor/scripts/doris_schema.py"]
    assert schema["command"][2] == job["environment"]["VDOCTOR_MEMORY_URL"].split(":-", 1)[1].rstrip("}")
    assert (REPO_ROOT / "scripts" / "doris_schema.py").is_file()
    # The submitted job's workers read the memory URL, password included, from the TaskManager's environment.
    assert SERVICES["taskmanager"]["environment"]["VDOCTOR_MEMORY_URL"] == job["environment"]["VDOCTOR_MEMORY_URL"]
    assert re.search(r"^COPY sql sql$", (REPO_ROOT / "docker" / "flink" / "Dockerfile").read_text(), flags=re.M)


def _mounts(service: str) -> dict[str, str]:
    """Container path -> repository path of a service's bind mounts."""
    out = {}
    for volume in SERVICES[service]["volumes"]:
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            out[target] = source
    return out


def test_prometheus_scrapes_the_ports_the_flink_reporters_take() -> None:
    flink_conf = yaml.safe_load((REPO_ROOT / "docker" / "flink" / "config.yaml").read_text())
    assert flink_conf["metrics.reporter.prom.factory.class"].endswith("PrometheusReporterFactory")
    low, high = (int(p) for p in str(flink_conf["metrics.reporter.prom.port"]).split("-"))
    assert SERVICES["prometheus"]["image"].startswith("prom/prometheus:v3.")
    config_path = _mounts("prometheus")["/etc/prometheus/prometheus.yml"]
    config = yaml.safe_load((REPO_ROOT / config_path).read_text())
    targets = [t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]]
    ports = sorted(int(t.rsplit(":", 1)[1]) for t in targets)
    # The JobManager takes the first port of the range, the TaskManager the next (host network).
    assert ports[:2] == [low, low + 1] and all(low <= p <= high for p in ports)


def test_grafana_provisions_the_dashboard_with_prometheus_as_its_data_source() -> None:
    assert SERVICES["grafana"]["image"].startswith("grafana/grafana:12.")
    mounts = _mounts("grafana")
    provisioning = REPO_ROOT / mounts["/etc/grafana/provisioning"]
    source = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"][0]
    assert source["type"] == "prometheus" and source["url"].endswith(":9090")
    assert "127.0.0.1:9090" in " ".join(SERVICES["prometheus"]["command"])
    provider = yaml.safe_load((provisioning / "dashboards" / "vdoctor.yml").read_text())["providers"][0]
    dashboards = REPO_ROOT / mounts[provider["options"]["path"]]
    dashboard = json.loads((dashboards / "vdoctor.json").read_text())
    # Every panel and query reads from the provisioned data source.
    uids = {p["datasource"]["uid"] for p in dashboard["panels"]}
    uids |= {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert uids == {source["uid"]}
    home = SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == provider["options"]["path"] + "/vdoctor.json"


def test_flink_services_start_through_the_image_entry_point() -> None:
    entry = (REPO_ROOT / "docker" / "flink" / "docker-entrypoint.sh").read_text()
    for service, word in (("jobmanager", "jobmanager"), ("taskmanager", "taskmanager")):
        assert SERVICES[service]["command"] == [word]
        assert f'{word}) shift; exec "$FLINK_HOME/bin/{word}.sh" start-foreground' in entry


def test_the_images_java_options_are_flink_2_3s_defaults_for_java_17() -> None:
    # The image's config.yaml (and the Kubernetes operator's, which replaces conf/) must keep every
    # --add-exports/--add-opens of the distribution's own default: the JVM needs them on Java 17.
    import pyflink

    default = yaml.safe_load((Path(pyflink.__file__).parent / "conf" / "config.yaml").read_text())
    wanted = default["env"]["java"]["opts"]["all"]
    image = yaml.safe_load((REPO_ROOT / "docker" / "flink" / "config.yaml").read_text())
    assert image["env.java.opts.all"] == wanted
    manifest = yaml.safe_load_all((REPO_ROOT / "deploy" / "kubernetes" / "vdoctor.yaml").read_text())
    deployment = next(d for d in manifest if d and d["kind"] == "FlinkDeployment")
    assert deployment["spec"]["flinkConfiguration"]["env.java.opts.all"] == wanted


def _submit(tmp_path: Path, checkpoints: Path, running: bool = False) -> tuple[list[str] | None, str]:
    """Run the vdoctor-job service's command (compose's ``$$`` read as ``$``) with a ``flink`` that records
    its arguments: (the ``flink run`` arguments, or None when it did not run; what the command printed)."""
    command = SERVICES["vdoctor-job"]["command"][2].replace("$$", "$")
    command = command.replace("/opt/flink/checkpoints", str(checkpoints))
    flink = tmp_path / "flink-home" / "bin" / "flink"
    flink.parent.mkdir(parents=True, exist_ok=True)
    args = tmp_path / "run-args"
    listed = "echo '05.12.2026 08:00:00 : 1f2e : vdoctor-kafka (RUNNING)'" if running else "true"
    flink.write_text(f'#!/bin/bash\nif [ "$1" = list ]; then {listed}; exit 0; fi\nprintf "%s\\n" "$@" > {args}\n')
    flink.chmod(0o755)
    args.unlink(missing_ok=True)
    done = subprocess.run(
        ["bash", "-c", command], env={"FLINK_HOME": str(flink.parent.parent), "PATH": os.environ["PATH"]},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return (args.read_text().splitlines() if args.exists() else None), done.stdout


def test_a_resubmitted_job_resumes_from_the_newest_complete_checkpoint_it_kept(tmp_path: Path) -> None:
    # Before, `docker compose up` after a `down` submitted the job afresh: its open sessions were lost.
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    run, said = _submit(tmp_path, checkpoints)
    assert run is not None and "-s" not in run and "starting afresh" in said
    assert run[run.index("-py") + 1] == "/opt/vdoctor/jobs/kafka_job.py"
    for i, (job, chk, complete) in enumerate([("a1", 3, True), ("b2", 7, True), ("b2", 8, False)]):
        folder = checkpoints / job / f"chk-{chk}"
        (folder / "shared").mkdir(parents=True)
        if complete:
            (folder / "_metadata").write_bytes(b"x")
            os.utime(folder / "_metadata", (1_700_000_000 + i, 1_700_000_000 + i))
    run, said = _submit(tmp_path, checkpoints)
    newest = f"file://{checkpoints}/b2/chk-7"
    assert run is not None and run[run.index("-s") + 1] == newest and f"resuming from {newest[7:]}" in said
    assert run.index("-s") < run.index("-py")  # a flag of `flink run`, not of the job
    # A job already running is not submitted again.
    assert _submit(tmp_path, checkpoints, running=True)[0] is None
