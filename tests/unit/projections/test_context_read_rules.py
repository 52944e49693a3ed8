"""The pure rules of the context read: summary applicability, visibility, user turns, projection lag."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from projections.context_read import (
    ancestors_nearest_first,
    applicable_summary,
    is_prompt_user_turn,
    projection_lag,
    visible,
)
from schemas import SessionEvent, SessionSummary
from streams.context.history import event_message
from streams.rules.eligibility import is_user_turn_message
from streams.rules.filter_keys import related

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
KEYS = ("", "app", "app/a", "app/a/x", "app/ab", "app/b", "other")


def _summary(key: str, text: str = "s", version: int = 1) -> SessionSummary:
    return SessionSummary(
        app_name="app", user_id="u", session_id="s", filter_key=key, summary=text, version=version,
        boundary={"cutoff_at": NOW}, model="m", prompt_version="p", created_at=NOW,
        report={"trigger": {"name": "manual"}}, job_id="j",
    )  # fmt: skip


@pytest.mark.parametrize("a", KEYS)
@pytest.mark.parametrize("b", KEYS)
def test_visible_is_the_streams_rule(a: str, b: str) -> None:
    assert visible(a, b) == related(a, b)


def test_ancestors_nearest_first() -> None:
    assert ancestors_nearest_first("app/a/x") == ("app/a/x", "app/a", "app", "")
    assert ancestors_nearest_first("") == ("",)


def test_only_the_key_or_an_ancestor_applies() -> None:
    stored = [_summary("app/a", "A"), _summary("app/b/x", "BX"), _summary("", "FULL")]
    picked = applicable_summary(stored, "app/a/x")
    assert picked is not None and (picked.filter_key, picked.source) == ("app/a", "ancestor")
    assert applicable_summary(stored, "app/a").source == "exact"  # type: ignore[union-attr]
    # A sibling's (app/a) or a descendant's (app/b/x) summary never stands for app/b: the full session's does.
    picked = applicable_summary(stored, "app/b")
    assert picked is not None and picked.filter_key == ""
    assert applicable_summary([_summary("app/a", "A")], "app/b") is None
    assert applicable_summary([_summary("app/b/x", "BX")], "app/b") is None
    assert applicable_summary([_summary("app/ab", "AB")], "app/a") is None  # whole segments
    # A blank summary is no summary: the nearest ancestor with text applies.
    assert applicable_summary([_summary("app/a", "  "), _summary("app", "APP")], "app/a").filter_key == "app"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "fields",
    [
        {"message": {"role": "user", "content": "你好"}},
        {"message": {"role": "user", "content": ""}},
        {"message": {"role": "user", "content": None}},
        {"message": {"role": "user", "content": ""}, "error": {"type": "t", "message": "m"}},
        {"message": {"role": "user", "content": "hi"}, "partial": True},
        {"message": {"role": "user", "content": "r", "tool_call_id": "c1"}},
        {"message": {"role": "assistant", "content": "hi"}},
        {"message": {"role": "tool", "content": "r", "tool_call_id": "c1"}},
        {"message": {"role": "system", "content": "sys"}},
    ],
)
def test_user_turn_is_the_assembly_rule(fields: dict[str, object]) -> None:
    event = SessionEvent(app_name="a", user_id="u", session_id="s", event_id="e", timestamp=NOW, author="x", **fields)
    msg = event_message(event)
    assert is_prompt_user_turn(event) == (msg is not None and is_user_turn_message(msg))


def _row(next_offset: int, end: int, updated_s: float, caught_up_s: float | None) -> SimpleNamespace:
    return SimpleNamespace(
        consumer_group="g", next_offset=next_offset, log_end_offset=end, updated_at=NOW - timedelta(seconds=updated_s),
        caught_up_at=None if caught_up_s is None else NOW - timedelta(seconds=caught_up_s),
    )  # fmt: skip


def test_projection_lag() -> None:
    fresh = projection_lag("ev", 1, [_row(100, 100, 0.5, 0.5)], NOW, 5.0)
    assert (fresh.events_behind, fresh.seconds_behind, fresh.known) == (0, 0.0, True)
    behind = projection_lag("ev", 1, [_row(60, 100, 0.5, 12.0)], NOW, 5.0)
    assert (behind.events_behind, behind.seconds_behind) == (40, 12.0)
    # A stalled projector (no heartbeat for 25 s): the lag is at least the heartbeat's age, even at 0 behind.
    stalled = projection_lag("ev", 1, [_row(100, 100, 25.0, 25.0)], NOW, 5.0)
    assert stalled.seconds_behind == 25.0 and stalled.heartbeat_age_s == 25.0
    # Several consumer groups: the furthest behind is reported.
    worst = projection_lag("ev", 1, [_row(100, 100, 0.1, 0.1), _row(10, 100, 0.1, 3.0)], NOW, 5.0)
    assert (worst.events_behind, worst.seconds_behind) == (90, 3.0)
