"""Every bench imports: a bench the README tells users to run must not stop at its first line.

bench/kafka_throughput.py imported a class from where it no longer lived and
stopped at import for several releases before anyone ran it again.
"""

from __future__ import annotations

import importlib

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit

BENCHES = sorted(p.stem for p in (REPO_ROOT / "bench").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", BENCHES)
def test_the_bench_imports(name: str) -> None:
    module = importlib.import_module(f"bench.{name}")
    if 'if __name__ == "__main__":' in (REPO_ROOT / "bench" / f"{name}.py").read_text():
        assert callable(getattr(module, "main", None)), f"bench/{name}.py runs as a script but has no main()"
