"""The domain package stays pure: no pyflink anywhere, DB drivers only in their backend."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

DOMAIN = Path(__file__).resolve().parents[2] / "vdoctor"
DRIVERS = {"pymysql": {"mysql.py", "doris.py"}, "mem0": {"mem0.py"}, "qdrant_client": {"mem0.py"}}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_domain_package_never_imports_flink_or_jobs() -> None:
    offenders = [p for p in DOMAIN.rglob("*.py") if _imports(p) & {"pyflink", "operators", "jobs"}]
    assert offenders == []


def test_db_drivers_only_inside_their_backend_module() -> None:
    for driver, allowed in DRIVERS.items():
        offenders = [p.name for p in DOMAIN.rglob("*.py") if driver in _imports(p) and p.name not in allowed]
        assert offenders == [], f"{driver} imported outside its backend: {offenders}"
