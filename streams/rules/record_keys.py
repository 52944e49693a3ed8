"""The Kafka record key of a session: the rule is :mod:`schemas.record_keys` (shared with the projector);
here, how the worker carries a key in JSON (jobs, the track state).
"""

from __future__ import annotations

import base64

from schemas.record_keys import RECORD_KEY_ERROR, describe_key, fixes_session_key, key_problem

__all__ = ["RECORD_KEY_ERROR", "decode_key", "describe_key", "encode_key", "fixes_session_key", "key_problem"]


def encode_key(key: bytes | None) -> str | None:
    """``key`` as it travels in JSON (base64), ``None`` kept."""
    return base64.b64encode(key).decode() if key is not None else None


def decode_key(text: str | None) -> bytes | None:
    return base64.b64decode(text, validate=True) if text is not None else None
