"""Dead letters: records distill could not process, with the reason."""

from __future__ import annotations

from datetime import datetime

from schemas.base import SCHEMA_VERSION, ContractModel


class DeadLetter(ContractModel):
    """A rejected record: its raw bytes (base64), coordinates and the reason."""

    schema_version: int = SCHEMA_VERSION
    source_topic: str
    source_partition: int
    source_offset: int
    key_b64: str | None = None
    value_b64: str
    error_class: str
    reason: str
    stage: str
    failed_at: datetime
