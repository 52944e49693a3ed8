"""Typed errors of distill. Adapters translate driver and SDK errors into these."""

from __future__ import annotations


class DistillError(Exception):
    """Root of every error distill raises on purpose."""


class ConfigurationError(DistillError):
    """Invalid configuration: fatal at startup."""


class InvalidRecordError(DistillError):
    """A record that can never be processed: goes to the dead-letter topic."""


class NonFiniteNumberError(InvalidRecordError, ValueError):
    """A record to publish holds a float NaN or ±Infinity (at ``path``): JSON cannot carry it.

    Raised before anything is sent; serialized, the number would silently become ``null``.
    """

    def __init__(self, path: str, value: float) -> None:
        super().__init__(
            f"{path} is {value!r}: JSON has no NaN or Infinity (it would be published as null); "
            "send a finite number or a string, or leave the field out"
        )
        self.path = path
        self.value = value


class RecordTooLargeError(InvalidRecordError, ValueError):
    """A record to publish is larger, as UTF-8 JSON, than ``KafkaSettings.max_record_bytes``.

    Raised before anything is sent: the worker would refuse the record (a dead letter) while the
    broker, whose topics take a little more, stored it for the other stages.
    """

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            f"{what} is {size} bytes as JSON, over the record limit of {limit} bytes (kafka.max_record_bytes): "
            "cut or store the payload elsewhere and publish a reference to it"
        )
        self.size = size
        self.limit = limit


class RetryableError(DistillError):
    """A transient failure (LLM 429/5xx, timeouts, Cassandra unavailable)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(DistillError):
    """A failure that retrying will not fix."""


class ServiceError(DistillError):
    """A local service (Kafka, Cassandra) could not be started, stopped or reached."""
