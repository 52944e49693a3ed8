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

from collections.abc import Iterable
from dataclasses import dataclass

Step = tuple[Iterable[str], str | None]
"""One position in log order: ``(call ids, None)`` for a message making calls (repeated ids count once),
``((), call id)`` for a result, ``((), None)`` for a position the pairing skips (shows nothing)."""

NO_STEP: Step = ((), None)


@dataclass(frozen=True, slots=True)
class Pairing:
    """Result position → the position of the call it answers; ``replacing``: the results that found every
    call of their id answered, so answer the id's latest call and replace its result."""

    answers: dict[int, int]
    replacing: frozenset[int]


def pair_steps(steps: Iterable[Step]) -> Pairing:
    """The pairing of ``steps`` (positions in log order, see :data:`Step`) under the module's rule."""
    open_calls: dict[str, list[int]] = {}
    latest: dict[str, int] = {}
    answers: dict[int, int] = {}
    replacing: list[int] = []
    for i, (call_ids, result_id) in enumerate(steps):
        if result_id is not None:
            waiting = open_calls.get(result_id)
            if waiting:
                answers[i] = waiting.pop()
            elif result_id in latest:
                answers[i] = latest[result_id]
                replacing.append(i)
            continue
        for call_id in dict.fromkeys(call_ids):
            open_calls.setdefault(call_id, []).append(i)
            latest[call_id] = i
    return Pairing(answers, frozenset(replacing))


__all__ = ["NO_STEP", "Pairing", "Step", "pair_steps"]
