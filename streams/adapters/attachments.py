"""How an image, audio or file part the model saw is named in its event's text.

The model reads the attachment itself; distill's summary input, search and
counts read text. An event whose only trace of an attachment is the framework's
native record would lose it once a summary covers the event, so the event's text
names it: ``[image: image/png, 48,213 bytes, receipt.png]`` — its kind, MIME type,
size, and a name, URI or file id when there is one. Inline data (bytes, base64,
a data URI) is never copied into the text.
"""

from __future__ import annotations

import re

_DATA_URI = re.compile(r"data:(?P<mime>[^;,]{0,100})(?P<params>(?:;[^;,]{0,100}){0,8}),", re.DOTALL)
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/=_-]{512,}")
"""A long run of base64 without a header: an image or a file inlined as it is."""


def kind_of(mime_type: str | None, default: str = "file") -> str:
    """``image``, ``audio`` or ``video`` from a MIME type, else ``default``."""
    major = (mime_type or "").split("/", 1)[0].strip().lower()
    return major if major in ("image", "audio", "video") else default


def inline_size(data: str) -> tuple[str | None, int]:
    """The MIME type (from a data URI's header, else ``None``) and the decoded size of inline base64 ``data``."""
    mime = None
    payload = data
    m = _DATA_URI.match(data)
    if m is not None:
        mime = m.group("mime") or None
        payload = data[m.end() :]
        if ";base64" not in m.group("params"):
            return mime, len(payload.encode())
    payload = payload.strip()
    return mime, len(payload) * 3 // 4 - len(payload) + len(payload.rstrip("="))


def is_inline(value: str) -> bool:
    """Whether ``value`` is inline data, never copied into text: a data URI or a long run of base64."""
    return _DATA_URI.match(value) is not None or _BASE64_RUN.fullmatch(value) is not None


def attachment_text(kind: str, mime_type: str | None = None, size: int | None = None, *refs: str | None) -> str:
    """``[kind: mime, N bytes, ref, ...]`` with what is known (``refs``: names, URIs, file ids)."""
    fields = [mime_type, f"{size:,} bytes" if size is not None else None, *refs]
    shown = [f for f in fields if f]
    return f"[{kind}: {', '.join(shown)}]" if shown else f"[{kind}]"
