"""A real HTTP server speaking the OpenAI embeddings API, with deterministic vectors.

``POST /v1/embeddings`` answers every input with a hashed bag of words: each
lower-cased word (after the optional ``synonyms`` mapping) adds ±1 to one of
``dimensions`` coordinates chosen by a stable hash, and the vector is L2
normalized. Texts sharing words are therefore close under cosine similarity
and texts sharing none are (nearly) orthogonal, which makes ``ANN OF``
results predictable. A small constant component keeps every vector non-zero
(Cassandra refuses zero vectors under cosine similarity). Both
``encoding_format`` values are served (``float`` and ``base64``, the latter
being the ``openai`` client's default). Requests are recorded in ``requests``.

    with EmbeddingsServer(synonyms={"automobile": "car"}) as server:
        ...  # AsyncOpenAI(base_url=server.base_url, api_key="k").embeddings.create(...)
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.support.threaded_server import ThreadedServer

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def hashed_bag_of_words(text: str, dimensions: int, synonyms: Mapping[str, str] | None = None) -> list[float]:
    """The deterministic unit vector of ``text`` (see the module docstring)."""
    vector = [0.0] * dimensions
    vector[0] = 1e-3
    for word in _WORD.findall(text.lower()):
        word = (synonyms or {}).get(word, word)
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        vector[1 + value % (dimensions - 1)] += 1.0 if (value >> 63) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector]


@dataclass(frozen=True)
class EmbeddingRequest:
    """One received request: the inputs, model, dimensions, encoding and the client's headers."""

    inputs: list[str]
    model: str
    dimensions: int
    encoding_format: str
    authorization: str | None
    user_agent: str | None


class EmbeddingsServer(ThreadedServer):
    """``POST /v1/embeddings`` on 127.0.0.1 with an ephemeral port, served from a background thread."""

    path = "/v1/embeddings"
    thread_name = "embeddings-test-server"

    def __init__(self, *, synonyms: Mapping[str, str] | None = None, default_dimensions: int = 1536) -> None:
        self.synonyms = dict(synonyms or {})
        self.default_dimensions = default_dimensions
        self.requests: list[EmbeddingRequest] = []
        self.fail_next = 0
        self._lock = threading.Lock()
        super().__init__()

    def vector(self, text: str, dimensions: int) -> list[float]:
        """The vector this server returns for ``text``."""
        return hashed_bag_of_words(text, dimensions, self.synonyms)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        raw = body.get("input")
        inputs = [raw] if isinstance(raw, str) else list(raw or [])
        if not inputs or not all(isinstance(t, str) and t for t in inputs):
            return _error(400, "'input' must be a non-empty string or a list of non-empty strings")
        dimensions = int(body.get("dimensions") or self.default_dimensions)
        if dimensions < 2:
            return _error(400, "'dimensions' must be at least 2")
        encoding = body.get("encoding_format") or "float"
        with self._lock:
            self.requests.append(
                EmbeddingRequest(inputs, str(body.get("model")), dimensions, encoding,
                                 request.headers.get("Authorization"), request.headers.get("User-Agent"))
            )  # fmt: skip
            if self.fail_next > 0:
                self.fail_next -= 1
                return _error(503, "scripted outage", "server_error")
        data: list[dict[str, Any]] = []
        for index, text in enumerate(inputs):
            vec = self.vector(text, dimensions)
            embedding: Any = (
                base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode() if encoding == "base64" else vec
            )
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(len(t.split()) for t in inputs)
        return web.json_response(
            {"object": "list", "data": data, "model": body.get("model"),
             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        )  # fmt: skip


def _error(status: int, message: str, type_: str = "invalid_request_error") -> web.Response:
    return web.json_response({"error": {"message": message, "type": type_, "param": None, "code": None}},
                             status=status)  # fmt: skip
