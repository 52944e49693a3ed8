"""Argument checking for the recall tools (pure).

A model's tool arguments are untrusted input: each rule here either returns
the value the tool uses or raises :class:`ArgumentError` with a message that
names the argument, what was given and what is allowed, so the executor can
answer the model with it. Nothing here raises anything else, whatever JSON the
model sent.

The rules follow the declared tool schemas: unknown arguments, wrong types,
values outside an enum and values below a declared minimum are errors; a value
above a declared maximum is clamped to it (asking for more than the tool gives
is not a mistake the model needs to correct); an absent or ``null`` optional
argument takes its default.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from typing import Any, TypeVar

T = TypeVar("T", bound=str)

_SHOWN_VALUE_CHARS = 60


class ArgumentError(Exception):
    """A tool argument the tool cannot use; the message is meant for the model."""


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _SHOWN_VALUE_CHARS else text[: _SHOWN_VALUE_CHARS - 3] + "..."


def parse_arguments(raw: str | None, allowed: Collection[str]) -> dict[str, Any]:
    """The arguments object of a tool call; empty or absent arguments are ``{}``."""
    if raw is None or not raw.strip():
        return {}
    try:
        args = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ArgumentError(f"arguments are not valid JSON: {exc.msg} (at character {exc.pos})") from exc
    except (ValueError, RecursionError) as exc:  # over-long integers, absurd nesting
        raise ArgumentError(f"arguments could not be read as JSON: {exc}") from exc
    if not isinstance(args, dict):
        raise ArgumentError(f"arguments must be a JSON object, got {type(args).__name__} {_shown(args)}")
    unknown = sorted(k for k in args if k not in allowed)
    if unknown:
        raise ArgumentError(
            f"unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    return args


def string_arg(args: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    """A string argument, stripped; ``None`` when absent (an error when ``required``)."""
    value = args.get(key)
    if value is None:
        if required:
            raise ArgumentError(f"{key} is required (a string)")
        return None
    if not isinstance(value, str):
        raise ArgumentError(f"{key} must be a string, got {_shown(value)}")
    return value.strip()


def _as_float(value: Any) -> float | None:
    """``value`` as a finite float when it is a JSON number or numeric string, else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) < 10**300 else None
    if isinstance(value, float | str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def int_arg(args: Mapping[str, Any], key: str, *, default: int, minimum: int, maximum: int | None = None) -> int:
    """An integer argument ≥ ``minimum``, clamped to ``maximum``; numeric strings and whole floats are accepted."""
    value = args.get(key)
    if value is None:
        return default
    allowed = f"an integer ≥ {minimum}" if maximum is None else f"an integer from {minimum} to {maximum}"
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        as_float = _as_float(value)
        if as_float is None or not as_float.is_integer():
            raise ArgumentError(f"{key} must be {allowed}, got {_shown(value)}")
        number = int(as_float)
    if number < minimum:
        raise ArgumentError(f"{key} must be {allowed}, got {_shown(value)}")
    return number if maximum is None else min(number, maximum)


def optional_int_arg(args: Mapping[str, Any], key: str, *, minimum: int, maximum: int | None = None) -> int | None:
    """Like :func:`int_arg`, but ``None`` when absent, so the read rule's own default applies."""
    if args.get(key) is None:
        return None
    return int_arg(args, key, default=minimum, minimum=minimum, maximum=maximum)


def number_arg(args: Mapping[str, Any], key: str, *, default: float, minimum: float) -> float:
    """A finite number ≥ ``minimum`` (numeric strings accepted)."""
    value = args.get(key)
    if value is None:
        return default
    number = _as_float(value)
    if number is None or number < minimum:
        raise ArgumentError(f"{key} must be a number ≥ {minimum:g}, got {_shown(value)}")
    return number


def choice_arg(args: Mapping[str, Any], key: str, choices: tuple[T, ...], default: T) -> T:
    """One of ``choices``; absent → ``default``."""
    value = args.get(key)
    if value is None:
        return default
    for choice in choices:
        if value == choice:
            return choice
    raise ArgumentError(f"{key} must be one of {', '.join(choices)}; got {_shown(value)}")
