"""session_search over real Cassandra: a fact deep inside a large tool result shows in the hit's snippet.

A long tool result is indexed in chunks (8 Ki characters, then up to 32 Ki);
the hit is the chunk holding the fact, and the snippet is the text around the
matched terms, not the chunk's first characters. ASCII and Chinese results, the
best two hits (whose snippet is their context window) and the rest.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from schemas import FunctionCall, SessionKey, ToolCall
from schemas.settings import Settings
from streams.clients.recall_reader import CassandraRecallReader
from streams.context.recall_tools import RecallExecutor
from tests.integration.test_projections_support import Store, close_store, event, open_store

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]

KEY = SessionKey("shop", "dana", "deep")
_LOG = "".join(f"line {i:05d}: worker restarted, queue depth {i * 7} ok\n" for i in range(2500))  # ~120 K
_ZH = "数据库连接池在夜间批处理时耗尽，重试队列不断增长，值班工程师记录了每一次重启。" * 1500  # ~60 K

FACTS = {
    "t1": "the vault passcode for bay 12 is ZEBRA-7731",
    "t2": "the vault passcode for bay 40 is OKAPI-2208",
    "t3": "the vault passcode for bay 77 is LLAMA-5150",
    "z1": "保险库的密码是斑马七七三一号",
    "z2": "保险库的密码是海豚二二零八号",
}


def _deep(filler: str, fact: str, at: float) -> str:
    cut = filler.find("\n", int(len(filler) * at)) + 1 or int(len(filler) * at)
    return f"{filler[:cut]}{fact}\n{filler[cut:]}"


def _records() -> list[dict[str, Any]]:
    out = [event(KEY, "u0", at=0, content="run the nightly checks")]
    for n, (event_id, fact) in enumerate(FACTS.items(), start=1):
        filler = _ZH if event_id.startswith("z") else _LOG
        call = [{"id": f"c{n}", "type": "function", "function": {"name": "read_log", "arguments": "{}"}}]
        out.append(event(KEY, f"a{n}", at=2 * n - 1, role="assistant", content=None, tool_calls=call))
        out.append(event(KEY, event_id, at=2 * n, role="tool", content=_deep(filler, fact, 0.55 + 0.1 * n),
                         tool_call_id=f"c{n}", name="read_log"))  # fmt: skip
    return out


@pytest_asyncio.fixture(loop_scope="session")
async def store(pooled_settings: Settings) -> AsyncIterator[Store]:
    s = open_store(pooled_settings)
    try:
        await s.events(*_records())
        assert s.dead == []
        yield s
    finally:
        close_store(s)


async def _search(store: Store, query: str) -> list[dict[str, Any]]:
    executor = RecallExecutor(
        CassandraRecallReader(store.reader), app_name=KEY.app_name, user_id=KEY.user_id, session_id=KEY.session_id
    )
    args = {"query": query, "scope": "current_session", "search_mode": "lexical", "top_k": 10}
    call = ToolCall(id="s1", function=FunctionCall(name="session_search", arguments=json.dumps(args)))
    body = json.loads((await executor.execute(call)).content or "")
    assert "error" not in body, body
    results: list[dict[str, Any]] = body["results"]
    return results


@pytest.mark.parametrize(("query", "expected"), [("vault passcode", {"t1", "t2", "t3"}), ("保险库密码", {"z1", "z2"})])
async def test_the_snippet_of_a_deep_hit_shows_the_fact(store: Store, query: str, expected: set[str]) -> None:
    results = await _search(store, query)
    assert {r["event_id"] for r in results} == expected
    for r in results:
        assert FACTS[r["event_id"]] in r["snippet"], r["snippet"]
        assert len(r["snippet"]) <= 280
    best = results[0]
    assert best["snippet"] == best["context"] and "[match] tool: " in best["context"]
