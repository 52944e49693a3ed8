"""The wire contract of distill: every record that crosses a stage boundary.

This package imports nothing of ours. Producers in other languages validate
against the JSON Schemas exported by ``distill schema``.
"""

from schemas.base import SCHEMA_VERSION, ContractModel, ProducerModel, SessionKey, SessionRecord
from schemas.commands import DeleteSession, Summarize, SummarizeSync
from schemas.dead_letter import DeadLetter
from schemas.epochs import ADOPTION_REFUSED, AdoptedHead, AdoptEpoch, EpochAdopted
from schemas.events import ErrorInfo, FunctionCall, Message, SessionEvent, ToolCall, Usage
from schemas.jobs import JobBoundary, SummaryJob
from schemas.records import EventRecord, EventTopicRecord, RecordDecodeError, parse_event_record
from schemas.summaries import (
    CallMode,
    CallReport,
    LengthCut,
    PayloadCut,
    SessionSummary,
    SummaryBoundary,
    SummaryFailure,
    SummaryReply,
    SummaryReport,
    SummaryStats,
    TriggerName,
    TriggerReport,
)

__all__ = [
    "ADOPTION_REFUSED",
    "SCHEMA_VERSION",
    "AdoptEpoch",
    "AdoptedHead",
    "CallMode",
    "CallReport",
    "ContractModel",
    "DeadLetter",
    "DeleteSession",
    "EpochAdopted",
    "ErrorInfo",
    "EventRecord",
    "EventTopicRecord",
    "FunctionCall",
    "JobBoundary",
    "LengthCut",
    "Message",
    "PayloadCut",
    "ProducerModel",
    "RecordDecodeError",
    "SessionEvent",
    "SessionKey",
    "SessionRecord",
    "SessionSummary",
    "Summarize",
    "SummarizeSync",
    "SummaryBoundary",
    "SummaryFailure",
    "SummaryJob",
    "SummaryReply",
    "SummaryReport",
    "SummaryStats",
    "ToolCall",
    "TriggerName",
    "TriggerReport",
    "Usage",
    "parse_event_record",
]
