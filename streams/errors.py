"""Typed errors of distill. Adapters translate driver and SDK errors into these."""

from __future__ import annotations


class DistillError(Exception):
    """Root of every error distill raises on purpose."""


class ConfigurationError(DistillError):
    """Invalid configuration: fatal at startup."""


class InvalidRecordError(DistillError):
    """A record that can never be processed: goes to the dead-letter topic."""


class RetryableError(DistillError):
    """A transient failure (LLM 429/5xx, timeouts, Cassandra unavailable)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(DistillError):
    """A failure that retrying will not fix."""


class ServiceError(DistillError):
    """A local service (Kafka, Cassandra) could not be started, stopped or reached."""
