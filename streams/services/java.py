"""Finding a usable ``java``."""

from __future__ import annotations

import re
import shutil
import subprocess

from streams.errors import ServiceError


def java_major_version(java: str) -> int:
    """The major version of ``java``; ``ServiceError`` if it is missing or unreadable."""
    path = shutil.which(java)
    if path is None:
        raise ServiceError(f"'{java}' not found on PATH: install Java 17 (apt-get install openjdk-17-jre-headless)")
    proc = subprocess.run([path, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if match is None:
        raise ServiceError(f"could not read the version of {path}: {(proc.stderr or proc.stdout)[:200]}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def require_java(java: str, minimum: int, maximum: int, service: str) -> None:
    """Raise unless ``java`` is between ``minimum`` and ``maximum`` (inclusive)."""
    major = java_major_version(java)
    if not minimum <= major <= maximum:
        raise ServiceError(f"{service} needs Java {minimum}..{maximum}, but '{java}' is Java {major}")
