"""Imports point one way (schemas ← projections ← streams); pure rule packages import no I/O library."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IO_LIBRARIES = {"aiokafka", "faust", "mode", "cassandra", "openai", "aiohttp", "kafka"}
PURE_PACKAGES = ["streams/rules", "streams/summarizer", "streams/context"]
# The one module of a pure package allowed to talk to the outside world.
ADAPTERS = {"streams/summarizer/openai_adapter.py"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(
    ("package", "forbidden"), [("schemas", {"projections", "streams"}), ("projections", {"streams"})]
)
def test_imports_point_one_way(package: str, forbidden: set[str]) -> None:
    offenders = {str(p.relative_to(ROOT)): _imports(p) & forbidden for p in _modules(package)}
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_pure_packages_import_no_io_library(package: str) -> None:
    offenders = {
        str(p.relative_to(ROOT)): _imports(p) & IO_LIBRARIES
        for p in _modules(package)
        if str(p.relative_to(ROOT)) not in ADAPTERS
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_only_settings_reads_the_environment() -> None:
    readers = []
    for package in ("schemas", "projections", "streams"):
        for path in _modules(package):
            text = path.read_text()
            if "os.environ" in text or "os.getenv" in text:
                readers.append(str(path.relative_to(ROOT)))
    # tokens.py seeds TIKTOKEN_CACHE_DIR, the variable tiktoken itself reads; local_pipeline hands
    # its own environment, plus overrides, down to the worker it starts.
    assert sorted(readers) == ["streams/rules/tokens.py", "streams/services/local_pipeline.py"]


@pytest.mark.parametrize(
    "module",
    [
        "streams/app/decoding.py",
        "streams/app/track.py",
        "streams/app/sweep.py",
        "streams/app/sweep_watch.py",
        "streams/client.py",
    ],
)
def test_handler_decoding_and_client_need_no_faust(module: str) -> None:
    """Agents stay thin: the handler and the decoding rules (and the client) are importable without Faust."""
    code = f"import sys, {module[:-3].replace('/', '.')}; print('faust' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
