"""``schemas.base.construct``: ``model_construct``'s very model, built by hand on the track agent's hot path."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr

from schemas import JobBoundary, SessionEvent, SummaryBoundary, SummaryJob, TriggerReport
from schemas.base import ContractModel, construct, copy_with

T = datetime(2026, 1, 1, tzinfo=UTC)


def _job_fields() -> dict[str, Any]:
    return {
        "schema_version": 1,
        "job_id": "j1",
        "app_name": "应用",
        "user_id": "u",
        "session_id": "s",
        "filter_key": "a/b",
        "cascade_full_session": True,
        "from_version": 3,
        "previous_boundary": SummaryBoundary.model_construct(cutoff_at=T, last_event_id="e1", version=1),
        "upto": JobBoundary.model_construct(last_event_id="e9", cutoff_at=T, offset=7),
        "trigger": TriggerReport(name="event_threshold", value=12, threshold=12, unit="events"),
        "force": False,
        "origin": "replay",
        "reply_to": None,
        "model_request": {"messages": []},
        "context_window": 128_000,
        "model_hint": "gpt-4o",
        "summary_context_window": None,
        "attempt": 0,
        "created_at": T,
        "context": {"租户": "甲"},
        "events_from_offset": 0,
        "events_key_b64": None,
    }


def _same(got: BaseModel, expected: BaseModel) -> None:
    assert type(got) is type(expected)
    assert list(got.__dict__.items()) == list(expected.__dict__.items())
    assert got.model_fields_set == expected.model_fields_set
    assert got.__pydantic_extra__ == expected.__pydantic_extra__
    assert got.__pydantic_private__ == expected.__pydantic_private__
    assert got == expected and got.model_dump_json() == expected.model_dump_json()


def test_every_field_in_order_or_all_but_trailing_defaults_builds_model_constructs_model() -> None:
    fields = _job_fields()
    names = list(fields)
    for n in (len(names), len(names) - 1, len(names) - 2):  # the last two default to None
        given = {k: fields[k] for k in names[:n]}
        _same(construct(SummaryJob, **given), SummaryJob.model_construct(**given))
    _same(
        construct(JobBoundary, last_event_id="e", cutoff_at=T),
        JobBoundary.model_construct(last_event_id="e", cutoff_at=T),
    )


def test_any_other_call_is_model_constructs_own() -> None:
    fields = _job_fields()
    shuffled = dict(reversed(list(fields.items())))
    _same(construct(SummaryJob, **shuffled), SummaryJob.model_construct(**shuffled))
    no_context = {k: v for k, v in fields.items() if k not in ("context", "events_from_offset", "events_key_b64")}
    built = construct(
        SummaryJob, **no_context
    )  # a default factory's field left out: filled as model_construct fills it
    _same(built, SummaryJob.model_construct(**no_context))
    assert built.context == {}
    gap = {k: v for k, v in fields.items() if k != "reply_to"}
    _same(construct(SummaryJob, **gap), SummaryJob.model_construct(**gap))


class _Private(ContractModel):
    a: int = 0
    _seen: int = PrivateAttr(default=5)


class _Aliased(ContractModel):
    a: int = Field(default=0, alias="A")


def test_models_with_extra_private_or_aliased_fields_are_left_to_model_construct() -> None:
    event = {"app_name": "a", "user_id": "u", "session_id": "s", "event_id": "e", "timestamp": T, "author": "x"}
    _same(construct(SessionEvent, **event, vendor=1), SessionEvent.model_construct(**event, vendor=1))
    _same(construct(_Private, a=1), _Private.model_construct(a=1))
    _same(construct(_Aliased, A=1), _Aliased.model_construct(A=1))


def test_copy_with_is_model_copys_very_copy() -> None:
    job = SummaryJob.model_validate(_job_fields())
    built = construct(SummaryJob, schema_version=1, job_id="j2", app_name="a", user_id="u", session_id="s",
                      filter_key="", cascade_full_session=False, from_version=0, previous_boundary=None,
                      upto=JobBoundary.model_construct(last_event_id="e9", cutoff_at=T, offset=7),
                      trigger=TriggerReport(name="force"))  # fmt: skip
    for model in (job, built):
        for update in ({}, {"events_from_offset": 4}, {"origin": "retry", "attempt": 2, "reply_to": "r"}):
            copied = copy_with(model, update)
            _same(copied, model.model_copy(update=update))
            assert copied is not model and copied.__dict__ is not model.__dict__
            assert copied.model_fields_set is not model.model_fields_set
    assert job.events_from_offset == 0, "the copied model is left as it was"


def test_copy_with_leaves_models_with_extra_or_private_attributes_to_model_copy() -> None:
    event = SessionEvent.model_validate(
        {"app_name": "a", "user_id": "u", "session_id": "s", "event_id": "e", "timestamp": T, "author": "x",
         "message": {"role": "user", "content": "hi"}, "vendor": 1}
    )  # fmt: skip
    _same(copy_with(event, {"event_id": "e2"}), event.model_copy(update={"event_id": "e2"}))
    private = _Private(a=1)
    _same(copy_with(private, {"a": 2}), private.model_copy(update={"a": 2}))
