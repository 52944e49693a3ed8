"""Rules of ``distill dead-letters``: selection, time windows, lines, redrive eligibility (no Kafka)."""

from __future__ import annotations

import ast
import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from schemas.dead_letter import DeadLetter
from streams.cli.main import cli
from streams.rules.dead_letters import (
    REDRIVE_HEADER,
    Selection,
    SourceCoordinates,
    format_invalid,
    format_line,
    format_refusal,
    format_summary,
    one_line,
    original_size,
    parse_offset,
    parse_since,
    plan_redrive,
    read_stored,
    redrive_skip_reason,
    stored_size,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
EVENTS, SUMMARIES = "distill.session-events", "distill.summaries"


def letter(
    offset: int = 7,
    *,
    topic: str = EVENTS,
    partition: int = 1,
    error_class: str = "ValidationError",
    stage: str = "track",
    reason: str = "1 validation error: event_id missing",
    value: bytes = b'{"secret": "my passport is X123"}',
    key: bytes | None = b"app/u/s",
    failed_at: datetime = NOW,
    **overrides: Any,
) -> DeadLetter:
    fields: dict[str, Any] = {
        "source_topic": topic, "source_partition": partition, "source_offset": offset,
        "key_b64": base64.b64encode(key).decode() if key is not None else None,
        "value_b64": base64.b64encode(value).decode(), "error_class": error_class, "reason": reason,
        "stage": stage, "failed_at": failed_at, **overrides,
    }  # fmt: skip
    return DeadLetter(**fields)


# --- time windows and coordinates ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "back"),
    [("45s", timedelta(seconds=45)), ("30m", timedelta(minutes=30)), ("2h", timedelta(hours=2)),
     ("7d", timedelta(days=7)), ("1w", timedelta(weeks=1)), (" 3 h ", timedelta(hours=3))],
)  # fmt: skip
def test_since_durations_count_back_from_now(text: str, back: timedelta) -> None:
    assert parse_since(text, NOW) == NOW - back


def test_since_accepts_iso_times_and_takes_naive_ones_as_utc() -> None:
    assert parse_since("2026-02-01T08:30:00Z", NOW) == datetime(2026, 2, 1, 8, 30, tzinfo=UTC)
    assert parse_since("2026-02-01T10:30:00+02:00", NOW) == datetime(2026, 2, 1, 8, 30, tzinfo=UTC)
    assert parse_since("2026-02-01T08:30", NOW) == datetime(2026, 2, 1, 8, 30, tzinfo=UTC)


@pytest.mark.parametrize("text", ["", "2x", "h", "-2h", "yesterday", "2026-13-01"])
def test_since_rejects_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_since(text, NOW)


def test_offsets_parse_colon_and_slash_forms() -> None:
    expected = SourceCoordinates("t-1.session-events", 2, 40)
    assert parse_offset("t-1.session-events:2:40") == expected
    assert parse_offset("t-1.session-events/2/40") == expected
    assert str(expected) == "t-1.session-events/2/40"


@pytest.mark.parametrize("text", ["events:1", "events:a:3", ":1:2", "events:1:2:3", "events:-1:2"])
def test_offsets_reject_malformed_coordinates(text: str) -> None:
    with pytest.raises(ValueError, match="TOPIC:PARTITION:OFFSET"):
        parse_offset(text)


# --- selection ----------------------------------------------------------------------------------


def test_no_filter_selects_everything_and_limit_alone_is_no_filter() -> None:
    assert Selection().matches(letter()) and not Selection().has_filter
    assert not Selection(limit=3).has_filter
    assert Selection(stage="track").has_filter and Selection(offsets=frozenset({parse_offset("a:0:1")})).has_filter


def test_repeated_error_classes_are_alternatives() -> None:
    sel = Selection(error_classes=frozenset({"ValidationError", "OversizedRecord"}))
    assert sel.matches(letter(error_class="OversizedRecord")) and sel.matches(letter())
    assert not sel.matches(letter(error_class="RecordDecodeError"))


