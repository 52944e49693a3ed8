"""Names a test run created on the broker, deleted when the pytest session ends.

Fixtures and helpers that make per-test topics or worker app ids (consumer group,
changelog and assignor topics are named after it) register their prefix here; the
session fixture ``_broker_cleanup`` (tests/conftest.py) deletes every topic and
consumer group under them once all tests are done (workers stopped). What a killed
run leaves behind: ``distill topics prune --prefix t- --prefix distill-test- ...``.
"""

from __future__ import annotations

REGISTERED: set[str] = set()


def register_prefix(prefix: str) -> str:
    """Delete topics and groups named ``prefix...`` at the end of the session; returns ``prefix``."""
    if not prefix:
        raise ValueError("an empty prefix would match every topic")
    REGISTERED.add(prefix)
    return prefix
