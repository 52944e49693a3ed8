"""Text every record can hold: the one rule for characters UTF-8 cannot encode."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def utf8_text(text: str) -> str:
    """``text`` with each character UTF-8 cannot hold written as its escape (``\\udce9``).

    Such a character is a lone surrogate: a file name ``os.listdir`` / ``os.fsdecode`` gave for bytes that
    are not UTF-8, half of an escaped pair in JSON. A record holding one cannot be encoded (the publish
    raised); the escape keeps what the character was, in the text the model and the summary read.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _utf8_values(value: Any) -> Any:
    """``value`` with :func:`utf8_text` applied to every string in it (keys too); the same object when none changed."""
    if isinstance(value, str):
        return utf8_text(value)
    if isinstance(value, dict):
        items = [(_utf8_values(k), _utf8_values(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        out = [_utf8_values(v) for v in value]
        if all(a is b for a, b in zip(out, value, strict=True)):
            return value
        return type(value)(out) if isinstance(value, tuple) else out
    return value


def utf8_record(record: M) -> M:
    """``record`` with :func:`utf8_text` applied to every string it holds (itself when all are UTF-8)."""
    data = record.model_dump()
    fixed = _utf8_values(data)
    return record if fixed is data else type(record).model_validate(fixed)