@pytest.mark.parametrize(
    ("selection", "hit", "miss"),
    [
        (Selection(source_topic=SUMMARIES), {"topic": SUMMARIES}, {"topic": EVENTS}),
        (Selection(stage="project"), {"stage": "project"}, {"stage": "track"}),
        (Selection(since=NOW - timedelta(hours=1)), {"failed_at": NOW - timedelta(minutes=59)},
         {"failed_at": NOW - timedelta(minutes=61)}),
        (Selection(offsets=frozenset({SourceCoordinates(EVENTS, 1, 7)})), {"offset": 7}, {"offset": 8}),
        (Selection(offsets=frozenset({SourceCoordinates(EVENTS, 1, 7)})), {"partition": 1}, {"partition": 0}),
    ],
)  # fmt: skip
def test_each_filter_selects_its_records(selection: Selection, hit: dict[str, Any], miss: dict[str, Any]) -> None:
    assert selection.matches(letter(**hit))
    assert not selection.matches(letter(**miss))


def test_filters_combine() -> None:
    sel = Selection(stage="track", error_classes=frozenset({"ValidationError"}))
    assert sel.matches(letter())
    assert not sel.matches(letter(stage="project")) and not sel.matches(letter(error_class="X"))


def test_since_compares_naive_failure_times_as_utc() -> None:
    naive = letter(failed_at=datetime(2026, 3, 1, 11, 30))
    assert Selection(since=NOW - timedelta(hours=1)).matches(naive)


def test_apply_orders_by_failure_time_and_keeps_the_oldest_n() -> None:
    newest, oldest, middle = (letter(i, failed_at=NOW - timedelta(minutes=m)) for i, m in [(1, 1), (2, 30), (3, 10)])
    assert Selection().apply([newest, oldest, middle]) == [oldest, middle, newest]
    assert Selection(limit=2).apply([newest, oldest, middle]) == [oldest, middle]
    assert Selection(limit=2, stage="track").apply([letter(stage="project"), newest]) == [newest]


# --- records of the dead-letters topic ----------------------------------------------------------


def test_a_valid_dead_letter_is_decoded() -> None:
    dl = letter()
    stored = read_stored(1, 99, dl.model_dump_json().encode())
    assert stored.letter == dl and stored.problem == "" and (stored.partition, stored.offset) == (1, 99)


@pytest.mark.parametrize(
    ("value", "problem"),
    [(b"garbage", "not a DeadLetter"), (None, "tombstone"), (b'{"source_topic": "x"}', "source_partition"),
     (json.dumps({**letter().model_dump(mode="json"), "extra": 1}).encode(), "extra")],
)  # fmt: skip
def test_an_invalid_record_is_reported_not_raised(value: bytes | None, problem: str) -> None:
    stored = read_stored(0, 5, value)
    assert stored.letter is None and problem in stored.problem
    assert format_invalid("dlq", stored).startswith("invalid record at dlq/0/5: ")


# --- display ------------------------------------------------------------------------------------


def test_one_line_flattens_and_cuts_reasons() -> None:
    assert one_line("a\n  b\tc") == "a b c"
    cut = one_line("x" * 500)
    assert len(cut) == 160 and cut.endswith("…")
    assert one_line("y" * 160) == "y" * 160


@pytest.mark.parametrize("size", range(8))
def test_stored_size_is_the_decoded_length(size: int) -> None:
    assert stored_size(letter(value=b"z" * size)) == size


def test_original_size_of_a_truncated_value_comes_from_the_reason() -> None:
    dl = letter(value=b"a" * 10, reason="record of 300000 bytes too large (value truncated to 10 of 300000 bytes)")
    assert original_size(dl) == 300000
    assert original_size(letter(value=b"abc")) == 3


def test_a_line_shows_coordinates_and_reason_but_never_the_payload() -> None:
    line = format_line(letter(reason="bad\nrecord " + "r" * 300))
    assert line.startswith("2026-03-01T12:00:00Z  distill.session-events/1/7  track  ValidationError  bad record r")
    assert "\n" not in line and "[33 B]" in line
    assert "passport" not in line and base64.b64encode(b'{"secret"').decode()[:8] not in line


def test_a_line_marks_a_truncated_value() -> None:
    line = format_line(letter(value=b"a" * 10, reason="too large (value truncated to 10 of 300000 bytes)"))
    assert line.endswith("[300000 B (truncated to 10)]")


