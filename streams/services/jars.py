"""Resolves a service's runtime classpath from its pom under ``services/`` into a cache.

The jars are copied once into ``<home>/jars/<name>-<hash of pom>/``; a later
call finds them there and downloads nothing. Every jar is opened as a zip on
each call, so a truncated or corrupted cache is noticed: repaired from the Maven
local repository when its copies are intact, else downloaded again.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import zipfile
from pathlib import Path

from streams.errors import ServiceError

POM_ROOT = Path(__file__).resolve().parents[2] / "services"
_COMPLETE = ".complete"


def pom_path(name: str, root: Path = POM_ROOT) -> Path:
    """The pom of service ``name`` (``kafka`` or ``cassandra``)."""
    path = root / name / "pom.xml"
    if not path.is_file():
        raise ServiceError(f"{name}: recipe {path} is missing (distill must run from its source checkout)")
    return path


def corrupt_jar(jar: Path) -> bool:
    """Whether ``jar`` is not a readable zip archive."""
    try:
        with zipfile.ZipFile(jar):
            return False
    except (zipfile.BadZipFile, OSError):
        return True


def corrupt_jars(directory: Path) -> list[Path]:
    """Jars in ``directory`` that are not readable zip archives."""
    return [jar for jar in sorted(directory.glob("*.jar")) if corrupt_jar(jar)]


def resolve_classpath(
    name: str, home: Path, mvn: str = "mvn", log: Path | None = None, pom_root: Path = POM_ROOT
) -> Path:
    """Return the directory holding every runtime jar of service ``name``.

    Runs Maven only when the cache is missing or corrupted. Raises
    ``ServiceError`` naming the cause (no ``mvn``, download failed,
    corrupted artifacts that a re-download did not fix).
    """
    pom = pom_path(name, pom_root)
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
    target = home / "jars" / f"{name}-{digest}"
    if (target / _COMPLETE).exists():
        bad = corrupt_jars(target)
        if not bad or _restore_from_local_repo(bad):
            return target
        _purge_from_local_repo(bad)
        shutil.rmtree(target)
    _copy_dependencies(pom, target, mvn, log)
    bad = corrupt_jars(target)
    if bad:
        _purge_from_local_repo(bad)
        shutil.rmtree(target)
        _copy_dependencies(pom, target, mvn, log)
        bad = corrupt_jars(target)
        if bad:
            names = ", ".join(p.name for p in bad[:3])
            raise ServiceError(f"{name}: corrupted jars after a fresh download: {names}")
    (target / _COMPLETE).write_text(digest)
    return target


def _copy_dependencies(pom: Path, target: Path, mvn: str, log: Path | None) -> None:
    if shutil.which(mvn) is None:
        raise ServiceError(f"'{mvn}' not found on PATH: install Maven (apt-get install maven) to fetch the jars")
    target.mkdir(parents=True, exist_ok=True)
    cmd = [
        mvn, "-q", "-B", "-f", str(pom),
        "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={target}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln] or ["(no output)"]
        raise ServiceError(f"downloading jars for {pom.parent.name} failed: {lines[0].strip()[:300]}")


def _local_repo() -> Path:
    return Path.home() / ".m2" / "repository"


def _restore_from_local_repo(jars: list[Path]) -> bool:
    """Copy intact Maven local-repository copies over corrupted cached jars; False if one has none.

    The cache is a copy of the local repository: a jar damaged in the cache alone is
    repaired without Maven or the network.
    """
    sources: list[tuple[Path, Path]] = []
    for jar in jars:
        intact = [p for p in _local_repo().rglob(jar.name) if not corrupt_jar(p)]
        if not intact:
            return False
        sources.append((intact[0], jar))
    for source, jar in sources:
        shutil.copyfile(source, jar)
    return not corrupt_jars(jars[0].parent)


def _purge_from_local_repo(jars: list[Path]) -> None:
    """Delete the Maven local-repository copies of corrupted jars so Maven fetches them again."""
    for jar in jars:
        for cached in _local_repo().rglob(jar.name):
            cached.unlink(missing_ok=True)
