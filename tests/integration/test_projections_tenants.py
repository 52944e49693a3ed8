"""Tenant isolation: no read ever crosses (app_name, user_id) (a hypothesis property over random tenants)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.errors import AnchorNotFound
from schemas import SessionKey
from schemas.settings import Settings
from tests.integration.test_projections_support import Store, close_store, event, open_store, summary

pytestmark = pytest.mark.integration

_names = st.sampled_from(["a", "b", "c"])


def test_tenant_isolation_property(pooled_settings: Settings) -> None:
    s = open_store(pooled_settings)
    counter = iter(range(10**6))

    @settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        tenants=st.lists(st.tuples(_names, _names, _names), min_size=1, max_size=5, unique=True),
        word=st.sampled_from(["apple", "banana", "cherry"]),
        scope=st.sampled_from(["current_hidden", "current_session", "other_sessions", "all_sessions"]),
    )
    def check(tenants: list[tuple[str, str, str]], word: str, scope: str) -> None:
        asyncio.run(_example(s, next(counter), tenants, word, scope))

    try:
        check()
    finally:
        close_store(s)


async def _example(s: Store, run: int, tenants: list[tuple[str, str, str]], word: str, scope: str) -> None:
    keys = [SessionKey(f"app{run}-{a}", f"user-{u}", f"s-{x}") for a, u, x in tenants]

    def eid(k: SessionKey, n: int) -> str:
        return f"{k.app_name}.{k.user_id}.{k.session_id}.{n}"  # unique across tenants

    for k in keys:
        await s.events(
            event(k, eid(k, 1), at=1, content=f"{word} from {k.app_name} {k.user_id}"),
            event(k, eid(k, 2), at=2, content=f"more {word}"),
        )
        await s.summaries(summary(k, 1, text=k.user_id, cutoff=2, last_event_id=eid(k, 2)))
    for k in keys:
        tenant = [o for o in keys if (o.app_name, o.user_id) == (k.app_name, k.user_id)]
        allowed = {(o.session_id, eid(o, n)) for o in tenant for n in (1, 2)}
        hits = await s.reader.session_search(k, word, scope, top_k=10)
        if scope != "other_sessions":
            assert hits, "every session has matching events in its own scopes"
        assert {(h.session_id, h.event_id) for h in hits} <= allowed
        if scope == "other_sessions":
            assert {h.session_id for h in hits} == {o.session_id for o in tenant if o != k}
        assert await s.reader.get_summary_text(k) == k.user_id
        own = await s.reader.session_load(k, event_id=eid(k, 1), after=3)
        assert {m.event_id for m in own.messages} <= {eid(k, 1), eid(k, 2)}
        for other in keys:
            if (other.app_name, other.user_id) != (k.app_name, k.user_id):
                with pytest.raises(AnchorNotFound):
                    await s.reader.session_load(k, event_id=eid(other, 1))
        after = await s.reader.events_after_boundary(k, summary=None, use_latest=False)
        assert {e.event_id for e in after} == {eid(k, 1), eid(k, 2)}
