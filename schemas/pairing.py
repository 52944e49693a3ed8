"""The tool-call pairing rule, written once: which call each tool result answers.

Frameworks that number calls afresh each turn (``call_0``, ``call_1``…) reuse
call ids across turns, so a result's id alone does not name its call. In log
order, a result answers the nearest earlier call with its id that no result
answered yet; when every earlier call with its id is answered, it answers the
latest of them and replaces that call's result (as a long-running tool's final
result replaces its interim one). A result with no earlier call with its id
answers none.

Over plain inputs — per position, the call ids it makes or the call id it
answers — so the full history (``streams.context.pairing``) and the reads from
Cassandra (``projections.context_read``, ``projections.event_windows``) apply
one rule: the request built from either must pair every result alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Step = str | Sequence[str] | None
"""One position in log order: the call ids a message makes (a sequence; an id repeated counts once), the call id
a result answers (a ``str``), or ``None`` for a position the pairing skips (shows nothing)."""


@dataclass(frozen=True, slots=True)
class Pairing:
    """Result position → the position of the call it answers; ``replacing``: the results that found every
    call of their id answered, so answer the id's latest call and replace its result."""

    answers: dict[int, int]
    replacing: frozenset[int]


class Pairer:
    """The rule applied position by position, in log order (for a caller that walks its own sequence once):
    :meth:`calls` for a message making calls, :meth:`result` for a result."""

    __slots__ = ("_latest", "_open")

    def __init__(self) -> None:
        self._open: dict[str, list[int]] = {}
        self._latest: dict[str, int] = {}

    def calls(self, position: int, call_ids: Iterable[str]) -> None:
        """The message at ``position`` makes calls with ``call_ids`` (an id repeated counts once)."""
        for call_id in call_ids:
            waiting = self._open.get(call_id)
            if waiting is None:
                self._open[call_id] = [position]
            elif not waiting or waiting[-1] != position:
                waiting.append(position)
            self._latest[call_id] = position

    def result(self, call_id: str) -> tuple[int, bool] | None:
        """The position of the call a result of ``call_id`` answers and whether it replaces that call's result
        (every call with the id was answered), or ``None``: no earlier call has the id."""
        waiting = self._open.get(call_id)
        if waiting:
            return waiting.pop(), False
        latest = self._latest.get(call_id)
        return None if latest is None else (latest, True)


def pair_steps(steps: Iterable[Step]) -> Pairing:
    """The pairing of ``steps`` (positions in log order, see :data:`Step`) under the module's rule."""
    pairer = Pairer()
    answers: dict[int, int] = {}
    replacing: list[int] = []
    for i, step in enumerate(steps):
        if step is None:
            continue
        if isinstance(step, str):
            found = pairer.result(step)
            if found is not None:
                answers[i] = found[0]
                if found[1]:
                    replacing.append(i)
        else:
            pairer.calls(i, step)
    return Pairing(answers, frozenset(replacing))


__all__ = ["Pairer", "Pairing", "Step", "pair_steps"]
