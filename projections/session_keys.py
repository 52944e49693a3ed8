"""The projector's side of the record-key rule (``schemas.record_keys``): which key and partition each
session's records are fixed to, and which records it therefore refuses.

The worker keeps a session's fixed key and partition in its track state and
refuses (dead-letters) a record of the session with another key or on another
partition; had the projector stored such an event, the prompt would have shown
it until a boundary hid it, with no summary ever holding it. So the projector
applies the same rule to the same records in the same (log) order:

* what is fixed is kept in ``session_record_keys`` (written before the batch's
  offsets, never deleted: a ``delete_session`` keeps it, as the worker's state
  does), so a restart, a rebalance or a replay of the log decides the same;
* what this process has read or written is remembered (bounded, least recently
  used out): a fixed key never changes, so a remembered one is never stale, and
  a session not remembered costs one read per batch it appears in.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from schemas import SessionKey
from schemas.record_keys import key_problem

Fixed = tuple[bytes, int]
"""A session's record key and events-topic partition."""

DEFAULT_REMEMBERED_KEYS = 100_000


class KnownKeys:
    """The fixed key and partition of recently seen sessions (bounded, least recently used out)."""

    def __init__(self, capacity: int = DEFAULT_REMEMBERED_KEYS) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._fixed: OrderedDict[SessionKey, Fixed] = OrderedDict()

    def get(self, session: SessionKey) -> Fixed | None:
        found = self._fixed.get(session)
        if found is not None:
            self._fixed.move_to_end(session)
        return found

    def put(self, session: SessionKey, fixed: Fixed) -> None:
        self._fixed[session] = fixed
        self._fixed.move_to_end(session)
        while len(self._fixed) > self.capacity:
            self._fixed.popitem(last=False)

    def missing(self, sessions: Iterable[SessionKey]) -> list[SessionKey]:
        """The sessions of ``sessions`` not remembered, each once, in first-seen order."""
        return [s for s in dict.fromkeys(sessions) if s not in self._fixed]


class SessionKeys:
    """One batch's judge: ``known`` remembered across batches, ``read`` what Cassandra held for the sessions
    ``known`` lacked (``None``: nothing fixed yet). What the batch fixes is in ``fixed`` (in log order), to be
    written before the batch's offsets and remembered after."""

    def __init__(self, known: KnownKeys, read: dict[SessionKey, Fixed | None]) -> None:
        self._known = known
        self._read = read
        self._batch: dict[SessionKey, Fixed] = {}
        self.fixed: list[tuple[SessionKey, Fixed, int]] = []
        """``(session, (key, partition), offset of the record that fixed it)``."""
        self._at: dict[tuple[int, int], int] = {}
        """``(partition, offset)`` of a record that fixed a key → its entry in ``fixed``, until it is taken."""

    def judge(self, key: bytes | None, partition: int, offset: int, session: SessionKey, *, fixes: bool) -> str | None:
        """Why a record of ``session`` keyed ``key`` at ``partition``/``offset`` is refused (``None``: accepted).

        ``fixes``: the record would fix a session that has no key yet (``schemas.record_keys.fixes_session_key``).
        """
        fixed = self._batch.get(session)
        if fixed is None:
            fixed = self._known.get(session) or self._read.get(session)
            if fixed is not None:
                self._batch[session] = fixed  # the batch's later records of the session: one lookup
        elif key == fixed[0] and partition == fixed[1]:
            return None  # most records: the session's own key on its partition
        problem = key_problem(
            key, session, session.kafka_key(), known=fixed is not None, known_key=fixed[0] if fixed else None,
            known_partition=fixed[1] if fixed else None, partition=partition,
        )  # fmt: skip
        if problem is None and fixed is None and fixes and key is not None:
            self._batch[session] = (key, partition)
            self._at[partition, offset] = len(self.fixed)
            self.fixed.append((session, (key, partition), offset))
        return problem

    def take(self, partition: int, offset: int) -> tuple[SessionKey, Fixed, int] | None:
        """What the record at ``partition``/``offset`` fixed, for a caller that writes it with the record's own
        rows (then :meth:`untaken` leaves it out); ``None``: nothing, or taken already."""
        index = self._at.pop((partition, offset), None)
        return None if index is None else self.fixed[index]

    def untaken(self) -> list[tuple[SessionKey, Fixed, int]]:
        """What the batch fixed and no caller took (a command's fix, or a stage that writes them apart)."""
        return [self.fixed[i] for i in self._at.values()]

    def remember(self) -> None:
        """The batch's keys are durable: remember them (and what was read)."""
        for session, fixed in self._read.items():
            if fixed is not None:
                self._known.put(session, fixed)
        for session, fixed, _ in self.fixed:
            self._known.put(session, fixed)
