"""Rules of ``distill dead-letters``: selection, time windows, display lines and redrive eligibility.

Pure: values in, values out (no Kafka, no clock: ``now`` is a parameter). The
command in ``streams/cli/dead_letters_cmd.py`` only reads and writes topics.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from pydantic import ValidationError

from schemas.base import as_utc
from schemas.dead_letter import DeadLetter

REDRIVE_HEADER = "distill-redrive-of"
"""Header on a redriven record: ``topic/partition/offset`` of the record that was dead-lettered."""

REASON_WIDTH = 160
_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_OFFSET = re.compile(r"^([^:/]+)[:/](\d+)[:/](\d+)$")
_TRUNCATED = re.compile(r"value truncated to (\d+) of (\d+) bytes")


class SourceCoordinates(NamedTuple):
    """Where the dead-lettered record was read: its topic, partition and offset."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}/{self.offset}"


def source_of(letter: DeadLetter) -> SourceCoordinates:
    return SourceCoordinates(letter.source_topic, letter.source_partition, letter.source_offset)


def parse_since(text: str, now: datetime) -> datetime:
    """``2h``/``30m``/``45s``/``7d``/``1w`` before ``now``, or an ISO 8601 instant (naive means UTC)."""
    match = _DURATION.match(text)
    if match:
        return now - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    try:
        return as_utc(datetime.fromisoformat(text.strip()))
    except ValueError:
        raise ValueError(f"expected a duration such as 2h, 30m, 7d or an ISO time, got {text!r}") from None


def parse_offset(text: str) -> SourceCoordinates:
    """``TOPIC:PARTITION:OFFSET``, or ``TOPIC/PARTITION/OFFSET`` as lines print it (topic names hold neither)."""
    match = _OFFSET.match(text.strip())
    if match is None:
        raise ValueError(f"expected TOPIC:PARTITION:OFFSET, got {text!r}")
    return SourceCoordinates(match.group(1), int(match.group(2)), int(match.group(3)))


@dataclass(frozen=True)
class Selection:
    """Which dead letters a command applies to. Each given filter must match; repeated values are alternatives."""

    error_classes: frozenset[str] = frozenset()
    source_topic: str | None = None
    stage: str | None = None
    since: datetime | None = None
    offsets: frozenset[SourceCoordinates] = frozenset()
    limit: int | None = None

    @property
    def has_filter(self) -> bool:
        """Whether anything narrows the selection (``limit`` alone does not)."""
        return bool(self.error_classes or self.source_topic or self.stage or self.since or self.offsets)

    def matches(self, letter: DeadLetter) -> bool:
        return (
            (not self.error_classes or letter.error_class in self.error_classes)
            and (self.source_topic is None or letter.source_topic == self.source_topic)
            and (self.stage is None or letter.stage == self.stage)
            and (self.since is None or as_utc(letter.failed_at) >= self.since)
            and (not self.offsets or source_of(letter) in self.offsets)
        )

    def apply(self, letters: Iterable[DeadLetter]) -> list[DeadLetter]:
        """The matching letters, oldest failure first, at most ``limit`` of them."""
        chosen = sorted((x for x in letters if self.matches(x)), key=_chronological)
        return chosen if self.limit is None else chosen[: self.limit]


def _chronological(letter: DeadLetter) -> tuple[datetime, str, int, int]:
    return (as_utc(letter.failed_at), *source_of(letter))


@dataclass(frozen=True)
class StoredRecord:
    """One record of the dead-letters topic: its own coordinates, and the letter or why it is not one."""

    partition: int
    offset: int
    letter: DeadLetter | None
    problem: str = ""


def read_stored(partition: int, offset: int, value: bytes | None) -> StoredRecord:
    """Decode one record of the dead-letters topic; an invalid one keeps its coordinates and the error."""
    if value is None:
        return StoredRecord(partition, offset, None, "empty record (tombstone)")
    try:
        return StoredRecord(partition, offset, DeadLetter.model_validate_json(value))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        return StoredRecord(partition, offset, None, f"not a DeadLetter: {where}: {first['msg']}")


