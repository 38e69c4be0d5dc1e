"""``vdoctor package``: what ``flink run`` needs to run the Kafka job on a cluster that has nothing of ours.

It writes, into one folder:

- ``vdoctor-job.zip`` for ``-pyfs``: this project's packages (vdoctor, operators,
  jobs) and every Python package they need beyond what ``apache-flink`` itself
  brings, copied from this environment, so at the versions the tests ran.
  Flink unpacks it on the client and on every TaskManager and puts it first on
  the Python path; ``-pym jobs.kafka_job`` runs the entry point from it.
- the Flink Kafka connector jar, which the job ships with itself
  (``--connector-jar``: Flink's ``pipeline.jars`` are uploaded with the job).

The cluster needs Flink 2.3 with the flink-python jar in ``lib/`` (thread mode),
and a Python of the same minor version, on the same platform (the zip holds
compiled extensions such as pydantic-core), with ``apache-flink==2.3.0``, named
by ``python.executable`` and, with its site-packages, ``python.pythonpath``.
"""

from __future__ import annotations

import shutil
import sys
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from jobs.job_settings import CONNECTOR_JAR_NAME, PROJECT_ROOT, check_output_folder
from vdoctor.errors import ConfigError
from vdoctor.settings import ENV_VARS

PROJECT_DIST = "vehicle-doctor"
FLINK_DIST = "apache-flink"
# The packages that make up the job (devtools/ and tests/ stay home).
JOB_PACKAGES = ("vdoctor", "operators", "jobs")
# Project dependencies the job never imports: the replay producer (kafka-python), the
# report plots of `vdoctor eval` and `vdoctor memory health` (matplotlib), and the memory
# inspector's web stack (`vdoctor serve`: starlette, jinja2, uvicorn).
NOT_IN_JOB = frozenset({"kafka-python", "matplotlib", "starlette", "jinja2", "uvicorn"})
BUNDLE_NAME = "vdoctor-job.zip"
MEMORY_URL_ENV = ENV_VARS["memory_url"]


@dataclass
class Bundle:
    """What ``package`` wrote, for the report and for tests."""

    folder: Path
    archive: Path
    connector_jar: Path
    dependencies: list[str] = field(default_factory=list)

    def submit_command(self) -> str:
        """The ``flink run`` command (the README's). The memory URL, which may hold a password, goes in the
        environment (``VDOCTOR_MEMORY_URL``), not as ``--memory``: Flink's client logs every program
        argument, and ``ps`` shows them."""
        return (
            f'{MEMORY_URL_ENV}="$MEMORY_URL" "$FLINK_HOME/bin/flink" run -m "$JOBMANAGER" -d \\\n'
            '  -pyclientexec "$CLIENT_PYTHON" '
            f"-pyfs {self.archive} -pym jobs.kafka_job \\\n"
            f"  --connector-jar {self.connector_jar} \\\n"
            '  --kafka "$KAFKA" --checkpoint-dir "$CHECKPOINTS" --delivery exactly-once'
        )


def _applies(requirement: Requirement) -> bool:
    """A requirement without extras whose environment marker holds here."""
    return requirement.marker is None or requirement.marker.evaluate({"extra": ""})


def closure(roots: Iterable[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions ``roots`` need, transitively, by canonical name."""
    found: dict[str, metadata.Distribution] = {}
    todo = [Requirement(r) for r in roots]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in found or not _applies(requirement):
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError as e:
            raise ConfigError(f"{name} is needed by the job but not installed here: run `bash scripts/setup.sh`") from e
        found[name] = dist
        todo += [Requirement(r) for r in dist.requires or []]
    return found


def job_dependencies() -> list[metadata.Distribution]:
    """Distributions the job needs that a cluster with only apache-flink installed lacks."""
    project = metadata.distribution(PROJECT_DIST)
    roots = [
        r
        for r in project.requires or []
        if _applies(Requirement(r)) and canonicalize_name(Requirement(r).name) not in {FLINK_DIST, *NOT_IN_JOB}
    ]
    provided = closure([f"{FLINK_DIST}=={project_flink_version()}"])
    return [d for name, d in sorted(closure(roots).items()) if name not in provided]


def project_flink_version() -> str:
    return metadata.version(FLINK_DIST)


def _dist_files(dist: metadata.Distribution) -> Iterator[tuple[Path, str]]:
    """(installed file, path inside site-packages) for a distribution's importable files and metadata."""
    for entry in dist.files or []:
        path = Path(str(entry))
        if path.parts[0] == ".." or "__pycache__" in path.parts or path.suffix == ".pyc":
            continue  # console scripts outside site-packages, byte code
        yield Path(str(dist.locate_file(entry))), path.as_posix()


def _project_files() -> Iterator[tuple[Path, str]]:
    for package in JOB_PACKAGES:
        for path in sorted((PROJECT_ROOT / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                yield path, path.relative_to(PROJECT_ROOT).as_posix()


def package(out: Path, connector_jar: Path) -> Bundle:
    """Write the job's archive and the connector jar into ``out``."""
    if not connector_jar.is_file():
        raise ConfigError(
            f"Flink Kafka connector jar not found: {connector_jar}. Fetch it with "
            f"`bash scripts/install/flink-kafka.sh`, or point --connector-jar at {CONNECTOR_JAR_NAME}"
        )
    check_output_folder(out)
    out.mkdir(parents=True, exist_ok=True)
    dependencies = job_dependencies()
    archive = out / BUNDLE_NAME
    written: set[str] = set()
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for dist in dependencies:
            for source, name in _dist_files(dist):
                if name not in written and source.is_file():
                    zf.write(source, name)
                    written.add(name)
        for source, name in _project_files():
            zf.write(source, name)
    jar = out / connector_jar.name
    if jar.resolve() != connector_jar.resolve():
        shutil.copyfile(connector_jar, jar)
    return Bundle(
        folder=out,
        archive=archive,
        connector_jar=jar,
        dependencies=[f"{d.metadata['Name']}=={d.version}" for d in dependencies],
    )


def python_tag() -> str:
    """The Python the archive's compiled extensions were built for: the cluster's must match."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"
