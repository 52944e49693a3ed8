"""Typed errors of the trigger engine (see :mod:`streams.errors`).

Each also subclasses ``ValueError``, which these conditions raised before, so
existing ``except ValueError`` handlers keep working.
"""

from __future__ import annotations

from streams.errors import ConfigurationError, InvalidRecordError, PermanentError


class RuleConfigurationError(ConfigurationError, ValueError):
    """An invalid trigger option: a threshold, a counter divisor, a context window."""


class CorruptTriggerStateError(InvalidRecordError, ValueError):
    """Stored trigger-state bytes (a table changelog record) that cannot be read back."""


class InvalidDecisionError(PermanentError, ValueError):
    """A job was asked for a decision that does not fire (a caller bug)."""
