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

It also keeps, per key, the last given-up :class:`~schemas.SummaryFailure`
that no later news of the key superseded (:meth:`HeadBook.failure`): a
``join`` job (a sync request waiting for the key's jobs) is answered with it.
Later news is a summary of the key on the served line (any version: it comes
after the failure in the log) or a switch of the session (the failed job
belonged to the line it left, and the adopted heads are the key's news now).
A failure read at an offset before the session's last switch is ignored, and
reading the last switch again clears the session's failures again, so a
catch-up re-reading this worker's own writes ends where writing them did.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import AdoptedHead, EpochAdopted, SessionSummary, SummaryBoundary, SummaryFailure
from streams.app.tracked import KEY_SEPARATOR, table_key


@dataclass(frozen=True, slots=True)
class Head:
    """The latest summary of one key: what its next pass rolls forward.

    ``record`` is the summary as published (what a switch carries for the heads it
    leaves, and what a request waiting for the key is answered with); the other
    fields are read from it. ``events_offset``: the events-topic offset of the
    last event it covers (the next pass reads its delta after it).
    """

    record: SessionSummary
    events_offset: int | None

    @property
    def version(self) -> int:
        return self.record.version

    @property
    def boundary(self) -> SummaryBoundary:
        return self.record.boundary

    @property
    def summary(self) -> str:
        return self.record.summary

    @property
    def job_id(self) -> str:
        return self.record.job_id

    @property
    def chain_from_offset(self) -> int | None:
        """Where the input of the head's chain began in the events topic (``None``: not known)."""
        return self.record.chain_from_offset

    @property
    def epoch(self) -> int:
        """The line the head belongs to (``schemas.epochs``)."""
        return self.record.epoch

    def adopted(self) -> AdoptedHead:
        """The head as an epoch switch carries it."""
        return AdoptedHead(summary=self.record, events_offset=self.events_offset)


def head_of(summary: SessionSummary, events_offset: int | None) -> Head:
    """The head of ``summary`` (``events_offset``: the events-topic offset of its boundary event)."""
    return Head(summary, events_offset)


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
    last_command: str | None = None
    """Command id of the last switch applied (reading it again clears the session's failures again)."""
    parked: dict[int, dict[str, Head]] = field(default_factory=dict)
    """Epoch → filter key → the head a switch left on it."""


class HeadBook:
    """See the module docstring. One instance per worker; partitions are independent."""

    def __init__(self, default_epoch: int = 0) -> None:
        self.default_epoch = default_epoch
        self._heads: dict[int, dict[str, Head]] = {}
        self._keys: dict[int, dict[str, set[str]]] = {}
        self._lines: dict[int, dict[str, SessionLine]] = {}
        self._failed: dict[int, dict[str, SummaryFailure]] = {}
        """Per partition, table key → the key's last given-up failure (see the module docstring)."""
        self._failed_keys: dict[int, dict[str, set[str]]] = {}
        """Per partition, session → the table keys in ``_failed`` (a switch clears them at once)."""

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

    def failure(self, partition: int, key: str) -> SummaryFailure | None:
        """The key's last given-up failure, unless a summary of the key or a switch of its session came after it."""
        return self._failed.get(partition, {}).get(key)

    def record(self, partition: int, summary: SessionSummary, events_offset: int | None, at: int | None = None) -> bool:
        """Apply a summary (ours or read back at offset ``at``); whether it became its key's head.

        A summary that counts for the served line clears the key's failure, whatever
        its version: it comes later in the log than the failure it clears.
        """
        session = session_id_of(summary.app_name, summary.user_id, summary.session_id)
        line = self.line(partition, session)
        if summary.epoch != (line.epoch if line is not None else self.default_epoch):
            return False
        if _before_switch(line, at):
            return False
        key = table_key(summary.app_name, summary.user_id, summary.session_id, summary.filter_key)
        self._forget_failure(partition, session, key)
        current = self.head(partition, key)
        if current is not None and current.version >= summary.version:
            return False
        self._set(partition, session, summary.filter_key, key, head_of(summary, events_offset))
        return True

    def record_failure(self, partition: int, failure: SummaryFailure, at: int | None = None) -> bool:
        """Apply a failure record (ours or read back at ``at``); whether it is now its key's failure.

        Only a job given up counts (an answer saying there was nothing to summarize, or
        a refused switch, is nobody's failure); one from before the session's last
        switch belongs to the line it left.
        """
        if not failure.gave_up:
            return False
        session = session_id_of(failure.app_name, failure.user_id, failure.session_id)
        if _before_switch(self.line(partition, session), at):
            return False
        key = table_key(failure.app_name, failure.user_id, failure.session_id, failure.filter_key)
        self._failed.setdefault(partition, {})[key] = failure
        self._failed_keys.setdefault(partition, {}).setdefault(session, set()).add(key)
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
            if record.command_id == line.last_command:
                # The last switch read again (a catch-up over our own writes): what it cleared is
                # cleared again, and a switch recorded without its offset learns it.
                self._forget_failures(partition, session)
                if line.adopted_at is None and at is not None:
                    line.adopted_at = at
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
        line.last_command = record.command_id
        self._forget_failures(partition, session)  # the failed jobs were of the line it left
        if at is not None:
            line.adopted_at = at
        return True

    def _set(self, partition: int, session: str, filter_key: str, key: str, head: Head) -> None:
        self._heads.setdefault(partition, {})[key] = head
        self._keys.setdefault(partition, {}).setdefault(session, set()).add(filter_key)

    def _forget_failure(self, partition: int, session: str, key: str) -> None:
        keys = self._failed_keys.get(partition, {}).get(session)
        if keys is not None and key in keys:
            keys.discard(key)
            self._failed[partition].pop(key, None)
            if not keys:
                del self._failed_keys[partition][session]

    def _forget_failures(self, partition: int, session: str) -> None:
        for key in self._failed_keys.get(partition, {}).pop(session, ()):
            self._failed[partition].pop(key, None)

    def _drop(self, partition: int, session: str, filter_key: str) -> None:
        self._heads.get(partition, {}).pop(session + KEY_SEPARATOR + filter_key, None)
        keys = self._keys.get(partition, {}).get(session)
        if keys is not None:
            keys.discard(filter_key)


def _from_adopted(head: AdoptedHead) -> Head:
    return head_of(head.summary, head.events_offset)


def _before_switch(line: SessionLine | None, at: int | None) -> bool:
    """Whether a record read at ``at`` lies before the session's last switch (the line it left)."""
    return line is not None and at is not None and line.adopted_at is not None and at < line.adopted_at


__all__ = ["Head", "HeadBook", "SessionLine", "head_of", "session_id_of"]
