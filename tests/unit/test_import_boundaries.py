"""Imports run one way: no cycles, no arrows from a lower layer to a higher one, a pure domain package.

Layers, lowest first: ``vdoctor`` (the domain) < ``operators`` (Flink adapters)
and ``inspector`` (the memory inspector's web app) < ``jobs`` (wiring and the
CLI). ``devtools`` (test and benchmark tools) may import ``vdoctor``;
``vdoctor``, ``operators``, ``inspector`` and ``jobs`` never import it.

The module graph is read with ``ast`` from the source files, not by importing
them. Every import statement counts, wherever it is: at module level, inside a
function (a cycle through a function-level import is still a cycle: it only
moves the failure to the first call), or under ``try``. Imports inside an
``if TYPE_CHECKING:`` block never run, so they cannot make an import cycle
and are left out of the cycle check; they still name the other module's
types, so they do count for the layer check.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("vdoctor", "operators", "inspector", "jobs", "devtools")
DOMAIN = ROOT / "vdoctor"
DRIVERS = {
    "pymysql": {"mysql.py", "doris.py"},
    "mem0": {"mem0.py", "mem0_folder.py"},
    "qdrant_client": {"mem0.py", "mem0_folder.py"},
}
# Which top-level packages each package may import (besides itself and third-party code).
ALLOWED = {
    "vdoctor": set(),
    "operators": {"vdoctor"},
    # An entry point at the edge, like jobs/: it reads the domain, the domain never reads it.
    "inspector": {"vdoctor"},
    "jobs": {"vdoctor", "operators", "inspector"},
    "devtools": {"vdoctor"},
}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`


def _module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


MODULES = _module_files()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement in the tree, and whether it sits under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_only
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _import_nodes(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _import_nodes(ast.Module(body=[child], type_ignores=[]), type_only)
        else:
            yield from _import_nodes(node, type_only)


def _resolve(name: str) -> str | None:
    """The project module an import of ``name`` runs: the longest prefix that is one of ours."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def _edges_of(module: str, path: Path) -> list[Edge]:
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    edges: list[Edge] = []
    for node, type_only in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import name`: name is a submodule, or something defined in pkg.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        for target in targets:
            resolved = _resolve(target)
            if resolved is not None and resolved != module:
                edges.append(Edge(module, resolved, node.lineno, type_only))
    return edges


EDGES = [edge for module, path in MODULES.items() for edge in _edges_of(module, path)]


def _cycles(edges: list[Edge] = EDGES) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan), over runtime imports."""
    graph: dict[str, set[str]] = {m: set() for e in edges for m in (e.source, e.target)}
    for e in edges:
        if not e.type_only:
            graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _describe(component: set[str]) -> str:
    arrows = sorted(
        f"{e.source} -> {e.target} (line {e.line})"
        for e in EDGES
        if e.source in component and e.target in component and not e.type_only
    )
    return "cycle through " + ", ".join(sorted(component)) + ":\n    " + "\n    ".join(arrows)


def test_the_checker_sees_function_level_imports_and_cycles_through_them() -> None:
    # jobs/cli_jobs.py imports the Kafka job inside a function (pyflink is heavy): that is an edge.
    assert any(e.source == "jobs.cli_jobs" and e.target == "jobs.kafka_job" and not e.type_only for e in EDGES)
    tree = ast.parse("def f():\n    from jobs import kafka_job\nif TYPE_CHECKING:\n    import jobs.cli\n")
    found = [(n.module if isinstance(n, ast.ImportFrom) else n.names[0].name, t) for n, t in _import_nodes(tree)]
    assert found == [("jobs", False), ("jobs.cli", True)]
    # a -> b -> c -> a is one cycle; a type-only arrow back makes none.
    ring = [Edge("a", "b", 1, False), Edge("b", "c", 1, False), Edge("c", "a", 9, False), Edge("c", "d", 1, False)]
    assert _cycles(ring) == [{"a", "b", "c"}]
    assert _cycles([Edge("a", "b", 1, False), Edge("b", "a", 1, True)]) == []


def test_no_import_cycles() -> None:
    found = [_describe(component) for component in _cycles()]
    assert found == [], "\n".join(found)


def test_no_import_from_a_lower_layer_to_a_higher_one() -> None:
    offenders = [
        f"{e.source} -> {e.target} (line {e.line}{', TYPE_CHECKING' if e.type_only else ''})"
        for e in EDGES
        if (src := e.source.split(".")[0]) != (dst := e.target.split(".")[0]) and dst not in ALLOWED[src]
    ]
    assert offenders == []


def test_domain_package_never_imports_flink() -> None:
    offenders = [p for p in DOMAIN.rglob("*.py") if "pyflink" in _top_level_imports(p)]
    assert offenders == []


def test_db_drivers_only_inside_their_backend_module() -> None:
    for driver, allowed in DRIVERS.items():
        offenders = [p.name for p in DOMAIN.rglob("*.py") if driver in _top_level_imports(p) and p.name not in allowed]
        assert offenders == [], f"{driver} imported outside its backend: {offenders}"


def _top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names
