import ast
from pathlib import Path

import pytest

from streams.summarizer.length import cap_length

PACKAGE = Path(__file__).resolve().parents[3] / "streams" / "summarizer"
ADAPTER_ONLY = ("openai", "faust", "aiokafka", "kafka", "cassandra", "httpx", "aiohttp")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_only_the_adapter_imports_io_libraries(path: Path) -> None:
    io = _imports(path) & set(ADAPTER_ONLY)
    if path.name == "openai_adapter.py":
        assert io == {"openai"}
    else:
        assert io == set(), f"{path.name} imports {io}"


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("Short.", 100, "Short."),
        ("One. Two three. Four five six.", 16, "One. Two three."),
        ("Version 3.5 is out. Next.", 12, "Version 3.5…"),
        ("no sentence end here at all", 14, "no sentence…"),
        ("Supercalifragilistic", 5, "…"),
    ],
)
def test_cap_length_cuts_at_sentences_then_words(text: str, limit: int, expected: str) -> None:
    capped = cap_length(text, limit)
    assert capped == expected
    assert len(capped) <= limit
