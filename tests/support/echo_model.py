"""An in-process model (the summarizer's ``Model`` protocol) that answers with the markers it was sent.

The oracle of the promise's unit tests: every marker of the previous summary and of the delta comes
back in the answer, in order, once; a marker sent twice in one request (the previous summary already
held it) is noted in ``twice`` — a second summarization of its event.
"""

from __future__ import annotations

import re

from streams.summarizer.model import ModelResponse
from streams.summarizer.request import ChatRequest


class MarkerEcho:
    name = "echo"
    context_window = 128_000
    provider_budget = None

    def __init__(self, pattern: str = r"\bM\d+\b") -> None:
        self.pattern = re.compile(pattern)
        self.calls = 0
        self.twice: list[str] = []

    async def complete(self, request: ChatRequest) -> ModelResponse:
        self.calls += 1
        text = "\n".join(str(m.get("content") or "") for m in request.messages)
        found = self.pattern.findall(text)
        self.twice += sorted({m for m in found if found.count(m) > 1})
        return ModelResponse(text=" ".join(dict.fromkeys(found)), model=self.name)
