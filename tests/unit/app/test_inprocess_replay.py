"""The in-process replay (``distill replay --dry-run``, the replay benchmark) and the replay CLI's pure parts."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from schemas import SessionEvent, SessionKey
from schemas.settings import Settings
from streams.app.cache import SummaryCache
from streams.app.factory import session_filter
from streams.app.inprocess import InProcessReplay, ReplayStats, records_of
from streams.cli.replay_cmd import behind, progress_line
from streams.rules.policy import policies_from_settings
from streams.summarizer import build_summarizer
from tests.unit.summarizer.helpers import EchoModel

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MARKER = re.compile(r"\bM\d+\b")


def events(sessions: int = 3, rounds: int = 8) -> list[SessionEvent]:
    out = []
    for r in range(rounds):
        for s in range(sessions):
            for role in ("user", "assistant"):
                n = len(out)
                out.append(
                    SessionEvent(
                        app_name="app" if s else "other", user_id="u", session_id=f"s{s}", event_id=f"e{n}",
                        timestamp=T0 + timedelta(seconds=n), request_id=f"r{s}-{r}",
                        author="user" if role == "user" else "agent",
                        message={"role": role, "content": f"{'问题' if role == 'user' else '回答'} M{n}"},
                    )
                )  # fmt: skip
    return out


async def replay(settings: Settings, cache: SummaryCache, *, dry: bool = False) -> tuple[ReplayStats, EchoModel]:
    model = EchoModel(context_window=128_000)
    summarizer = build_summarizer(settings, model=model)  # type: ignore[arg-type]
    policies = policies_from_settings(settings.summary, settings.llm.model)
    engine = InProcessReplay(policies, lambda app: summarizer, cache, dry_run=dry)
    return await engine.run(records_of(events(), partitions=2)), model


async def test_a_replay_with_nothing_changed_makes_no_llm_call_and_the_same_boundaries() -> None:
    settings = Settings.model_validate({"summary": {"event_threshold": 3}})
    cache = SummaryCache()
    live, live_model = await replay(settings, cache)
    assert live.jobs >= 6 and len(live_model.requests) == live.llm_calls == live.jobs
    dry, dry_model = await replay(settings, cache, dry=True)
    assert (dry.keys, dry.jobs, dry.cache_hits, dry.llm_calls, len(dry_model.requests)) == (
        live.keys,
        live.jobs,
        live.jobs,
        0,
        0,
    )
    again, model = await replay(settings, cache)
    assert not model.requests and again.cache_hits == live.jobs
    assert again.boundaries == live.boundaries and again.texts == live.texts


async def test_a_dry_run_after_a_prompt_change_counts_every_boundary_as_an_llm_call() -> None:
    cache = SummaryCache()
    live, _ = await replay(Settings.model_validate({"summary": {"event_threshold": 3}}), cache)
    changed = Settings.model_validate({"summary": {"event_threshold": 3, "prompt": "要点：{conversation_text}"}})
    dry, model = await replay(changed, cache, dry=True)
    assert not model.requests and dry.jobs == live.jobs and dry.llm_calls == live.jobs and dry.cache_hits == 0


def test_replay_selects_an_app_with_app_star_star() -> None:
    accept = session_filter({"app/*/*", "x/y/z"})
    assert accept(SessionKey("app", "anyone", "s1")) and accept(SessionKey("x", "y", "z"))
    assert not accept(SessionKey("other", "u", "s0"))


def test_the_progress_line_shows_rate_lag_and_eta() -> None:
    line = progress_line(1_000, 5_000, 2.0, 7)
    assert "1,000/5,000 events" in line and "500/s" in line and "lag 4,000" in line and "ETA 8s" in line
    assert "ETA 0s" in progress_line(5_000, 5_000, 2.0, 7) and "ETA ?" in progress_line(0, 10, 1.0, 0)


def test_a_stalled_replay_names_the_partitions_its_group_has_not_committed_to_their_end() -> None:
    from aiokafka import TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    events, jobs, empty = TopicPartition("ev", 0), TopicPartition("jobs", 1), TopicPartition("ev", 1)
    ends = {events: 40, jobs: 7, empty: 0, TopicPartition("sum", 0): 3}
    committed = {events: OffsetAndMetadata(40, ""), jobs: OffsetAndMetadata(5, "")}
    # a partition never committed counts from where the run began (--from-latest), else from 0
    assert behind(ends, committed, {}) == "jobs[1] 5/7, sum[0] 0/3"
    assert behind(ends, committed, {TopicPartition("sum", 0): 3}) == "jobs[1] 5/7"
