"""aiokafka's client tracks every topic it waits on (``projections.kafka_metadata``), and the check of its source."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from projections.kafka_metadata import AiokafkaVersionError, check_wait_on_metadata, install


class _Cluster:
    def __init__(self, known: dict[str, set[int]]) -> None:
        self.known = known
        self.unauthorized_topics: set[str] = set()

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.known.get(topic)


class _Client:
    """What ``AIOKafkaClient._wait_on_metadata`` reads of its client when the topic is in the metadata."""

    def __init__(self, known: dict[str, set[int]]) -> None:
        self.cluster = _Cluster(known)
        self._topics: set[str] = set()


def test_a_topic_found_in_the_metadata_is_tracked_by_the_wait_every_send_goes_through() -> None:
    """The replay stall: a topic known only from a fetch of every topic's metadata was sent to untracked, and the
    next answer (asking for the tracked topics only) removed it while a batch of it was queued."""
    from aiokafka.client import AIOKafkaClient

    from schemas.settings import KafkaSettings
    from streams.clients.kafka_config import common_kwargs

    common_kwargs(KafkaSettings())  # every client of a distill process is built from these
    client: Any = _Client({"jobs": {0, 1}})
    partitions = asyncio.run(AIOKafkaClient._wait_on_metadata(client, "jobs"))
    assert partitions == {0, 1}
    assert client._topics == {"jobs"}


def test_importing_the_client_arguments_patches_nothing_building_them_installs_the_tracking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A side effect belongs to startup, not to an import: the module imports clean, the first client's
    arguments install it."""
    import importlib

    from aiokafka.client import AIOKafkaClient

    import streams.clients.kafka_config as kafka_config
    from schemas.settings import KafkaSettings

    current = AIOKafkaClient._wait_on_metadata
    original = getattr(current, "__wrapped__", current)
    monkeypatch.setattr(AIOKafkaClient, "_wait_on_metadata", original)
    importlib.reload(kafka_config)
    assert AIOKafkaClient._wait_on_metadata is original
    kafka_config.common_kwargs(KafkaSettings())
    assert getattr(AIOKafkaClient._wait_on_metadata, "_distill_tracks_topics", False)


def test_installing_twice_wraps_once() -> None:
    from aiokafka.client import AIOKafkaClient

    install()
    first = AIOKafkaClient._wait_on_metadata
    install()
    assert AIOKafkaClient._wait_on_metadata is first


def test_a_changed_aiokafka_method_is_refused() -> None:
    with pytest.raises(AiokafkaVersionError, match="add_topic"):
        check_wait_on_metadata(
            "async def _wait_on_metadata(self, topic):\n    partitions = self.cluster.partitions_for_topic(topic)\n"
        )
