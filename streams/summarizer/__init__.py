"""The summarizer: from a previous summary and the events after its boundary to the next summary.

Pure request building (conversation text, selection, prompts, budgets,
forking, hooks, reports) plus one adapter to the LLM (``openai_adapter``,
the only module importing ``openai``) and an embedded extractive default.
"""

from streams.summarizer.conversation import ConversationFormatter
from streams.summarizer.dynamic import DynamicSummarizer
from streams.summarizer.extractive import EXTRACTIVE_MODEL_NAME, ExtractiveModel
from streams.summarizer.factory import build_model, build_summarizer, validate_summarizers
from streams.summarizer.fork import skip_cascade_after_fork
from streams.summarizer.hooks import SummaryHooks
from streams.summarizer.model import ContextLengthError, ModelResponse, ModelUsage, SummaryModel
from streams.summarizer.plan import PreviousSummaryTooLargeError, SourceTooLargeError
from streams.summarizer.prompts import PromptError, PromptSet, build_prompts
from streams.summarizer.summarizer import (
    CutOffSummaryError,
    EmptySummaryError,
    Summarizer,
    SummarizerLike,
    SummaryResult,
    SummarySkipped,
)

__all__ = [
    "EXTRACTIVE_MODEL_NAME",
    "ContextLengthError",
    "ConversationFormatter",
    "CutOffSummaryError",
    "DynamicSummarizer",
    "EmptySummaryError",
    "ExtractiveModel",
    "ModelResponse",
    "ModelUsage",
    "PreviousSummaryTooLargeError",
    "PromptError",
    "PromptSet",
    "SourceTooLargeError",
    "Summarizer",
    "SummarizerLike",
    "SummaryHooks",
    "SummaryModel",
    "SummaryResult",
    "SummarySkipped",
    "build_model",
    "build_prompts",
    "build_summarizer",
    "skip_cascade_after_fork",
    "validate_summarizers",
]
