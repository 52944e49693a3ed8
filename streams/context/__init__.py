"""Agent-side context assembly: from stored events and summaries to the next model request.

Pure code: no Kafka, Cassandra, Faust or OpenAI imports anywhere in this package.
"""

from streams.context.assembly import AssembledRequest, AssemblyOptions, AssemblyReport, NothingToSendError, assemble
from streams.context.compaction import CompactionConfig, CompactionStats
from streams.context.from_read import HistoryNotReadError, ReadKeyMismatch, assemble_from_read, needs_full_history
from streams.context.injection import InjectionMode, SummaryFormatter
from streams.context.recall_tools import (
    RecallCapabilities,
    RecallExecutor,
    RecallReader,
    recall_tools,
    usage_note,
)
from streams.context.validity import InvalidMessages, assert_valid, find_violations

__all__ = [
    "AssembledRequest",
    "AssemblyOptions",
    "AssemblyReport",
    "CompactionConfig",
    "CompactionStats",
    "HistoryNotReadError",
    "InjectionMode",
    "InvalidMessages",
    "NothingToSendError",
    "ReadKeyMismatch",
    "RecallCapabilities",
    "RecallExecutor",
    "RecallReader",
    "SummaryFormatter",
    "assemble",
    "assemble_from_read",
    "assert_valid",
    "find_violations",
    "needs_full_history",
    "recall_tools",
    "usage_note",
]
