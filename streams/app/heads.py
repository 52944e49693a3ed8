"""The latest summary of every key, per partition, on the epoch each session is served from (pure).

:class:`HeadBook` is what :class:`~streams.app.ledger.SummaryLedger` keeps while it
reads a summaries partition (and records this worker's own writes): per key the
head (latest summary) of the session's served epoch, per session that epoch
(``default_epoch`` until an ``EpochAdopted`` record says otherwise, see
:mod:`schemas.epochs`) and the heads it left on the epochs it switched away
from (a switch back starts from them).

Rules, each making a record read twice harmless:

* a summary counts only for its session's served epoch and only if its version
  is above the key's head (a line the session left never moves a head again);
* a summary read at an offset before the session's last switch is ignored;
* a switch applies once: not at or before the last one applied, nor when its
  command was applied already.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import AdoptedHead, EpochAdopted, SessionSummary, SummaryBoundary
from streams.app.tracked import KEY_SEPARATOR, table_key


@dataclass(frozen=True, slots=True)
class Head:
    """The latest summary of one key: what its next pass rolls forward.

    ``raw`` is the record as published (an epoch switch carries the heads it
    leaves, exactly); ``epoch`` the line it belongs to.
    """

    version: int
    boundary: SummaryBoundary
    summary: str
    events_offset: int | None
    job_id: str
    epoch: int = 0
    raw: bytes | None = None

    def adopted(self) -> AdoptedHead:
        """The head as an epoch switch carries it."""
        if self.raw is None:
            raise ValueError(f"head v{self.version} of epoch {self.epoch} was kept without its record")
        return AdoptedHead(summary=SessionSummary.model_validate_json(self.raw), events_offset=self.events_offset)


def head_of(summary: SessionSummary, events_offset: int | None, raw: bytes | None = None) -> Head:
    return Head(
        summary.version, summary.boundary, summary.summary, events_offset, summary.job_id, summary.epoch,
        raw if raw is not None else summary.model_dump_json().encode(),
    )  # fmt: skip


def session_id_of(app_name: str, user_id: str, session_id: str) -> str:
    """The book's name of a session (the table key's session part)."""
    return KEY_SEPARATOR.join((app_name, user_id, session_id))


@dataclass
class SessionLine:
    """Which epoch a session is served from, and what its switches left behind."""

    epoch: int
    adopted_at: int | None = None
    """Summaries-topic offset of the last switch applied."""
    commands: set[str] = field(default_factory=set)
    """Command ids of the switches applied (a command delivered again is not applied twice)."""
    parked: dict[int, dict[str, Head]] = field(default_factory=dict)
    """Epoch → filter key → the head a switch left on it."""


class HeadBook:
    """See the module docstring. One instance per worker; partitions are independent."""

    def __init__(self, default_epoch: int = 0) -> None:
        self.default_epoch = default_epoch
        self._heads: dict[int, dict[str, Head]] = {}
        self._keys: dict[int, dict[str, set[str]]] = {}
        self._lines: dict[int, dict[str, SessionLine]] = {}

    def keys(self, partition: int) -> int:
        return len(self._heads.get(partition, {}))

    def head(self, partition: int, key: str) -> Head | None:
        return self._heads.get(partition, {}).get(key)

    def line(self, partition: int, session: str) -> SessionLine | None:
        return self._lines.get(partition, {}).get(session)

    def epoch_of(self, partition: int, session: str) -> int:
        """The epoch ``session`` is served from (new summaries of a key without a head carry it)."""
        line = self.line(partition, session)
        return line.epoch if line is not None else self.default_epoch

    def session_heads(self, partition: int, session: str) -> dict[str, Head]:
        """Filter key → head, for every key of ``session`` with a head."""
        heads = self._heads.get(partition, {})
        prefix = session + KEY_SEPARATOR
        return {fk: heads[prefix + fk] for fk in sorted(self._keys.get(partition, {}).get(session, ()))}

    def parked(self, partition: int, session: str, epoch: int) -> dict[str, Head] | None:
        """The heads the session left on ``epoch`` (``None``: it was never served from it)."""
        line = self.line(partition, session)
        found = line.parked.get(epoch) if line is not None else None
        return dict(found) if found is not None else None

    def applied(self, partition: int, session: str, command_id: str) -> bool:
        line = self.line(partition, session)
        return line is not None and command_id in line.commands

    def record(
        self, partition: int, summary: SessionSummary, events_offset: int | None, raw: bytes | None = None,
        at: int | None = None,
    ) -> bool:  # fmt: skip
        """Apply a summary (ours or read back at offset ``at``); whether it became its key's head."""
        session = session_id_of(summary.app_name, summary.user_id, summary.session_id)
        line = self.line(partition, session)
        if summary.epoch != (line.epoch if line is not None else self.default_epoch):
            return False
        if line is not None and at is not None and line.adopted_at is not None and at < line.adopted_at:
            return False
        key = table_key(summary.app_name, summary.user_id, summary.session_id, summary.filter_key)
        current = self.head(partition, key)
        if current is not None and current.version >= summary.version:
            return False
        self._set(partition, session, summary.filter_key, key, head_of(summary, events_offset, raw))
        return True

    def adopt(self, partition: int, record: EpochAdopted, at: int | None) -> bool:
        """Apply an epoch switch read at offset ``at`` (``None``: our own, offset unknown); whether it applied."""
        session = session_id_of(record.app_name, record.user_id, record.session_id)
        lines = self._lines.setdefault(partition, {})
        line = lines.get(session)
        if line is None:
            line = lines[session] = SessionLine(self.default_epoch)
        if record.command_id in line.commands or (
            at is not None and line.adopted_at is not None and at <= line.adopted_at
        ):
            return False
        line.parked[record.previous_epoch] = {h.summary.filter_key: _from_adopted(h) for h in record.replaced}
        line.parked.pop(record.epoch, None)
        for fk in list(self._keys.get(partition, {}).get(session, ())):
            self._drop(partition, session, fk)
        for h in record.heads:
            s = h.summary
            self._set(partition, session, s.filter_key, table_key(*s.session_key, s.filter_key), _from_adopted(h))
        line.epoch = record.epoch
        line.commands.add(record.command_id)
        if at is not None:
            line.adopted_at = at
        return True

    def _set(self, partition: int, session: str, filter_key: str, key: str, head: Head) -> None:
        self._heads.setdefault(partition, {})[key] = head
        self._keys.setdefault(partition, {}).setdefault(session, set()).add(filter_key)

    def _drop(self, partition: int, session: str, filter_key: str) -> None:
        self._heads.get(partition, {}).pop(session + KEY_SEPARATOR + filter_key, None)
        keys = self._keys.get(partition, {}).get(session)
        if keys is not None:
            keys.discard(filter_key)


def _from_adopted(head: AdoptedHead) -> Head:
    return head_of(head.summary, head.events_offset)


__all__ = ["Head", "HeadBook", "SessionLine", "head_of", "session_id_of"]
