"""The pairing rule of ``schemas.pairing``: one rule, applied whole (``pair_steps``) or step by step (``Pairer``)."""

from __future__ import annotations

import random

from schemas.pairing import Pairer, Step, pair_steps


def test_reused_ids_pair_within_their_turn_and_a_late_result_replaces_the_latest_calls() -> None:
    steps: list[Step] = [
        ["call_0", "call_0"],  # 0: a repeated id counts once
        "call_0",  # 1 answers 0
        ["call_0"],  # 2
        None,  # 3: shows nothing
        ["call_0", "call_1"],  # 4
        "call_0",  # 5 answers 4 (the nearest unanswered)
        "call_0",  # 6 answers 2
        "call_0",  # 7: every call answered, the latest (4) — its result replaced
        "call_9",  # 8: no call
        "call_1",  # 9 answers 4
    ]
    pairing = pair_steps(steps)
    assert pairing.answers == {1: 0, 5: 4, 6: 2, 7: 4, 9: 4}
    assert pairing.replacing == {7}


def _naive(steps: list[Step]) -> dict[int, int]:
    """The rule as the guide states it, by scanning back from each result."""
    answered: set[tuple[int, str]] = set()
    out: dict[int, int] = {}
    for i, step in enumerate(steps):
        if not isinstance(step, str):
            continue
        calls = [j for j in range(i) if steps[j] is not None and not isinstance(steps[j], str) and step in steps[j]]
        open_calls = [j for j in calls if (j, step) not in answered]
        if open_calls:
            out[i] = open_calls[-1]
            answered.add((open_calls[-1], step))
        elif calls:
            out[i] = calls[-1]
    return out


def test_pair_steps_and_the_pairer_agree_with_the_rule_as_stated() -> None:
    rng = random.Random(7)
    for _ in range(300):
        steps: list[Step] = []
        for _ in range(rng.randrange(1, 25)):
            kind = rng.random()
            ids = [f"c{rng.randrange(3)}" for _ in range(rng.randrange(1, 3))]
            steps.append(ids if kind < 0.4 else ids[0] if kind < 0.9 else None)
        expected = _naive(steps)
        assert pair_steps(steps).answers == expected, steps
        pairer = Pairer()
        stepped: dict[int, int] = {}
        for i, step in enumerate(steps):
            if isinstance(step, str):
                found = pairer.result(step)
                if found is not None:
                    stepped[i] = found[0]
            elif step is not None:
                pairer.calls(i, step)
        assert stepped == expected, steps
