"""The two guards of replay epochs, without services.

* Numbering: concurrent replays claim their epoch through an atomic
  create-if-absent (Kafka creates a topic once); every claimer ends on a
  distinct number, the losers on the next free ones.
* Resume: the sessions that adopted the run's epoch (an ``EpochAdopted`` on the
  summaries topic) are not replayed again, neither their events nor the jobs
  the run left for them (the live worker continues their line of the epoch).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from schemas import AdoptedHead, EpochAdopted, SessionKey
from streams.app.factory import replay_accept
from streams.cli.epochs_admin import (
    RawRecord,
    claim_first_free,
    claim_topic,
    epoch_numbers,
    read_excluded,
    sessions_adopting,
    write_excluded,
)
from streams.cli.replay_cmd import adopted_note
from tests.unit.app.test_epochs import COORDS, NOW, runtime, summary
from tests.unit.app.test_summarize_handler import job
from tests.unit.summarizer.helpers import SESSION, ScriptedModel

SUMMARIES = "distill.summaries"


class AtomicRegister:
    """Create-if-absent, as the broker's controller does it: one creator per name, whatever the interleaving."""

    def __init__(self, taken: set[int]) -> None:
        self.taken = set(taken)

    async def create(self, epoch: int) -> bool:
        await asyncio.sleep(0)  # let the other claimers run between the listing and the create
        if epoch in self.taken:
            return False
        self.taken.add(epoch)
        return True


def test_taken_epochs_are_those_claimed_and_those_runs_built_before_claims() -> None:
    names = [
        SUMMARIES, f"{SUMMARIES}.replay-e1-20260101000000-ab12", f"{SUMMARIES}.replay-e2-20260101000001-cd34",
        claim_topic(SUMMARIES, 4), f"{SUMMARIES}.epoch-claim-ex", f"{SUMMARIES}.replay-before-epochs",
        "distill.jobs.replay-e9-20260101000000-ab12", "other.summaries.epoch-claim-e7",
    ]  # fmt: skip
    assert epoch_numbers(names, SUMMARIES) == {1, 2, 4}


async def test_replays_claiming_at_the_same_moment_get_distinct_epochs_the_losers_the_next_ones() -> None:
    listed = epoch_numbers([f"{SUMMARIES}.replay-e1-20260101000000-ab12", claim_topic(SUMMARIES, 2)], SUMMARIES)
    register = AtomicRegister(listed)
    # Every claimer listed the topics before any claimed: all start from epoch 3.
    got = await asyncio.gather(*(claim_first_free(listed, register.create) for _ in range(5)))
    assert sorted(got) == [3, 4, 5, 6, 7]


async def test_an_epoch_claimed_meanwhile_is_skipped() -> None:
    register = AtomicRegister({1, 2, 3})  # 2 and 3 were claimed after this run listed {1}
    assert await claim_first_free({1}, register.create) == 4


def adoption(key: SessionKey, epoch: int, previous: int = 0) -> EpochAdopted:
    head = summary(1, 3, "新的摘要", epoch=epoch).model_copy(
        update={"app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id}
    )
    return EpochAdopted(
        app_name=key.app_name, user_id=key.user_id, session_id=key.session_id, epoch=epoch, previous_epoch=previous,
        heads=(AdoptedHead(summary=head, events_offset=3),) if epoch else (), command_id="c", created_at=NOW,
    )  # fmt: skip


def raw(record: Any) -> RawRecord:
    return (0, b"k", record.model_dump_json().encode(), [])


def test_the_sessions_that_adopted_an_epoch_are_found_on_the_summaries_topic_also_after_leaving_it() -> None:
    a, b = (SessionKey("应用", "u", f"会话-{i}") for i in "ab")
    records = [
        raw(adoption(a, 3)),
        raw(adoption(b, 2)),
        raw(summary(2, 5, "epoch 3 summary, no switch", epoch=3)),
        raw(adoption(a, 0, previous=3)),  # a left epoch 3 since: the live worker continued it meanwhile
        (0, b"k", None, None),
        (0, b"k", b"not json", None),
    ]
    assert sessions_adopting(records, 3) == {a}
    assert sessions_adopting(records, 2) == {b}
    assert sessions_adopting(records, 4) == set()


def test_a_resumed_replay_refuses_the_excluded_sessions_even_when_selected(tmp_path: Any) -> None:
    a, b = SessionKey("app", "u", "会话-a"), SessionKey("app", "u", "会话-b")
    assert replay_accept(frozenset()) is None
    everything = replay_accept(frozenset(), frozenset({a}))
    assert everything is not None and not everything(a) and everything(b) and everything(SessionKey("x", "y", "z"))
    selected = replay_accept({"app/*/*"}, {a})
    assert selected is not None and not selected(a) and selected(b) and not selected(SessionKey("x", "y", "z"))
    path = tmp_path / "excluded.json"
    write_excluded(path, {a, b})
    assert read_excluded(path) == {a, b} and json.loads(path.read_text())[0] == ["app", "u", "会话-a"]


def test_the_resume_names_the_sessions_it_refuses() -> None:
    keys = {SessionKey("app", "u", f"会话-{i:02}") for i in range(25)}
    note = adopted_note(3, keys)
    assert "25 sessions already adopted epoch 3" in note and "app/u/会话-00" in note and "and 5 more" in note
    assert "app/u/会话-24" not in note


async def test_a_job_the_run_left_for_an_excluded_session_is_not_run() -> None:
    model = ScriptedModel("should not be written", context_window=100_000)
    rt, sent = runtime(model)
    rt.track.accept = replay_accept(frozenset(), frozenset({SESSION}))
    await rt.run_job(job(3), COORDS, b"k", None)
    assert model.requests == [] and sent.records == []
    rt.track.accept = replay_accept(frozenset(), frozenset({SessionKey("app", "u", "other")}))
    await rt.run_job(job(3), COORDS, b"k", None)
    assert [s["summary"] for s in sent.of("summary")] == ["should not be written"]
