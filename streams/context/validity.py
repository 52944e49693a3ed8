"""A checker that a ``messages`` list is acceptable to the chat-completions API.

Independent of how the list was built, so tests (and callers who edit a
request after assembly) can verify any list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_ROLES = frozenset({"system", "user", "assistant", "tool"})


class InvalidMessages(ValueError):
    """Raised by :func:`assert_valid`; ``violations`` lists every problem found."""

    def __init__(self, violations: list[str]) -> None:
        super().__init__("; ".join(violations))
        self.violations = violations


def find_violations(messages: Sequence[Mapping[str, Any]], *, require_system: bool = False) -> list[str]:
    """Every rule the list breaks, as readable strings (empty when valid).

    Rules: the list is non-empty; at most one system message, and only first
    (exactly one with ``require_system``); roles are known; no assistant turn
    without text and without calls; each assistant call has a non-empty,
    unique id and a function name; the messages right after an assistant turn
    with calls are its tool results, one per call, before anything else; a
    tool result appears only in such a block and answers a call of it.
    """
    problems: list[str] = []
    if not messages:
        return ["the list is empty"]
    systems = [i for i, m in enumerate(messages) if m.get("role") == "system"]
    if require_system and not systems:
        problems.append("no system message")
    if len(systems) > 1:
        problems.append(f"{len(systems)} system messages at {systems}")
    if systems and systems[0] != 0:
        problems.append(f"system message at position {systems[0]}, not first")
    expected: set[str] = set()
    owner = -1
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in _ROLES:
            problems.append(f"[{i}] unknown role {role!r}")
            continue
        if role == "tool":
            call_id = m.get("tool_call_id")
            if call_id in expected:
                expected.discard(call_id)
            elif owner < 0:
                problems.append(f"[{i}] tool result {call_id!r} does not follow an assistant call")
            else:
                problems.append(f"[{i}] tool result {call_id!r} does not answer an open call of [{owner}]")
            continue
        if expected:
            problems.append(f"[{owner}] calls {sorted(expected)} have no result before [{i}]")
        expected, owner = set(), -1
        if role == "assistant":
            calls = m.get("tool_calls") or []
            if not calls and not m.get("content"):
                problems.append(f"[{i}] empty assistant turn")
            ids = [c.get("id") for c in calls]
            if any(not cid for cid in ids):
                problems.append(f"[{i}] tool call without id")
            if len(set(ids)) != len(ids):
                problems.append(f"[{i}] duplicate tool call ids")
            if any(not (c.get("function") or {}).get("name") for c in calls):
                problems.append(f"[{i}] tool call without function name")
            if calls:
                expected, owner = {str(cid) for cid in ids if cid}, i
    if expected:
        problems.append(f"[{owner}] calls {sorted(expected)} have no result at the end")
    return problems


def assert_valid(messages: Sequence[Mapping[str, Any]], *, require_system: bool = False) -> None:
    """Raise :class:`InvalidMessages` when :func:`find_violations` finds anything."""
    problems = find_violations(messages, require_system=require_system)
    if problems:
        raise InvalidMessages(problems)
