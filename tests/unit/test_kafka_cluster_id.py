"""The local Kafka's cluster id is a valid id the storage tool reads as a value, never as an option."""

from __future__ import annotations

import base64
import uuid

import pytest

from streams.services import kafka


def test_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    dashed = uuid.UUID(bytes=base64.urlsafe_b64decode("-" + "A" * 21 + "=="))
    plain = uuid.UUID(int=1)
    ids = iter([dashed, plain])
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: next(ids))
    cluster_id = kafka.new_cluster_id()
    assert cluster_id == base64.urlsafe_b64encode(plain.bytes).rstrip(b"=").decode()
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")
