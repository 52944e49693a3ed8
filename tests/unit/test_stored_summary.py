"""A summary read back from storage: a newer build's unknown fields are ignored there, and only there."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from schemas import SessionSummary
from schemas.summaries import stored_summary
from tests.unit.context.sessions import summary_at


def newer_row() -> str:
    """A ``summary_json`` as a newer projector writes it: a field this build does not know."""
    data = json.loads(summary_at(None, "摘要：用户问了X").model_dump_json())
    return json.dumps({**data, "field_of_a_newer_build": {"x": 1}})


def test_a_stored_summary_with_a_field_of_a_newer_build_is_read() -> None:
    read = stored_summary(newer_row())
    assert (read.summary, read.version) == ("摘要：用户问了X", 1)
    assert read == stored_summary(summary_at(None, "摘要：用户问了X").model_dump_json())


def test_a_summary_from_the_topic_is_still_refused_with_an_unknown_field() -> None:
    # Workers and projectors carry the record forward or write it: a dropped field would be lost.
    with pytest.raises(ValidationError, match="field_of_a_newer_build"):
        SessionSummary.model_validate_json(newer_row())


def test_a_stored_summary_is_still_validated() -> None:
    data = {**json.loads(newer_row()), "version": 0}
    with pytest.raises(ValidationError, match="version"):
        stored_summary(json.dumps(data))
