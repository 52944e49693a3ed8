"""The codebase stays lint-clean and ``mypy --strict`` clean (the gates CI enforces)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["schemas", "projections", "streams", "tests", "benchmarks", "examples"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_check_passes() -> None:
    result = _run("ruff", "check", *PATHS)
    assert result.returncode == 0, result.stdout[-3000:]


def test_ruff_format_is_applied() -> None:
    result = _run("ruff", "format", "--check", *PATHS)
    assert result.returncode == 0, result.stdout[-3000:]


def test_mypy_strict_passes() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout[-3000:]
