"""``distill schema``: print the JSON Schema of each public record."""

from __future__ import annotations

import json
from typing import Any

import click
from pydantic import BaseModel, TypeAdapter

from schemas import DeadLetter, EpochAdopted, EventRecord, SessionSummary, SummaryJob
from schemas.summaries import SummaryFailure, SummaryReply

_RECORDS: dict[str, Any] = {
    "event-record": EventRecord,
    "session-summary": SessionSummary,
    "summary-failure": SummaryFailure,
    "summary-reply": SummaryReply,
    "epoch-adopted": EpochAdopted,
    "summary-job": SummaryJob,
    "dead-letter": DeadLetter,
}


def json_schemas() -> dict[str, dict[str, object]]:
    """Name → JSON Schema of every public record."""
    out: dict[str, dict[str, object]] = {}
    for name, model in _RECORDS.items():
        if isinstance(model, type) and issubclass(model, BaseModel):
            out[name] = model.model_json_schema()
        else:
            out[name] = TypeAdapter(model).json_schema()
    return out


@click.command("schema")
@click.argument("record", required=False, type=click.Choice(sorted(_RECORDS)))
def command(record: str | None) -> None:
    """Print the JSON Schema of RECORD (or of every public record)."""
    schemas = json_schemas()
    click.echo(json.dumps(schemas[record] if record else schemas, indent=2, sort_keys=True))