def test_summary_counts_by_error_class_most_frequent_first() -> None:
    letters = [letter(error_class="B"), letter(error_class="A"), letter(error_class="B")]
    assert format_summary(letters) == "3 dead letters: B 2, A 1"
    assert format_summary([letter(error_class="A")], invalid=2) == "1 dead letter: A 1; 2 invalid records"
    assert format_summary([]) == "0 dead letters"


# --- redrive ------------------------------------------------------------------------------------


def test_redrive_publishes_the_original_bytes_to_the_source_topic_with_the_trace_header() -> None:
    dl = letter(value=b"\x00raw bytes\xff", key=b"app/u/s")
    plan = plan_redrive([dl], [EVENTS, SUMMARIES])
    [redrive] = plan.publish
    assert (redrive.topic, redrive.key, redrive.value) == (EVENTS, b"app/u/s", b"\x00raw bytes\xff")
    assert redrive.headers == [(REDRIVE_HEADER, f"{EVENTS}/1/7".encode())]
    assert REDRIVE_HEADER == "distill-redrive-of"


def test_a_keyless_record_is_redriven_without_a_key() -> None:
    [redrive] = plan_redrive([letter(key=None)], [EVENTS]).publish
    assert redrive.key is None


def test_a_truncated_value_cannot_be_redriven() -> None:
    dl = letter(reason="too large (value truncated to 10 of 300000 bytes)")
    assert redrive_skip_reason(dl) == "value truncated: only 10 of 300000 bytes were kept"
    plan = plan_redrive([dl], [EVENTS])
    assert plan.publish == [] and plan.skipped == [(dl, redrive_skip_reason(dl))]
    assert plan.skip_counts() == {"value truncated": 1}


def test_undecodable_base64_cannot_be_redriven() -> None:
    assert redrive_skip_reason(letter(value_b64="not base64!")) is not None
    assert redrive_skip_reason(letter(key_b64="%%%")) is not None
    assert redrive_skip_reason(letter()) is None


def test_a_tombstones_dead_letter_is_skipped_not_redriven_as_empty_bytes() -> None:
    # decode_job_record dead-letters a tombstone with value b"": published again it is refused again
    dl = letter(value=b"", error_class="RecordDecodeError", reason="empty record value (a tombstone) on the jobs topic")
    plan = plan_redrive([dl, letter(offset=8)], [EVENTS])
    assert [r.letter.source_offset for r in plan.publish] == [8]
    assert plan.skipped == [(dl, redrive_skip_reason(dl))]
    assert plan.skip_counts() == {"no value (a tombstone or an empty record)": 1}


def test_foreign_source_topics_are_refused_by_name() -> None:
    plan = plan_redrive([letter(topic="distill.summary-jobs"), letter(), letter(2, topic="other")], [EVENTS])
    assert plan.foreign == {"distill.summary-jobs": 1, "other": 1}
    message = format_refusal(plan.foreign, [EVENTS, SUMMARIES])
    assert "distill.summary-jobs (1)" in message and "other (1)" in message and EVENTS in message


def test_a_record_dead_lettered_twice_is_redriven_once_per_run() -> None:
    first, again = letter(), letter(failed_at=NOW + timedelta(seconds=5))
    plan = plan_redrive([first, again, letter(8)], [EVENTS])
    assert [r.letter for r in plan.publish] == [first, letter(8)]
    assert plan.skip_counts() == {"duplicate": 1}


# --- the module stays pure, the command refuses unselected redrives -----------------------------


def test_rules_module_imports_no_io_library() -> None:
    source = Path(__file__).resolve().parents[2] / "streams" / "rules" / "dead_letters.py"
    names = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    assert names & {"aiokafka", "kafka", "faust", "mode", "cassandra", "click", "asyncio"} == set()


def test_redrive_without_a_filter_is_refused_unless_all() -> None:
    result = CliRunner().invoke(cli, ["dead-letters", "redrive", "--yes"])
    assert result.exit_code == 2 and "--all" in result.output
    assert CliRunner().invoke(cli, ["dead-letters", "redrive", "--limit", "3"]).exit_code == 2


@pytest.mark.parametrize("args", [["--since", "soon"], ["--offset", "events:x:1"], ["--limit", "0"]])
def test_bad_selection_options_are_usage_errors(args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["dead-letters", "list", *args])
    assert result.exit_code == 2, result.output
