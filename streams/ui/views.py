"""View models of the ``distill ui`` pages (pure: plain values in, plain values out; no I/O).

The boundary rules are the read side's own (``projections.boundary.Cut`` for
"hidden or after", ``projections.filter_keys.in_summary_input`` for which
events a key's summary covers), so the page shows what the read API and the
next prompt do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from projections.boundary import Cut
from projections.catalog import ProjectorOffset, SessionOverview
from projections.filter_keys import in_summary_input
from projections.read_api import StoredEvent, StoredSummary
from schemas import SessionKey
from schemas.dead_letter import DeadLetter
from schemas.summaries import SessionSummary
from streams.app.tracked import TrackedKey
from streams.rules.boundaries import from_micros
from streams.rules.dead_letters import format_line, one_line, original_size, redrive_skip_reason, source_of, truncation
from streams.ui.textdiff import DiffPart, diff_counts, word_diff

State = Literal["hidden", "visible", "outside"]
"""An event for one summary key: covered by the summary, carried by the next prompt, or not in the key's input
(another branch's event, or a partial one: stored, never summarized nor carried)."""

MAX_LISTED_SESSIONS = 200


# -- sessions ------------------------------------------------------------------------------------------------


def key_matches(key: SessionKey, query: str) -> bool:
    """Every whitespace-separated word of ``query`` occurs (case-insensitively) in the app, user or session id."""
    hay = f"{key.app_name}\n{key.user_id}\n{key.session_id}".casefold()
    return all(word in hay for word in query.casefold().split())


@dataclass(frozen=True)
class UserGroup:
    user_id: str
    sessions: list[SessionOverview]


@dataclass(frozen=True)
class AppGroup:
    app_name: str
    users: list[UserGroup]

    @property
    def session_count(self) -> int:
        return sum(len(u.sessions) for u in self.users)


def group_sessions(overviews: Iterable[SessionOverview]) -> list[AppGroup]:
    """Sessions by app, then user; apps and users by name, sessions newest activity first."""
    by_app: dict[str, dict[str, list[SessionOverview]]] = {}
    for o in overviews:
        by_app.setdefault(o.key.app_name, {}).setdefault(o.key.user_id, []).append(o)
    return [
        AppGroup(app, [UserGroup(user, sorted(rows, key=_newest_first)) for user, rows in sorted(users.items())])
        for app, users in sorted(by_app.items())
    ]


def _newest_first(o: SessionOverview) -> tuple[float, str]:
    return (-(o.last_event_at.timestamp() if o.last_event_at else 0.0), o.key.session_id)


# -- the session timeline ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyBoundary:
    """The latest summary of one filter key with its boundary resolved to stored positions."""

    filter_key: str
    version: int
    cut: Cut
    last_event_id: str | None
    cutoff_at: datetime
    summary: str

    @property
    def label(self) -> str:
        return self.filter_key or "full session"


@dataclass(frozen=True)
class EventRow:
    """One event of the timeline and its state for each summary key (in ``Timeline.keys`` order)."""

    position: int
    event: StoredEvent
    states: tuple[State, ...]

    @property
    def preview(self) -> str:
        return one_line(self.event.text, 140) if self.event.text.strip() else ""


@dataclass(frozen=True)
class MarkerRow:
    """Where one or more boundaries fall: after the event at ``after_position`` (``-1``: before the first)."""

    after_position: int
    after_event_id: str | None
    boundaries: tuple[KeyBoundary, ...]


@dataclass
class Timeline:
    keys: list[KeyBoundary]
    rows: list[EventRow | MarkerRow]
    hidden: dict[str, list[StoredEvent]] = field(default_factory=dict)
    """Per summary key: the events of its input the summary covers (the history it hides)."""
    visible: dict[str, list[StoredEvent]] = field(default_factory=dict)
    """Per summary key: the events of its input after the boundary."""

    @property
    def events(self) -> int:
        return sum(1 for r in self.rows if isinstance(r, EventRow))


def build_timeline(events: Sequence[StoredEvent], boundaries: Sequence[KeyBoundary]) -> Timeline:
    """The events in log order with each summary's boundary drawn after the last event it covers.

    Events are ordered by ``seq`` (the session's log order, which ``Cut``
    follows for a boundary whose event is stored), so the covered events of
    such a boundary are a prefix of the timeline and its marker sits right
    after the boundary event. A timestamp-only boundary covers by time: its
    marker sits after the last event it covers, and with producers' clocks
    apart an event it does not cover may come before that. Each event's state
    per key: ``outside`` when the key's summary does not take it (another
    branch, or a partial event: stored, never summarized nor carried), else
    ``hidden`` or ``visible``.
    """
    ordered = sorted(events, key=lambda e: (e.seq, e.ts, e.event_id))
    keys = sorted(boundaries, key=lambda b: b.filter_key)
    hidden = {b.filter_key: [b.cut.is_hidden(e.ts, e.seq) for e in ordered] for b in keys}
    last = {k: max((i for i, h in enumerate(flags) if h), default=-1) for k, flags in hidden.items()}
    timeline = Timeline(keys, [], {b.filter_key: [] for b in keys}, {b.filter_key: [] for b in keys})

    def markers_after(position: int) -> None:
        here = tuple(b for b in keys if last[b.filter_key] == position)
        if here:
            event_id = ordered[position].event_id if position >= 0 else None
            timeline.rows.append(MarkerRow(position, event_id, here))

    markers_after(-1)
    for i, ev in enumerate(ordered):
        states: list[State] = []
        for b in keys:
            if ev.partial or not in_summary_input(ev.filter_key, b.filter_key):
                states.append("outside")
            elif hidden[b.filter_key][i]:
                states.append("hidden")
                timeline.hidden[b.filter_key].append(ev)
            else:
                states.append("visible")
                timeline.visible[b.filter_key].append(ev)
        timeline.rows.append(EventRow(i, ev, tuple(states)))
        markers_after(i)
    return timeline


# -- a summary's versions --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VersionRow:
    version: int
    created_at: datetime | None
    cutoff_at: datetime
    last_event_id: str | None
    chars: int
    model: str
    trigger: str


@dataclass(frozen=True)
class VersionDiff:
    old_version: int | None
    new_version: int
    parts: list[DiffPart]
    inserted_chars: int
    deleted_chars: int


@dataclass(frozen=True)
class ReportView:
    """The report and stats of one summary version, flattened for display."""

    trigger: dict[str, Any]
    calls: list[dict[str, Any]]
    passes: int
    truncated_previous_summary: bool
    partial_prefix: bool
    stats: dict[str, Any]
    model: str
    prompt_version: str
    job_id: str
    previous_boundary: str
    boundary: str
    length_cut: dict[str, Any] | None = None
    """The summary cut to ``max_summary_length`` (its numbers), ``None`` when it was not."""


def version_rows(history: Iterable[StoredSummary]) -> list[VersionRow]:
    """Every stored version, newest first."""
    return [
        VersionRow(h.version, h.created_at, h.cutoff_at, h.last_event_id, len(h.summary), h.record.model,
                   h.record.report.trigger.name)
        for h in sorted(history, key=lambda h: -h.version)
    ]  # fmt: skip


def pick_versions(
    history: Sequence[StoredSummary], version: int | None, against: int | None
) -> tuple[StoredSummary | None, StoredSummary | None]:
    """The version to show (default: the newest) and the one to diff it against (default: the one before it)."""
    by_version = {h.version: h for h in history}
    if not by_version:
        return None, None
    shown = by_version.get(version) if version is not None else None
    if shown is None:
        shown = by_version[max(by_version)]
    if against is not None:
        return shown, by_version.get(against)
    older = [v for v in by_version if v < shown.version]
    return shown, by_version[max(older)] if older else None


def version_diff(new: StoredSummary, old: StoredSummary | None) -> VersionDiff:
    """The word-level diff (per character in CJK text) from ``old`` (or nothing) to ``new``."""
    parts = word_diff(old.summary if old else "", new.summary)
    inserted, deleted = diff_counts(parts)
    return VersionDiff(old.version if old else None, new.version, parts, inserted, deleted)


def report_view(record: SessionSummary) -> ReportView:
    def boundary(b: Any) -> str:
        if b is None:
            return "start of the session"
        return f"{b.cutoff_at.isoformat()} · {b.last_event_id or 'no event id (timestamp only)'}"

    report = record.report
    return ReportView(
        trigger=report.trigger.model_dump(mode="json"),
        calls=[c.model_dump(mode="json") for c in report.calls],
        passes=report.passes,
        truncated_previous_summary=report.truncated_previous_summary,
        partial_prefix=report.partial_prefix,
        stats=record.stats.model_dump(mode="json"),
        length_cut=report.length_cut.model_dump(mode="json") if report.length_cut is not None else None,
        model=record.model,
        prompt_version=record.prompt_version,
        job_id=record.job_id,
        previous_boundary=boundary(record.previous_boundary),
        boundary=boundary(record.boundary),
    )


def covered_window(events: Sequence[StoredEvent], filter_key: str, cut: Cut, previous: Cut | None) -> list[StoredEvent]:
    """The events of ``filter_key``'s input in the window a version summarized: after ``previous``, up to ``cut``."""
    return [
        e
        for e in sorted(events, key=lambda e: (e.seq, e.ts, e.event_id))
        if not e.partial
        and in_summary_input(e.filter_key, filter_key)
        and cut.is_hidden(e.ts, e.seq)
        and (previous is None or previous.is_after(e.ts, e.seq))
    ]


# -- recall results ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecallView:
    """A recall tool answer (the executor's JSON body) ready for the page."""

    tool: str
    error: str | None
    note: str
    results: list[dict[str, Any]]


def recall_view(tool: str, body: Mapping[str, Any]) -> RecallView:
    """``session_search`` results or ``session_load`` messages, or the error the agent would see."""
    if "error" in body:
        return RecallView(tool, str(body["error"]), "", [])
    items = body.get("results") if tool == "session_search" else body.get("messages")
    return RecallView(tool, None, str(body.get("note", "")), [dict(x) for x in items or []])


# -- dead letters --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LetterRow:
    """One dead letter for display (never its payload)."""

    coordinates: str
    failed_at: datetime
    stage: str
    error_class: str
    reason: str
    size: int
    truncated_to: int | None
    redrive_blocked: str | None
    line: str


def filter_letters(letters: Iterable[DeadLetter], *, reason: str = "", error_class: str = "") -> list[DeadLetter]:
    """The letters whose reason contains ``reason`` (case-insensitive) and whose class is ``error_class`` if given."""
    needle = reason.casefold().strip()
    return [
        x
        for x in letters
        if (not needle or needle in x.reason.casefold()) and (not error_class or x.error_class == error_class)
    ]


def letter_rows(letters: Iterable[DeadLetter]) -> list[LetterRow]:
    """Newest failure first."""
    rows = []
    for x in sorted(letters, key=lambda x: (x.failed_at, *source_of(x)), reverse=True):
        cut = truncation(x)
        rows.append(
            LetterRow(str(source_of(x)), x.failed_at, x.stage, x.error_class, one_line(x.reason, 400),
                      original_size(x), cut[0] if cut else None, redrive_skip_reason(x), format_line(x))
        )  # fmt: skip
    return rows


def class_counts(letters: Iterable[DeadLetter]) -> list[tuple[str, int]]:
    """Error classes, most frequent first."""
    return sorted(Counter(x.error_class for x in letters).items(), key=lambda kv: (-kv[1], kv[0]))


# -- consumers and jobs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LagRow:
    group: str
    topic: str
    partition: int
    committed: int | None
    end: int
    lag: int | None
    source: str
    """``kafka`` (committed group offsets) or ``cassandra`` (the projector's stored offsets)."""

    @property
    def behind(self) -> bool:
        """Records wait for this group here (lag, or records on a partition it never committed)."""
        return bool(self.lag) or (self.lag is None and self.end > 0)


def lag_rows(
    committed: Mapping[str, Mapping[tuple[str, int], int | None]],
    ends: Mapping[tuple[str, int], int],
    projector: Iterable[ProjectorOffset] = (),
) -> list[LagRow]:
    """Records behind the log end, per group, topic and partition.

    ``committed`` maps a Kafka group to its committed offsets (``None``: never
    committed: the lag is unknown, the group reads from its reset point). A
    group reading a topic reads all its partitions: one it never committed on
    (a worker stuck on that partition's first record) is listed with an
    unknown lag, as long as it holds records. ``projector``: the offsets the
    projector stores next to its rows (it does not commit to Kafka).
    Partitions whose end is unknown are left out.
    """
    rows: list[LagRow] = []
    for group, offsets in sorted(committed.items()):
        topics = {topic for topic, _ in offsets}
        never = {tp: None for tp, end in ends.items() if tp[0] in topics and tp not in offsets and end > 0}
        for (topic, partition), offset in sorted({**offsets, **never}.items()):
            end = ends.get((topic, partition))
            if end is not None:
                lag = None if offset is None or offset < 0 else max(0, end - offset)
                rows.append(LagRow(group, topic, partition, offset, end, lag, "kafka"))
    for p in projector:
        end = ends.get((p.topic, p.partition))
        if end is not None:
            rows.append(LagRow(p.consumer_group, p.topic, p.partition, p.next_offset, end,
                               max(0, end - p.next_offset), "cassandra"))  # fmt: skip
    return rows


@dataclass(frozen=True)
class JobRow:
    """A summary job the worker emitted and has not seen answered (from its trigger state)."""

    app_name: str
    user_id: str
    session_id: str
    filter_key: str
    job_id: str
    upto_event_id: str
    emitted_at: datetime
    """The time of the event that emitted it (event time: what the worker's decisions count in)."""
    attempt: int
    age_s: float | None
    """Since the worker emitted it, by the wall clock (``None``: not recorded, as for a queued job; event
    times may be anything, a replay's or a producer's clock, so they give no age)."""
    queue_position: int = 0
    """0: the key's job being summarized; n: the n-th job emitted after it, waiting for its answer."""


def decode_tracked(values: Iterable[bytes]) -> tuple[list[TrackedKey], int]:
    """The worker's table values as its changelog holds them, and how many are unreadable."""
    out: list[TrackedKey] = []
    bad = 0
    for value in values:
        try:
            out.append(TrackedKey.from_bytes(value))
        except ValueError:
            bad += 1
    return out, bad


def job_rows(tracked: Iterable[TrackedKey], now: datetime) -> list[JobRow]:
    """Every job of every trigger state that is emitted and not answered, oldest first.

    A key's unanswered jobs are ``in_flight`` (the one summarized now) and
    ``queued`` behind it (emitted, run one at a time in order), from their
    emission until their summary (or failure) is applied. The worker records
    the wall-clock emission of the in-flight job only (``emitted_wall``): its
    age counts from there; a queued job has none.
    """
    rows = []
    for t in tracked:
        s = t.state
        for position, f in enumerate(s.unanswered):
            emitted = from_micros(f.emitted_at)
            age = None
            if position == 0 and s.in_flight is not None and t.emitted_wall is not None:
                age = max(0.0, (now - datetime.fromtimestamp(t.emitted_wall, UTC)).total_seconds())
            rows.append(JobRow(s.app_name, s.user_id, s.session_id, s.filter_key, f.job_id, f.upto_event_id, emitted,
                               f.attempt, age, position))  # fmt: skip
    return sorted(rows, key=lambda r: (r.emitted_at, r.session_id, r.filter_key, r.queue_position))


def latest_per_key(records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[bytes, bytes]:
    """A compacted topic read from the beginning: the last value of each key; a tombstone removes it."""
    out: dict[bytes, bytes] = {}
    for k, v in records:
        if k is None:
            continue
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out
