"""aiokafka's client keeps the metadata of every topic a producer sends to.

Why: aiokafka's client asks the broker for the metadata of the topics it
*tracks* (``_topics``), or of every topic while it tracks none, and each
answer replaces the metadata it had. A topic enters ``_topics`` only when a
send finds it missing from the metadata (``_wait_on_metadata`` →
``add_topic``). So a topic the producer learned from a fetch of every topic
(Faust forces one after each topic it creates) is sent to without being
tracked; as soon as another topic is tracked (one created after that fetch,
a changelog say), the next answer names only the tracked ones and the
untracked topic's partitions lose their leader. A batch queued for them and
not sent yet (a request to the same broker was in flight) then waits: the
sender refreshes the metadata for ever, each answer without that topic, until
the batch expires (Faust's producer: after 20 minutes) or until a later send
to the topic tracks it. A replay worker sends its jobs in one burst and then
nothing to that topic: its first batch of jobs was never delivered, its events
never committed, and the run stalled with 0 summaries
(``tests/integration/test_batch_produce.py`` shows the mechanism).

:func:`install` makes ``_wait_on_metadata`` (every send and ``send_batch`` goes
through it) track the topic before anything is queued for it: every topic
with a queued batch is then in each metadata request built afterwards, and an
answer to a request built earlier is followed by the sender's own refresh,
which names it.

Pinned to aiokafka 0.13/0.14: :func:`install` fails loudly if the method it wraps
no longer looks as described.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

_EXPECTED = ("self.add_topic(topic)", "partitions = self.cluster.partitions_for_topic(topic)")


class AiokafkaVersionError(RuntimeError):
    """The installed aiokafka is not the one :mod:`projections.kafka_metadata` was written for."""


def check_wait_on_metadata(source: str) -> None:
    """Raise unless ``source`` (aiokafka's ``AIOKafkaClient._wait_on_metadata``) is the known one."""
    missing = [s for s in _EXPECTED if s not in source]
    if missing:
        raise AiokafkaVersionError(
            f"aiokafka's AIOKafkaClient._wait_on_metadata changed (no {missing[0]!r}): "
            "re-check projections/kafka_metadata"
        )


def install() -> None:
    """Make every aiokafka client track the topics it waits on (idempotent; see the module)."""
    from aiokafka.client import AIOKafkaClient

    current = AIOKafkaClient._wait_on_metadata
    if getattr(current, "_distill_tracks_topics", False):
        return
    check_wait_on_metadata(inspect.getsource(current))

    @functools.wraps(current)
    async def _wait_on_metadata(self: Any, topic: str) -> Any:
        # Tracked before the caller queues anything for it: a plain set add, no request (a topic
        # missing from the metadata is fetched by the original, which finds it tracked already).
        self._topics.add(topic)
        return await current(self, topic)

    _wait_on_metadata._distill_tracks_topics = True  # type: ignore[attr-defined]
    AIOKafkaClient._wait_on_metadata = _wait_on_metadata


__all__ = ["AiokafkaVersionError", "check_wait_on_metadata", "install"]
