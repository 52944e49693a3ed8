"""aiokafka client arguments derived from ``KafkaSettings`` (one place for all clients)."""

from __future__ import annotations

from typing import Any

from projections.kafka_metadata import install as _track_sent_topics
from schemas.settings import KafkaSettings


def common_kwargs(settings: KafkaSettings) -> dict[str, Any]:
    """Bootstrap servers, security protocol and SASL credentials.

    Every client built from these keeps the metadata of the topics it sends to (a producer's queued
    batch lost its partition's leader for good otherwise: see :mod:`projections.kafka_metadata`), so
    building them installs that in the process: at startup, not at import.
    """
    _track_sent_topics()
    kwargs: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_list,
        "security_protocol": settings.security_protocol,
        "client_id": settings.client_id,
        "request_timeout_ms": int(settings.request_timeout_s * 1000),
    }
    if settings.sasl_mechanism is not None:
        kwargs["sasl_mechanism"] = settings.sasl_mechanism
        kwargs["sasl_plain_username"] = settings.sasl_username
        kwargs["sasl_plain_password"] = settings.sasl_password.get_secret_value() if settings.sasl_password else None
    return kwargs


def producer_kwargs(settings: KafkaSettings) -> dict[str, Any]:
    """An idempotent producer allowed to send records up to ``max_record_bytes``."""
    return {
        **common_kwargs(settings),
        "max_request_size": settings.max_record_bytes + 65536,
        "enable_idempotence": True,
        "acks": "all",
        "compression_type": None,
        "linger_ms": 2,
    }


def consumer_kwargs(settings: KafkaSettings) -> dict[str, Any]:
    """A consumer able to fetch records up to ``max_record_bytes``."""
    return {
        **common_kwargs(settings),
        "max_partition_fetch_bytes": settings.max_record_bytes + 65536,
        "fetch_max_bytes": max(52428800, settings.max_record_bytes + 65536),
    }
