"""The projector's side of ``schemas.event_ids``, on Cassandra: an event id reused with other content is
dead-lettered (``EventIdReused``) and neither stored nor indexed; an exact duplicate is silent; a projector
that does not remember the session (a restart) reads the first digests from ``event_ids``; a deletion lets
the id name new content. Before, the later record replaced the first one's row (same timestamp) or added
a second row (another timestamp), and search found its text.
"""

from __future__ import annotations

import json

import pytest

from projections.indexer import RecallIndexer
from projections.projector import Projector
from schemas import SessionKey
from tests.integration.test_projections_support import EVENTS, SUMMARIES, Store, event, key, record, store

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]
__all__ = ["key", "store"]


def restarted(store: Store) -> None:
    """A projector and an indexer that remember nothing (a restart), on the same keyspace."""
    ks = store.settings.cassandra.keyspace
    store.projector = Projector(store.session, ks, events_topic=EVENTS, summaries_topic=SUMMARIES,
                                consumer_group="g")  # fmt: skip
    store.indexer = RecallIndexer(store.session, ks, events_topic=EVENTS, consumer_group="g-index")


async def test_a_reused_event_id_is_refused_across_a_restart_and_a_duplicate_is_not(
    store: Store, key: SessionKey
) -> None:
    first = event(key, "e1", at=1, content="草莓 strawberry first")
    await store.apply(
        record(EVENTS, first, offset=10), record(EVENTS, event(key, "e2", at=2, content="two"), offset=11)
    )
    # In the same process: same stamp and another stamp.
    await store.apply(
        record(EVENTS, {**first, "message": {"role": "user", "content": "blueberry replaced"}}, offset=12),
        record(EVENTS, {**first, "timestamp": "2026-01-01T00:00:09Z"}, offset=13),
    )
    restarted(store)
    again = json.dumps(first, indent=1).encode()  # a producer's retry written otherwise: the same event
    outcome = await store.apply(
        record(EVENTS, again, offset=14),
        record(EVENTS, {**first, "message": {"role": "user", "content": "raspberry after restart"}}, offset=15),
        record(EVENTS, event(key, "e3", at=3, content="three"), offset=16),
    )
    letters = [(d.source_offset, d.error_class, d.stage) for d in store.dead]
    assert letters == [(o, "EventIdReused", "project") for o in (12, 13, 15)], store.dead
    assert all("'e1'" in d.reason for d in store.dead)
    assert outcome.events == 2
    shown = [(e.event_id, e.text) for e in await store.reader.events_after_boundary(key)]
    assert shown == [("e1", "草莓 strawberry first"), ("e2", "two"), ("e3", "three")]
    for word in ("blueberry", "raspberry"):
        assert await store.reader.session_search(key, word, "current_session") == [], word
    assert await store.reader.session_search(key, "strawberry", "current_session")


async def test_after_a_deletion_an_event_id_may_name_new_content(store: Store, key: SessionKey) -> None:
    await store.apply(record(EVENTS, event(key, "e1", at=1, content="before"), offset=20))
    delete = {"type": "delete_session", "command_id": "d1", "app_name": key.app_name, "user_id": key.user_id,
              "session_id": key.session_id}  # fmt: skip
    await store.apply(record(EVENTS, delete, offset=21, timestamp_ms=1))
    restarted(store)
    await store.apply(record(EVENTS, event(key, "e1", at=1, content="re-imported"), offset=22))
    await store.apply(record(EVENTS, event(key, "e1", at=1, content="before"), offset=23))
    assert [(d.source_offset, d.error_class) for d in store.dead] == [(23, "EventIdReused")]
    shown = [(e.event_id, e.text) for e in await store.reader.events_after_boundary(key)]
    assert shown == [("e1", "re-imported")]