def one_line(text: str, width: int = REASON_WIDTH) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``width`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def truncation(letter: DeadLetter) -> tuple[int, int] | None:
    """``(kept, original)`` byte counts when the stored value was truncated (see ``dead_letter_for``)."""
    match = _TRUNCATED.search(letter.reason)
    return (int(match.group(1)), int(match.group(2))) if match else None


def stored_size(letter: DeadLetter) -> int:
    """Bytes of the value as stored, computed from the base64 length (no decoding)."""
    text = letter.value_b64.strip()
    return len(text) * 3 // 4 - text[-2:].count("=")


def original_size(letter: DeadLetter) -> int:
    """Bytes of the rejected record's value: the stored ones, or the size before truncation."""
    cut = truncation(letter)
    return cut[1] if cut else stored_size(letter)


def format_line(letter: DeadLetter) -> str:
    """One display line; never the payload (it may hold user content)."""
    cut = truncation(letter)
    size = f"{original_size(letter)} B" + (f" (truncated to {cut[0]})" if cut else "")
    failed = as_utc(letter.failed_at).isoformat(timespec="seconds").replace("+00:00", "Z")
    return f"{failed}  {source_of(letter)}  {letter.stage}  {letter.error_class}  {one_line(letter.reason)}  [{size}]"


def format_invalid(topic: str, record: StoredRecord) -> str:
    return f"invalid record at {topic}/{record.partition}/{record.offset}: {one_line(record.problem)}"


def format_summary(letters: Iterable[DeadLetter], invalid: int = 0) -> str:
    """``N dead letters: ClassA 2, ClassB 1`` (most frequent first), plus the invalid records if any."""
    counts = Counter(x.error_class for x in letters)
    total = sum(counts.values())
    by_class = ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    line = f"{total} dead letter{'' if total == 1 else 's'}" + (f": {by_class}" if by_class else "")
    return line + (f"; {invalid} invalid record{'' if invalid == 1 else 's'}" if invalid else "")


@dataclass(frozen=True)
class Redrive:
    """One record to publish again: the original key and value bytes, to the source topic, with the trace header."""

    letter: DeadLetter
    key: bytes | None
    value: bytes

    @property
    def topic(self) -> str:
        return self.letter.source_topic

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        return [(REDRIVE_HEADER, str(source_of(self.letter)).encode())]


@dataclass
class RedrivePlan:
    """What a redrive will do: records to publish, letters skipped (with why) and foreign source topics."""

    publish: list[Redrive] = field(default_factory=list)
    skipped: list[tuple[DeadLetter, str]] = field(default_factory=list)
    foreign: Counter[str] = field(default_factory=Counter)

    def skip_counts(self) -> Counter[str]:
        return Counter(reason.split(":")[0] for _, reason in self.skipped)


def redrive_skip_reason(letter: DeadLetter) -> str | None:
    """Why ``letter`` cannot be redriven as it is stored (``None``: it can)."""
    cut = truncation(letter)
    if cut is not None:
        return f"value truncated: only {cut[0]} of {cut[1]} bytes were kept"
    value = _b64(letter.value_b64)
    if value is None or (letter.key_b64 is not None and _b64(letter.key_b64) is None):
        return "not base64: the stored key or value cannot be decoded"
    if not value:
        # A tombstone is stored as zero bytes; published again it is the same refused record (or, as
        # zero bytes rather than null, a different one), so there is nothing a redrive can deliver.
        return "no value (a tombstone or an empty record): nothing to publish again; it would be refused again"
    return None


def plan_redrive(letters: Iterable[DeadLetter], allowed_topics: Iterable[str]) -> RedrivePlan:
    """Sort ``letters`` into records to publish, skips and refusals (source topics distill does not consume).

    A source record dead-lettered more than once is published once per plan.
    """
    allowed = set(allowed_topics)
    plan = RedrivePlan()
    seen: set[SourceCoordinates] = set()
    for letter in letters:
        reason = redrive_skip_reason(letter)
        if letter.source_topic not in allowed:
            plan.foreign[letter.source_topic] += 1
        elif source_of(letter) in seen:
            plan.skipped.append((letter, "duplicate: the same source record is already in this redrive"))
        elif reason is not None:
            plan.skipped.append((letter, reason))
        else:
            seen.add(source_of(letter))
            key = _b64(letter.key_b64) if letter.key_b64 is not None else None
            plan.publish.append(Redrive(letter, key, _b64(letter.value_b64) or b""))
    return plan


def format_refusal(foreign: Counter[str], allowed: Iterable[str]) -> str:
    topics = ", ".join(f"{t} ({n})" for t, n in sorted(foreign.items()))
    return (
        f"refusing to redrive to {topics}: distill consumes only {', '.join(sorted(allowed))}; "
        "narrow the selection (e.g. --source-topic)"
    )


def _b64(text: str | None) -> bytes | None:
    try:
        return base64.b64decode(text or "", validate=True)
    except (binascii.Error, ValueError):
        return None
