"""View models of ``distill ui``, without services: timeline boundaries, versions, dead letters, lag, jobs."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

from projections.boundary import Cut
from projections.catalog import ProjectorOffset, SessionOverview
from projections.read_api import StoredEvent, StoredSummary
from schemas import SessionKey
from schemas.dead_letter import DeadLetter
from schemas.summaries import LengthCut, SessionSummary, SummaryBoundary, SummaryReport, TriggerReport
from streams.app.tracked import TrackedKey
from streams.rules.trigger_state import InFlight, SessionTriggerState
from streams.ui import views
from streams.ui.sources import TRIGGER_TABLE

T0 = datetime(2026, 5, 2, 9, 0, tzinfo=UTC)


def ev(i: int, filter_key: str = "", *, at: float | None = None, text: str = "") -> StoredEvent:
    return StoredEvent(
        ts=T0 + timedelta(seconds=i if at is None else at), event_id=f"ev-{i:03d}", seq=100 + i,
        filter_key=filter_key, author="a", role="user", text=text or f"text {i}", tool_call_id=None, tool_name=None,
        has_tool_calls=False, partial=False, skip_summarization=False, token_count=3, content_size=6,
    )  # fmt: skip


def boundary(filter_key: str, upto: StoredEvent | None, *, cutoff: datetime | None = None) -> views.KeyBoundary:
    """A boundary as ``Sources.boundaries`` resolves it: exact at ``upto``, or timestamp-only at ``cutoff``."""
    if upto is not None:
        cut = Cut.of(upto.ts, (upto.ts, upto.seq))
        return views.KeyBoundary(filter_key, 1, cut, upto.event_id, upto.ts, "s")
    assert cutoff is not None
    return views.KeyBoundary(filter_key, 1, Cut.of(cutoff), None, cutoff, "s")


def rows_around_markers(timeline: views.Timeline) -> dict[str, tuple[str | None, str | None]]:
    """For each key: the event ids right before and right after its marker row."""
    out = {}
    rows = timeline.rows
    for i, row in enumerate(rows):
        if isinstance(row, views.MarkerRow):
            before = next((r.event.event_id for r in reversed(rows[:i]) if isinstance(r, views.EventRow)), None)
            after = next((r.event.event_id for r in rows[i + 1 :] if isinstance(r, views.EventRow)), None)
            for b in row.boundaries:
                out[b.filter_key] = (before, after)
    return out


def test_each_marker_sits_right_after_its_boundary_event() -> None:
    events = [ev(1), ev(2, "app/research"), ev(3, "app/research"), ev(4, "app/plan"), ev(5), ev(6)]
    timeline = views.build_timeline(
        list(reversed(events)),  # log order is restored by seq
        [boundary("", events[4]), boundary("app/research", events[2]), boundary("app/plan", events[3])],
    )
    assert rows_around_markers(timeline) == {
        "": ("ev-005", "ev-006"),
        "app/plan": ("ev-004", "ev-005"),
        "app/research": ("ev-003", "ev-004"),
    }
    assert [r.event.event_id for r in timeline.rows if isinstance(r, views.EventRow)] == [e.event_id for e in events]


def test_states_per_key_follow_the_branch_rule() -> None:
    events = [ev(1), ev(2, "app/research"), ev(3, "app/plan"), ev(4), ev(5, "app/research")]
    timeline = views.build_timeline(events, [boundary("app/research", events[1]), boundary("", events[2])])
    keys = [b.filter_key for b in timeline.keys]
    assert keys == ["", "app/research"]
    states = {r.event.event_id: dict(zip(keys, r.states, strict=True))
              for r in timeline.rows if isinstance(r, views.EventRow)}  # fmt: skip
    # The sibling branch's event is not in the research summary's input at all.
    assert states["ev-003"] == {"": "hidden", "app/research": "outside"}
    # An event without a key belongs to every branch.
    assert states["ev-004"] == {"": "visible", "app/research": "visible"}
    assert [e.event_id for e in timeline.hidden["app/research"]] == ["ev-001", "ev-002"]
    assert [e.event_id for e in timeline.visible["app/research"]] == ["ev-004", "ev-005"]
    assert [e.event_id for e in timeline.hidden[""]] == ["ev-001", "ev-002", "ev-003"]


def test_a_partial_event_is_on_the_timeline_in_no_key_s_input() -> None:
    """A streaming chunk is stored (the session counts it) but never summarized nor carried by a prompt."""
    from dataclasses import replace

    events = [ev(1), replace(ev(2), partial=True), ev(3), replace(ev(4, "app/research"), partial=True), ev(5)]
    timeline = views.build_timeline(events, [boundary("", events[2]), boundary("app/research", events[2])])
    rows = {r.event.event_id: r.states for r in timeline.rows if isinstance(r, views.EventRow)}
    assert list(rows) == ["ev-001", "ev-002", "ev-003", "ev-004", "ev-005"]
    assert rows["ev-002"] == rows["ev-004"] == ("outside", "outside")
    assert [e.event_id for e in timeline.hidden[""]] == ["ev-001", "ev-003"]
    assert [e.event_id for e in timeline.visible["app/research"]] == ["ev-005"]
    assert rows_around_markers(timeline) == {"": ("ev-003", "ev-004"), "app/research": ("ev-003", "ev-004")}
    cut = timeline.keys[0].cut
    assert [x.event_id for x in views.covered_window(events, "", cut, None)] == ["ev-001", "ev-003"]


def test_a_timestamp_only_boundary_covers_every_event_at_the_cutoff() -> None:
    same = [ev(1), ev(2, at=5), ev(3, at=5), ev(4, at=9)]
    timeline = views.build_timeline(same, [boundary("", None, cutoff=T0 + timedelta(seconds=5))])
    assert rows_around_markers(timeline) == {"": ("ev-003", "ev-004")}


def test_a_late_event_sits_where_it_was_logged_and_is_visible_after_an_exact_boundary() -> None:
    """Logged after the boundary event, stamped before it (a producer's clock behind): the next pass
    summarizes it, so it is visible; a timestamp-only boundary still covers it by its stamp."""
    events = [ev(1), ev(2), ev(3), ev(4, at=1.5), ev(5)]
    timeline = views.build_timeline(events, [boundary("", events[2])])
    assert [r.event.event_id for r in timeline.rows if isinstance(r, views.EventRow)] == [e.event_id for e in events]
    assert rows_around_markers(timeline) == {"": ("ev-003", "ev-004")}
    assert [e.event_id for e in timeline.visible[""]] == ["ev-004", "ev-005"]
    by_time = views.build_timeline(events, [boundary("", None, cutoff=events[2].ts)])
    assert [e.event_id for e in by_time.hidden[""]] == ["ev-001", "ev-002", "ev-003", "ev-004"]
    assert rows_around_markers(by_time) == {"": ("ev-004", "ev-005")}


def test_a_boundary_before_every_event_is_drawn_first_and_one_after_all_last() -> None:
    events = [ev(1), ev(2)]
    early = views.build_timeline(events, [boundary("", None, cutoff=T0)])
    assert isinstance(early.rows[0], views.MarkerRow) and early.rows[0].after_event_id is None
    late = views.build_timeline(events, [boundary("", events[1])])
    assert isinstance(late.rows[-1], views.MarkerRow) and late.rows[-1].after_event_id == "ev-002"


def _stored(version: int, text: str, upto: StoredEvent, prev: StoredEvent | None = None) -> StoredSummary:
    record = SessionSummary(
        app_name="a", user_id="u", session_id="s", summary=text, version=version,
        boundary=SummaryBoundary(cutoff_at=upto.ts, last_event_id=upto.event_id),
        previous_boundary=SummaryBoundary(cutoff_at=prev.ts, last_event_id=prev.event_id) if prev else None,
        model="m", prompt_version="p", created_at=T0, report=SummaryReport(trigger=TriggerReport(name="manual")),
        job_id=f"j{version}",
    )  # fmt: skip
    return StoredSummary("", version, text, upto.ts, upto.event_id, T0, record)


def test_versions_default_to_the_newest_diffed_against_the_one_before() -> None:
    e = [ev(i) for i in range(1, 7)]
    history = [_stored(3, "c", e[5], e[3]), _stored(1, "a", e[1]), _stored(2, "b", e[3], e[1])]
    shown, against = views.pick_versions(history, None, None)
    assert (shown and shown.version, against and against.version) == (3, 2)
    shown, against = views.pick_versions(history, 2, None)
    assert (shown and shown.version, against and against.version) == (2, 1)
    shown, against = views.pick_versions(history, 3, 1)
    assert (shown and shown.version, against and against.version) == (3, 1)
    shown, against = views.pick_versions(history, 1, None)
    assert (shown and shown.version, against) == (1, None)
    assert [r.version for r in views.version_rows(history)] == [3, 2, 1]
    diff = views.version_diff(history[0], history[2])
    assert (diff.old_version, diff.new_version, diff.inserted_chars, diff.deleted_chars) == (2, 3, 1, 1)


def test_a_summary_cut_to_max_summary_length_says_so_in_its_report_view() -> None:
    e = [ev(1), ev(2)]
    record = _stored(1, "短摘要。", e[1]).record
    assert views.report_view(record).length_cut is None
    cut = LengthCut(max_chars=600, answer_chars=1200, rewrite_chars=None, kept_chars=598)
    cut_record = record.model_copy(update={"report": record.report.model_copy(update={"length_cut": cut})})
    assert views.report_view(cut_record).length_cut == {
        "max_chars": 600, "answer_chars": 1200, "rewrite_chars": None, "kept_chars": 598}  # fmt: skip


def test_the_covered_window_is_between_the_previous_and_the_current_boundary() -> None:
    e = [ev(1), ev(2), ev(3, "b"), ev(4, "c"), ev(5)]
    cut = Cut.of(e[4].ts, (e[4].ts, e[4].seq))
    prev = Cut.of(e[1].ts, (e[1].ts, e[1].seq))
    assert [x.event_id for x in views.covered_window(e, "b", cut, prev)] == ["ev-003", "ev-005"]
    assert [x.event_id for x in views.covered_window(e, "", cut, None)] == [x.event_id for x in e]


def _letter(offset: int, error_class: str, reason: str, value: bytes = b"{}") -> DeadLetter:
    return DeadLetter(
        source_topic="events", source_partition=0, source_offset=offset, key_b64=None,
        value_b64=base64.b64encode(value).decode(), error_class=error_class, reason=reason, stage="track",
        failed_at=T0 + timedelta(seconds=offset),
    )  # fmt: skip


def test_dead_letters_filter_by_reason_and_class_newest_first() -> None:
    letters = [
        _letter(1, "RecordDecodeError", "not valid JSON at byte 3"),
        _letter(2, "ValidationError", "message.role: Input should be 'user'"),
        _letter(3, "RecordDecodeError", "record too large: value truncated to 10 of 900 bytes"),
    ]
    assert [x.source_offset for x in views.filter_letters(letters, reason="JSON")] == [1]
    assert [x.source_offset for x in views.filter_letters(letters, reason="ROLE")] == [2]
    assert [x.source_offset for x in views.filter_letters(letters, error_class="RecordDecodeError")] == [1, 3]
    rows = views.letter_rows(letters)
    assert [r.coordinates for r in rows] == ["events/0/3", "events/0/2", "events/0/1"]
    assert rows[0].truncated_to == 10 and rows[0].size == 900 and rows[0].redrive_blocked
    assert rows[1].redrive_blocked is None
    assert views.class_counts(letters) == [("RecordDecodeError", 2), ("ValidationError", 1)]


def test_lag_per_group_and_partition_from_kafka_and_from_the_projector() -> None:
    ends = {("events", 0): 10, ("events", 1): 4, ("jobs", 0): 7}
    committed = {"distill": {("events", 0): 8, ("events", 1): None, ("jobs", 0): 7, ("gone", 0): 1}}
    projector = [ProjectorOffset("distill-projector", "events", 0, 3, None)]
    rows = views.lag_rows(committed, ends, projector)
    assert [(r.group, r.topic, r.partition, r.lag, r.source) for r in rows] == [
        ("distill", "events", 0, 2, "kafka"),
        ("distill", "events", 1, None, "kafka"),
        ("distill", "jobs", 0, 0, "kafka"),
        ("distill-projector", "events", 0, 7, "cassandra"),
    ]


def test_a_partition_a_group_never_committed_is_listed_with_an_unknown_lag() -> None:
    """A worker stuck on the first record of a partition has committed nothing there: that partition is lag too."""
    ends = {("jobs", 0): 2, ("jobs", 1): 6, ("events", 0): 5, ("summaries", 0): 0}
    committed = {"distill": {("jobs", 1): 6, ("events", 0): 5}}
    rows = views.lag_rows(committed, ends)
    assert [(r.topic, r.partition, r.committed, r.end, r.lag) for r in rows] == [
        ("events", 0, 5, 5, 0),
        ("jobs", 0, None, 2, None),
        ("jobs", 1, 6, 6, 0),
    ]
    assert [r.behind for r in rows] == [False, True, False]


def test_jobs_in_flight_come_from_the_latest_changelog_value_of_each_key() -> None:
    """The changelog holds the worker's table values (``TrackedKey`` bytes), the last one per key counts."""
    emitted = T0 + timedelta(seconds=30)
    flight = InFlight("job-1", "ev-9", int(emitted.timestamp() * 1e6))
    busy = TrackedKey(SessionTriggerState("a", "u", "s1", "k", in_flight=flight), 0, 1, emitted.timestamp())
    idle = TrackedKey(SessionTriggerState("a", "u", "s3"), 0, 1)
    records = [(b"s1", idle.to_bytes()), (b"s1", busy.to_bytes()), (b"s2", busy.to_bytes()), (b"s2", None),
               (b"s3", idle.to_bytes()), (b"s4", b"not a state")]  # fmt: skip
    latest = views.latest_per_key(records)
    assert set(latest) == {b"s1", b"s3", b"s4"}
    tracked, bad = views.decode_tracked(latest.values())
    assert bad == 1 and sorted(t.state.session_id for t in tracked) == ["s1", "s3"]
    rows = views.job_rows(tracked, T0 + timedelta(seconds=90))
    assert [(r.session_id, r.filter_key, r.job_id, r.upto_event_id, r.age_s) for r in rows] == [
        ("s1", "k", "job-1", "ev-9", 60.0)
    ]


def test_a_job_s_age_is_wall_clock_time_when_the_worker_recorded_its_emission() -> None:
    """Event times may be anything (a replay, a producer's clock): only the worker's emission time gives an age."""
    flight = InFlight("job-1", "ev-9", int(T0.timestamp() * 1e6))
    wall = (T0 + timedelta(days=30)).timestamp()
    tracked = TrackedKey(SessionTriggerState("a", "u", "s1", in_flight=flight), 0, 1, emitted_wall=wall)
    (row,) = views.job_rows([tracked], T0 + timedelta(days=30, seconds=12))
    assert row.emitted_at == T0 and row.age_s == 12.0
    (unknown,) = views.job_rows([TrackedKey(tracked.state, 0, 1)], T0 + timedelta(days=30, seconds=12))
    assert unknown.age_s is None


def test_the_changelog_name_matches_the_worker_table() -> None:
    from streams.app.factory import TABLE_NAME

    assert TRIGGER_TABLE == TABLE_NAME


def test_sessions_are_searchable_and_grouped_by_app_and_user() -> None:
    def o(app: str, user: str, sid: str, last: int) -> SessionOverview:
        return SessionOverview(SessionKey(app, user, sid), 1, 1, 1, T0, T0 + timedelta(seconds=last), (("", 1),))

    rows = [
        o("travel", "ana", "s1", 1),
        o("travel", "ana", "s2", 5),
        o("travel", "bo", "s3", 2),
        o("chat", "zoe", "s4", 9),
    ]
    assert [r.key.session_id for r in rows if views.key_matches(r.key, "TRAVEL ana")] == ["s1", "s2"]
    assert [r.key.session_id for r in rows if views.key_matches(r.key, "")] == ["s1", "s2", "s3", "s4"]
    groups = views.group_sessions(rows)
    assert [(g.app_name, [(u.user_id, [s.key.session_id for s in u.sessions]) for u in g.users]) for g in groups] == [
        ("chat", [("zoe", ["s4"])]),
        ("travel", [("ana", ["s2", "s1"]), ("bo", ["s3"])]),
    ]


def test_recall_view_shows_results_messages_or_the_agents_error() -> None:
    search = views.recall_view("session_search", {"note": "n", "results": [{"event_id": "ev-1"}]})
    assert (search.error, search.results) == (None, [{"event_id": "ev-1"}])
    load = views.recall_view("session_load", {"messages": [{"event_id": "ev-2", "anchor": True}]})
    assert load.results == [{"event_id": "ev-2", "anchor": True}]
    assert (
        views.recall_view("session_load", {"error": "anchor event not found: x"}).error == "anchor event not found: x"
    )
