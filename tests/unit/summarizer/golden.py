"""Golden-file comparison; ``DISTILL_UPDATE_GOLDEN=1`` rewrites the files."""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"


def check_golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if os.environ.get("DISTILL_UPDATE_GOLDEN") == "1" or not path.exists():
        if os.environ.get("DISTILL_UPDATE_GOLDEN") != "1":
            raise AssertionError(f"golden file {path} is missing; run with DISTILL_UPDATE_GOLDEN=1")
        path.write_text(actual, encoding="utf-8")
    assert actual == path.read_text(encoding="utf-8"), f"{name} differs from its golden file"
