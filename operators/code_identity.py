"""What a TaskManager's Python interpreter keeps of the jobs it ran before (thread mode).

In thread mode a TaskManager runs the Python functions of every job it is
given in its JVM's one embedded interpreter. Imported modules stay imported
when a job ends, while the job's files (``flink run -pyfs``) are deleted. A
job submitted after it to the same TaskManagers (a resubmission, an upgrade
on a session cluster) then runs the modules the earlier job imported, not its
own files, and whatever those modules find by their own file's path is gone:
on a standalone cluster, a job on MariaDB after one on SQLite failed to import
``vdoctor.stores.mysql``, and with that import mended, to read the knowledge
pack beside ``vdoctor/knowledge``. Pointing the old modules at the new files
does not make them the new job's modules.

So the diagnosis operator's ``open()`` calls ``enter_job`` with the identity
of the code the job was built from (``code_id``, on the client), and the job
stops with an error that says what to do (run it on fresh TaskManagers) when
the interpreter's code is an earlier job's whose files are gone, or another
version than the job's. Jobs of one version running side by side on the same
TaskManagers share the code and pass.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from vdoctor.errors import ConfigError

# The packages of this project a job ships (``vdoctor package``).
PACKAGES = ("vdoctor", "operators", "jobs")

# The identity of the code this interpreter loaded, worked out when the first job entered. A module global
# of the one interpreter: a later job on the same TaskManager finds it here.
_loaded: str | None = None

_FRESH = (
    "in thread mode a TaskManager's Python interpreter keeps the first job code it ran: run this job on fresh "
    "TaskManagers (restart them; in application mode, as on Kubernetes, every deployment has its own)"
)


def _loaded_root() -> Path:
    """Where this interpreter imported the project's packages from."""
    import vdoctor

    return Path(vdoctor.__file__).resolve().parent.parent


def code_id(root: Path | None = None) -> str:
    """The identity of the job's code: its packages' files, sources and data alike (the knowledge pack), as
    ``vdoctor package`` ships them (bytecode left out: each machine compiles its own), and the distributions
    shipped beside them (``*.dist-info`` in the same folder, named with their versions: the job archive's
    dependencies), as found under ``root`` (default: where ``vdoctor`` was imported from)."""
    root = _loaded_root() if root is None else root
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    for dist in sorted(p.name for p in root.glob("*.dist-info")):
        digest.update(dist.encode() + b"\0")
    return digest.hexdigest()[:16]


def enter_job(shipped: str) -> None:
    """Stop the job (``ConfigError``) unless this interpreter runs the code it was built from (``shipped``:
    ``code_id()`` on the client)."""
    global _loaded
    root = _loaded_root()
    if not (root / "vdoctor" / "__init__.py").is_file():
        gone = f"this job's Python code was loaded by an earlier job, whose files are gone ({root})"
        raise ConfigError(f"{gone}: {_FRESH}")
    if _loaded is None:
        _loaded = code_id(root)
    if shipped != _loaded:
        raise ConfigError(
            f"this TaskManager's Python interpreter holds another version of the job's code (code id {_loaded}, "
            f"the job's is {shipped}): {_FRESH}"
        )
