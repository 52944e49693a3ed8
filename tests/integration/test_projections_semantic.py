"""Semantic session_search: the real ``openai`` client (streams.clients.embedder_openai) against a local embeddings
server, vectors stored by the projector, ``ANN OF`` queries in Cassandra; scopes never cross tenants."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from pydantic import SecretStr

from projections.statements import vector_table
from schemas import SessionKey
from schemas.settings import EmbedderSettings, Settings
from streams.clients.embedder_openai import OpenAIEmbedder
from tests.integration.test_projections_support import Store, close_store, event, open_store, summary
from tests.support.embeddings_server import EmbeddingsServer

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]

DIMS = 64
ALICE = SessionKey("garage", "alice", "s1")
ALICE_2 = SessionKey("garage", "alice", "s2")
BOB = SessionKey("garage", "bob", "s1")  # same app and session id as alice's, another user
OTHER_APP = SessionKey("bakery", "alice", "s1")  # same user and session id, another app
TENANTS = (ALICE, ALICE_2, BOB, OTHER_APP)
# The server maps these words onto one another, so the query shares no word (and no token) with the answer:
# only the vector search can find it.
SYNONYMS = {"automobile": "car", "vehicle": "car", "motorcar": "car"}


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddingsServer]:
    with EmbeddingsServer(synonyms=SYNONYMS) as s:
        yield s


@pytest_asyncio.fixture(loop_scope="session")
async def store(pooled_settings: Settings, server: EmbeddingsServer) -> AsyncIterator[Store]:
    embedder = OpenAIEmbedder(
        EmbedderSettings(base_url=server.base_url, api_key=SecretStr("sk-test"), model="embed-test", dimensions=DIMS)
    )
    s = open_store(pooled_settings, embedder=embedder)
    try:
        for key in TENANTS:
            tag = f"{key.app_name}-{key.user_id}-{key.session_id}"
            await s.events(
                event(key, f"{tag}-1", at=1, content=f"my car {tag} makes a rattling noise"),
                event(key, f"{tag}-2", at=2, role="assistant", content="check the brake pads and the exhaust"),
                event(key, f"{tag}-3", at=3, content="what about the weather in Lisbon tomorrow"),
                event(key, f"{tag}-4", at=4, role="assistant", content="sunny with a light breeze"),
            )
        await s.summaries(summary(ALICE, 1, text="car noise", cutoff=2, last_event_id="garage-alice-s1-2"))
        assert s.dead == []
        yield s
    finally:
        close_store(s)


async def test_the_real_client_called_the_server_and_stored_vectors(store: Store, server: EmbeddingsServer) -> None:
    assert server.requests, "the projector never called the embeddings endpoint"
    first = server.requests[0]
    assert first.model == "embed-test" and first.dimensions == DIMS and first.authorization == "Bearer sk-test"
    assert (first.user_agent or "").startswith("AsyncOpenAI/Python")
    table = vector_table(DIMS)
    rows = list(store.session.execute(f"SELECT app_name, user_id, event_id FROM "
                                      f"{store.settings.cassandra.keyspace}.{table}"))  # fmt: skip
    assert len(rows) == 4 * len(TENANTS)


async def test_ann_finds_what_lexical_search_cannot(store: Store) -> None:
    lexical = await store.reader.session_search(ALICE, "automobile", "current_session", 3, mode="lexical")
    assert lexical == []  # no shared token
    hits = await store.reader.session_search(ALICE, "automobile", "current_session", 3)
    assert hits and hits[0].event_id == "garage-alice-s1-1"
    assert hits[0].score > max(h.score for h in hits[1:])  # the nearest vector ranks first
    weather = await store.reader.session_search(ALICE, "lisbon forecast weather", "current_session", 1)
    assert [h.event_id for h in weather] == ["garage-alice-s1-3"]


async def test_semantic_current_hidden_stays_inside_the_boundary(store: Store) -> None:
    hits = await store.reader.session_search(ALICE, "vehicle", "current_hidden", 10)
    assert {h.event_id for h in hits} <= {"garage-alice-s1-1", "garage-alice-s1-2"}
    assert hits and hits[0].event_id == "garage-alice-s1-1"


async def test_semantic_scopes_never_cross_tenants(store: Store) -> None:
    scopes = ("current_hidden", "current_session", "other_sessions", "all_sessions")
    queries = ("automobile", "motorcar rattling", "weather", "brake pads exhaust")
    seen = 0
    for key, scope, query in itertools.product(TENANTS, scopes, queries):
        hits = await store.reader.session_search(key, query, scope, 10)
        seen += len(hits)
        prefix = f"{key.app_name}-{key.user_id}-"
        for hit in hits:
            # event ids name their tenant; session ids repeat across tenants on purpose
            assert hit.event_id.startswith(prefix), (key, scope, query, hit)
            if scope in ("current_hidden", "current_session"):
                assert hit.session_id == key.session_id
            if scope == "other_sessions":
                assert hit.session_id != key.session_id
    assert seen > 0


async def test_other_sessions_reach_the_tenants_other_session_by_meaning(store: Store) -> None:
    hits = await store.reader.session_search(ALICE, "automobile", "other_sessions", 1)
    assert [(h.session_id, h.event_id) for h in hits] == [("s2", "garage-alice-s2-1")]
