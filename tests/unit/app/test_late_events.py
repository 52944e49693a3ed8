"""An event stamped before the previous boundary but logged after it is summarized, once.

The oracle: a marker in every event and a model that answers with every marker it was sent
(the previous summary's and the delta's), so the last summary must hold every event up to its
boundary, and a marker sent twice in one request (the previous summary already had it) is a
second summarization. Timestamps out of log order come from producers with skewed clocks, or a
sub-agent flushing its events late.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from schemas import SessionEvent, SummaryBoundary
from schemas.settings import Settings
from streams.app.cache import SummaryCache
from streams.app.inprocess import InProcessReplay, ReplayStats, records_of
from streams.rules.boundaries import delta_in_log_order, early_ids
from streams.rules.policy import policies_from_settings
from streams.summarizer import build_summarizer
from streams.summarizer.model import ContextLengthError
from tests.unit.summarizer.helpers import EchoModel, markers

T0 = datetime(2026, 3, 1, tzinfo=UTC)
MARKER = re.compile(r"\bM(\d+)\b")
FAULTS = {
    "none": (),
    # An empty answer is asked again; a context-length refusal retried at half the budget.
    "faults": ("", ContextLengthError("maximum context length exceeded (scripted)"), ""),
}


def event(n: int, seconds: float, event_id: str | None = None) -> SessionEvent:
    role = "user" if n % 2 == 0 else "assistant"
    return SessionEvent(
        app_name="app", user_id="u", session_id="s", event_id=event_id or f"e{n}",
        timestamp=T0 + timedelta(seconds=seconds), request_id=f"r{n // 2}",
        author="user" if role == "user" else "agent",
        message={"role": role, "content": f"{'请查一下订单' if role == 'user' else '好的，已经查到'} M{n}"},
    )  # fmt: skip


async def run(
    events: list[SessionEvent], faults: tuple[str | BaseException, ...] = (), **summary: object
) -> tuple[ReplayStats, EchoModel]:
    settings = Settings.model_validate({"summary": summary})
    model = EchoModel(*faults, context_window=128_000)
    summarizer = build_summarizer(settings, model=model)  # type: ignore[arg-type]
    engine = InProcessReplay(
        policies_from_settings(settings.summary, settings.llm.model), lambda app: summarizer, SummaryCache()
    )
    return await engine.run(records_of(events)), model


def assert_every_marker_once(stats: ReplayStats, model: EchoModel, events: list[SessionEvent]) -> None:
    assert not model.replies, "every scripted fault was met"
    (boundaries,) = stats.boundaries.values()
    (texts,) = stats.texts.values()
    ids = [e.event_id for e in events]
    covered = events[: ids.index(boundaries[-1]) + 1]
    want = {n for e in covered for n in MARKER.findall(str(e.message.content))}
    assert want <= set(MARKER.findall(texts[-1])), (sorted(want - set(MARKER.findall(texts[-1]))), boundaries)
    sent = [markers("\n".join(str(m.get("content") or "") for m in r.messages)) for r in model.requests]
    twice = sorted({m for found in sent for m in found if found.count(m) > 1})
    assert not twice, f"summarized twice: {twice}"  # in the previous summary and in the delta of one request


@pytest.mark.parametrize("faults", FAULTS.values(), ids=FAULTS.keys())
async def test_an_event_stamped_before_the_boundary_but_logged_after_it_is_summarized(
    faults: tuple[str | BaseException, ...],
) -> None:
    # e4 comes after e3 in the log, stamped half a second before it (the boundary after pass 1 is e3).
    seconds = [0, 1, 2, 3, 2.5, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    events = [event(n, s) for n, s in enumerate(seconds)]
    stats, model = await run(events, faults, event_threshold=2)
    assert len(next(iter(stats.boundaries.values()))) >= 2
    assert_every_marker_once(stats, model, events)


@pytest.mark.parametrize("faults", FAULTS.values(), ids=FAULTS.keys())
async def test_a_late_event_among_held_back_rounds_is_summarized(faults: tuple[str | BaseException, ...]) -> None:
    # keep_recent_rounds holds the last two rounds back; e7 is stamped an hour before everything.
    events = [event(n, -3600 if n == 7 else n) for n in range(24)]
    stats, model = await run(events, faults, event_threshold=4, keep_recent_rounds=2)
    assert len(next(iter(stats.boundaries.values()))) >= 2
    assert_every_marker_once(stats, model, events)


async def test_an_event_published_again_after_the_boundary_is_not_summarized_twice() -> None:
    # e2 is sent again (an application's retry of its publish) once e0..e5 are summarized.
    first = [event(n, n) for n in range(6)]
    rest = [event(n, n) for n in range(6, 12)]
    events = [*first, event(2, 2), *rest]
    stats, model = await run(events, event_threshold=2)
    assert_every_marker_once(stats, model, events)


def test_the_rules_keep_late_events_and_drop_the_boundary_and_what_the_log_had_before() -> None:
    boundary = SummaryBoundary(last_event_id="e3", cutoff_at=T0 + timedelta(seconds=3))
    read = [event(3, 3), event(4, 2.5), event(2, 2), event(5, 3), event(6, 6)]
    # e5, at the cutoff instant, is kept without asking the log: were it a duplicate, it is summarized twice
    # (the README says so; asking would read the whole log for a batch stamped with one instant).
    assert early_ids(read, boundary) == {"e4", "e2"}
    kept = delta_in_log_order(read, boundary, summarized={"e2", "e5"})
    assert [e.event_id for e in kept] == ["e4", "e5", "e6"]


def test_early_ids_compare_instants_whatever_the_zones_of_the_cutoff_and_the_stamps() -> None:
    # Validated stamps are UTC (compared as datetimes); a cutoff in another zone, a naive stamp
    # (taken as UTC) or a cutoff past year 9999 in UTC compare by their instants all the same.
    east = timezone(timedelta(hours=8))
    boundary = SummaryBoundary(last_event_id="e9", cutoff_at=(T0 + timedelta(seconds=3)).astimezone(east))
    read = [event(1, 2.999999), event(2, 3), event(3, 4)]
    naive = read[0].model_copy(update={"event_id": "n1", "timestamp": read[0].timestamp.replace(tzinfo=None)})
    assert early_ids([*read, naive], boundary) == {"e1", "n1"}
    far = SummaryBoundary.model_construct(
        last_event_id=None, cutoff_at=datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))), version=1
    )
    assert early_ids(read, far) == {"e1", "e2", "e3"}
    assert early_ids([*read, naive], far) == {"e1", "e2", "e3", "n1"}  # a naive stamp beside that cutoff too
