"""Summary epochs on the track side: the switch record moves every key of the session to the adopted line.

After an ``EpochAdopted`` at summaries offset A, a key's state takes the
adopted head's version (so that line's next summaries apply, whatever the
versions of the line left), records before A delivered again change nothing,
and the jobs the adopted head covers are answered. The replay worker never
switches: it is building an epoch.
"""

from __future__ import annotations

from schemas import AdoptedHead, AdoptEpoch, EpochAdopted, SessionSummary
from streams.app.coordinates import Coordinates
from streams.app.tracked import TrackedKey, table_key
from streams.rules.state_rows import state_from_row, state_to_row
from tests.unit.app.test_track_handler import T0, event, feed, handler
from tests.unit.rules.test_state_rows import _json_round_trip

KEY = table_key("a", "u", "s", "")


def summary(version: int, last: int, *, epoch: int = 0, job_id: str = "j") -> SessionSummary:
    return SessionSummary.model_validate({
        "app_name": "a", "user_id": "u", "session_id": "s", "summary": f"摘要 e{epoch} v{version}",
        "version": version, "epoch": epoch, "boundary": {"cutoff_at": event(last).timestamp.isoformat(),
                                                          "last_event_id": f"e{last}"},
        "model": "m", "prompt_version": "p", "created_at": T0.isoformat(),
        "report": {"trigger": {"name": "event_threshold"}}, "job_id": job_id,
    })  # fmt: skip


def switch(epoch: int, *heads: SessionSummary, previous: int = 0, cid: str = "c") -> EpochAdopted:
    return EpochAdopted(
        app_name="a", user_id="u", session_id="s", epoch=epoch, previous_epoch=previous,
        heads=tuple(AdoptedHead(summary=h) for h in heads), command_id=cid, created_at=T0,
    )  # fmt: skip


def test_the_live_worker_forwards_an_adopt_command_and_a_replay_ignores_it() -> None:
    command = AdoptEpoch(app_name="a", user_id="u", session_id="s", command_id="c", epoch=2)
    assert handler().on_record(command, Coordinates("ev", 0, 3), {}).adoptions == [command]
    replay = handler(job_origin="replay").on_record(command, Coordinates("ev", 0, 3), {})
    assert replay.adoptions == [] and replay.jobs == []


def test_after_a_switch_the_adopted_lines_summaries_apply_and_the_left_lines_delivered_again_do_not() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler()
    [job] = feed(h, table, [event(1, "user"), event(2), event(3)])
    h.on_summary_record(summary(3, 3, job_id=job.job_id), table, 10)  # the live line at v3
    feed(h, table, [event(4, "user"), event(5)], start=3)
    h.on_summary_record(switch(1, summary(1, 3, epoch=1)), table, 11)  # the epoch has fewer versions
    state = table[KEY].state
    assert (state.version, state.adopted_at, state.boundary_event_id) == (1, 11, "e3")
    h.on_summary_record(summary(4, 5, epoch=0), table, 9)  # the left line, delivered again
    h.on_summary_record(switch(1, summary(1, 3, epoch=1)), table, 11)  # the switch, delivered again
    assert table[KEY].state.version == 1 and [p.event_id for p in table[KEY].state.pending] == ["e4", "e5"]
    h.on_summary_record(summary(2, 5, epoch=1), table, 12)
    state = table[KEY].state
    assert state.version == 2 and state.boundary_event_id == "e5" and not state.pending
    # the changelog keeps the switch
    assert state_from_row(_json_round_trip(state_to_row(state))) == state


def test_a_head_past_the_applied_boundary_answers_the_jobs_it_covers() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler()
    [job] = feed(h, table, [event(1, "user"), event(2), event(3)])
    assert table[KEY].state.in_flight is not None
    h.on_summary_record(switch(1, summary(1, 3, epoch=1, job_id=job.job_id)), table, 4)
    state = table[KEY].state
    assert state.in_flight is None and state.version == 1 and not state.pending


def test_a_key_the_epoch_has_no_summary_for_starts_over_at_version_zero() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler()
    [job] = feed(h, table, [event(1, "user"), event(2), event(3)])
    h.on_summary_record(summary(1, 3, job_id=job.job_id), table, 0)
    h.on_summary_record(switch(1), table, 1)
    assert table[KEY].state.version == 0
    h.on_summary_record(summary(1, 3, epoch=1), table, 2)  # the epoch's first summary of the key applies
    assert table[KEY].state.version == 1


def test_a_switch_moves_branch_keys_too() -> None:
    table: dict[str, TrackedKey] = {}
    h = handler()
    feed(h, table, [event(1, "user", filter_key="a/b"), event(2, filter_key="a/b"), event(3, filter_key="a/b")])
    branch = table_key("a", "u", "s", "a/b")
    assert branch in table
    head = summary(2, 3, epoch=1).model_copy(update={"filter_key": "a/b"})
    h.on_summary_record(switch(1, head, summary(1, 3, epoch=1)), table, 5)
    assert table[branch].state.version == 2 and table[branch].state.adopted_at == 5
    assert table[KEY].state.version == 1
