"""The content-addressed summary cache: unchanged inputs reuse the summary already written.

The address is what the summarizer would send: ``Summarizer.cache_key``, a
SHA-256 over its first request as built (prompts, previous summary, selected
events as formatted, budget cuts), every event it selected, the model and the
settings that shape the answer after the call. So every setting that changes a
summary changes its address through what it changes, with no list kept by hand
(``keep_recent_rounds`` and ``skip_recent_events`` change the selection,
``max_summary_length`` is hashed). :func:`input_hash` is the older address, kept
for summarizers without ``cache_key`` (it misses such settings). The cache is
filled from the ``distill-input-hash`` header of summary records (the
ledger feeds it while reading the summaries topic; replay preloads it from
the live topic), so a replay never calls the LLM for a summary it has.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from schemas import SessionSummary


def input_hash(
    previous_summary: str,
    raw_events: Sequence[bytes],
    *,
    filter_key: str,
    force: bool,
    prompt_version: str,
    model: str,
    model_request: Mapping[str, Any] | None = None,
) -> str:
    """The content address of one summary's inputs."""
    h = hashlib.sha256()
    head = {"p": previous_summary, "k": filter_key, "f": force, "pv": prompt_version, "m": model}
    h.update(json.dumps(head, sort_keys=True, ensure_ascii=False).encode())
    if model_request is not None:
        h.update(b"\x00req")
        h.update(json.dumps(model_request, sort_keys=True, ensure_ascii=False, default=str).encode())
    for raw in raw_events:
        h.update(len(raw).to_bytes(8, "big"))
        h.update(raw)
    return h.hexdigest()


class SummaryCache:
    """An LRU map from input hash to the summary produced for those inputs."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, SessionSummary] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> SessionSummary | None:
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return found

    def put(self, key: str, summary: SessionSummary) -> None:
        self._entries[key] = summary
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
