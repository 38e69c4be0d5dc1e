"""Shared test fixtures and paths."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# Licensed data sets live beside the checkout, never inside it.
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
