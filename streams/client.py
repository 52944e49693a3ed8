"""The Python client: publish session events and commands, follow summaries.

Keys: every record of a session is keyed by ``SessionKey.kafka_key()``
(``app_name/user_id/session_id`` in UTF-8), so a session's events and commands
land on one partition, in order. A producer with its own key layout passes
``key=`` to :meth:`DistillClient.publish` / :meth:`DistillClient.request_summary`:
any non-null key works, as long as every record of a session carries the same
one (the worker dead-letters a record of a session with another key). The producer is idempotent (``acks=all``,
``enable_idempotence``): a retried send is never duplicated on the broker.

    async with DistillClient(settings) as client:
        await client.publish(event)
        summary = await client.request_summary(event.session_key, timeout=30)  # None: no summary yet
        async for s in client.summaries(session=event.session_key):
            ...
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from pydantic import BaseModel, ValidationError

from schemas import EpochAdopted, SessionKey, SessionSummary, SummarizeSync, SummaryFailure, SummaryReply
from schemas.commands import NOTHING_TO_SUMMARIZE_CLASSES
from schemas.records import EventTopicRecord, non_finite_number
from schemas.settings import Settings
from streams.app.decoding import decode_summary_record
from streams.clients.kafka_config import consumer_kwargs, producer_kwargs
from streams.errors import DistillError, NonFiniteNumberError, RecordTooLargeError

log = logging.getLogger(__name__)


def is_nothing_to_summarize(failure: SummaryFailure) -> bool:
    """Whether ``failure`` only says there was nothing to summarize (not a real failure).

    See :data:`schemas.commands.NOTHING_TO_SUMMARIZE_CLASSES`.
    """
    return failure.error_class in NOTHING_TO_SUMMARIZE_CLASSES


class SummaryUnavailableError(DistillError):
    """A ``summarize_sync`` failed for real (``failure`` says why).

    Not raised when there was only nothing to summarize: :meth:`DistillClient.request_summary`
    then returns ``None``.
    """

    def __init__(self, failure: SummaryFailure) -> None:
        super().__init__(f"{failure.error_class}: {failure.reason}")
        self.failure = failure


class SummaryTimeoutError(DistillError):
    """No answer to a ``summarize_sync`` within the timeout."""


def encoded_within(record: EventTopicRecord, limit: int) -> bytes:
    """``record``'s JSON, within the record limit ``limit`` (else ``RecordTooLargeError``: the worker would
    refuse it while the broker, whose topics take a little more, stored it for the other stages)."""
    value = encode_record(record)
    if len(value) > limit:
        raise RecordTooLargeError(_named(record), len(value), limit)
    return value


class DistillClient:
    """Producer of events/commands and consumer of the summaries topic."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._producer: AIOKafkaProducer | None = None

    async def __aenter__(self) -> DistillClient:
        await self.start()
        return self

    async def __aexit__(
        self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        if self._producer is None:
            self._producer = AIOKafkaProducer(**producer_kwargs(self.settings.kafka))
            await self._producer.start()

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    @property
    def producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise DistillError("DistillClient is not started (use 'async with DistillClient(settings)')")
        return self._producer

    async def publish(self, record: EventTopicRecord, *, key: bytes | None = None) -> tuple[int, int]:
        """Send one event or command (with the session's record ``key``, default the canonical one);
        returns its ``(partition, offset)`` once acknowledged."""
        md = await self.producer.send_and_wait(
            self.settings.topics.events, self._value(record), key=_key(record) if key is None else key
        )
        return md.partition, md.offset

    async def publish_many(self, records: Iterable[EventTopicRecord]) -> int:
        """Send many records (pipelined, in order per session); returns how many were acknowledged."""
        return len(await self.publish_logged(records))

    async def publish_logged(
        self, records: Iterable[EventTopicRecord], *, encoded: Sequence[bytes] | None = None
    ) -> list[int]:
        """:meth:`publish_many`, returning each record's offset in the events topic, in order: its place in
        its session's log (every record of a session shares one partition).

        ``encoded``: each record's value as :func:`encoded_within` made it, for a caller that checked the
        records against the limit already (``None``: they are encoded and checked here)."""
        # A record that cannot be sent (too large, a NaN) stops all before any is sent.
        if encoded is None:
            sent = [(self._value(r), _key(r)) for r in records]
        else:
            sent = [(value, _key(r)) for r, value in zip(records, encoded, strict=True)]
        futures = [await self.producer.send(self.settings.topics.events, value, key=key) for value, key in sent]
        return [(await future).offset for future in futures]

    async def publish_raw(self, key: bytes | None, value: bytes) -> tuple[int, int]:
        """Send bytes as they are (tests, ``distill publish`` of pre-validated lines)."""
        md = await self.producer.send_and_wait(self.settings.topics.events, value, key=key)
        return md.partition, md.offset

    def _value(self, record: EventTopicRecord) -> bytes:
        return encoded_within(record, self.settings.kafka.max_record_bytes)

    async def summaries(
        self,
        session: SessionKey | None = None,
        *,
        from_beginning: bool = False,
        include_failures: bool = False,
    ) -> AsyncIterator[SessionSummary | SummaryFailure]:
        """Follow the summaries topic (optionally one session's), from now or from the beginning.

        Replies to ``request_summary`` calls (``SummaryReply``) are left out: they are
        answers naming a summary already published, never a new one.
        """
        consumer = await self._follower(from_beginning)
        try:
            async for record in _records(consumer, session, include_failures):
                if not isinstance(record, SummaryReply):
                    yield record
        finally:
            await consumer.stop()

    async def _follower(self, from_beginning: bool) -> AIOKafkaConsumer:
        """A started consumer assigned every summaries partition, positioned before returning."""
        topic = self.settings.topics.summaries
        consumer = AIOKafkaConsumer(**consumer_kwargs(self.settings.kafka), group_id=None, enable_auto_commit=False)
        await consumer.start()
        try:
            partitions = await _partitions(consumer, topic)
            tps = [TopicPartition(topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            if from_beginning:
                await consumer.seek_to_beginning(*tps)
            else:
                ends = await consumer.end_offsets(tps)
                for tp in tps:
                    consumer.seek(tp, ends[tp])
        except BaseException:
            await consumer.stop()
            raise
        return consumer

    async def request_summary(
        self,
        session: SessionKey,
        filter_key: str = "",
        *,
        wait: bool = True,
        timeout: float = 60.0,
        force: bool = False,
        model_request: dict[str, Any] | None = None,
        key: bytes | None = None,
    ) -> SessionSummary | None:
        """Send ``summarize_sync`` for exactly ``filter_key`` and (with ``wait``) return the key's summary.

        ``key``: the session's record key when it is not the canonical one (see the module docstring).

        The Go guide's ``CreateSessionSummary``: only that key is summarized (no
        cascade to the full session), and a key the allowlist refuses is a
        no-op. With the default ``force=False`` this is the same-run
        (intra-run) path, which calls it with ``force=false``: the configured
        thresholds apply. ``force=True`` bypasses them (but never an empty
        delta).

        Like Go's call, it waits for the key's running job: the answer comes once
        every job decided for the key before the request is answered. It is the
        summary of the job the request fired, else the key's latest summary then:
        the one covering the requested events when a job was due for them (one in
        flight, or they were already summarized: a forced request then makes no
        second summary), else (thresholds not met) the newest there is, covering
        up to its boundary. Several requests for one round join its one job: an
        agent asking before every model call of a run but the first (the Go
        guide's ``WithSyncSummaryIntraRun``) costs no job per tool result beyond
        the one each boundary gets.

        Returns ``None`` without ``wait``, and when the key has no summary and
        none was due (thresholds not met, no events, a refused key: see
        :func:`is_nothing_to_summarize`). Raises :class:`SummaryUnavailableError`
        when summarizing failed for real (the model call, or the job the request
        waited for: ``failure.reason`` names it) and :class:`SummaryTimeoutError`
        when no answer comes within ``timeout``.
        """
        correlation = uuid.uuid4().hex
        command = SummarizeSync(
            app_name=session.app_name, user_id=session.user_id, session_id=session.session_id,
            command_id=correlation, reply_to=correlation, filter_key=filter_key, force=force,
            model_request=model_request,
        )  # fmt: skip
        if not wait:
            await self.publish(command, key=key)
            return None
        consumer = await self._follower(from_beginning=False)
        try:
            await self.publish(command, key=key)
            reply = await asyncio.wait_for(_first_reply(_records(consumer, session, True), command), timeout)
        except TimeoutError as exc:
            raise SummaryTimeoutError(f"no answer to summarize_sync {correlation} within {timeout}s") from exc
        finally:
            await consumer.stop()
        if isinstance(reply, SessionSummary):
            return reply
        if isinstance(reply, SummaryReply):
            return reply.summary
        if is_nothing_to_summarize(reply):
            log.debug(
                "summarize_sync answered: nothing to summarize",
                extra={"filter_key": filter_key, "reason": reply.reason},
            )  # fmt: skip
            return None
        raise SummaryUnavailableError(reply)


Answer = SessionSummary | SummaryFailure | SummaryReply
"""A record of the summaries topic that can answer a request (an epoch switch answers none)."""


def answers(record: Answer, command: SummarizeSync) -> bool:
    """Whether ``record`` answers ``command``: its ``reply_to``, session and filter key."""
    return (
        record.reply_to == command.reply_to
        and record.filter_key == command.filter_key
        and (record.app_name, record.user_id, record.session_id)
        == (command.app_name, command.user_id, command.session_id)
    )


async def _first_reply(stream: AsyncIterator[Answer], command: SummarizeSync) -> Answer:
    async for record in stream:
        if answers(record, command):
            return record
    raise SummaryTimeoutError("summaries stream ended")


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    for _ in range(50):
        found = consumer.partitions_for_topic(topic)
        if found:
            return set(found)
        await consumer._client.force_metadata_update()
        await asyncio.sleep(0.1)
    raise DistillError(f"topic {topic} not found (run 'distill init')")


async def _records(
    consumer: AIOKafkaConsumer, session: SessionKey | None, include_failures: bool
) -> AsyncIterator[Answer]:
    """Decoded records of the summaries topic but epoch switches; a malformed one is skipped (WARNING with its
    coordinates).

    ``session``: that session's records only, by their ids (a summary carries its session's
    own record key, which need not be the canonical one).
    """
    async for msg in consumer:
        if msg.value is None:
            continue
        try:
            record = decode_summary_record(msg.value)
        except (ValueError, ValidationError) as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            log.warning(
                "malformed record on the summaries topic skipped",
                extra={"topic": msg.topic, "partition": msg.partition, "offset": msg.offset,
                       "error_class": type(exc).__name__},
            )  # fmt: skip
            continue
        if isinstance(record, EpochAdopted):
            continue  # an epoch switch: the summaries it serves were published before, on their own line
        if isinstance(record, SummaryFailure) and not include_failures:
            continue
        if session is not None and (record.app_name, record.user_id, record.session_id) != session:
            continue
        yield record


def _key(record: EventTopicRecord) -> bytes:
    return record.session_key.kafka_key()


def _named(record: EventTopicRecord) -> str:
    """How an error names ``record``: its type and id (never its content)."""
    ident = getattr(record, "event_id", None) or getattr(record, "command_id", None)
    return f"{record.type} {ident!r} of session {'/'.join(record.session_key)}"


def encode_record(record: BaseModel) -> bytes:
    """``record``'s JSON as the client sends it (its size is what ``kafka.max_record_bytes`` bounds);
    ``NonFiniteNumberError`` naming the field when it holds a NaN or an Infinity."""
    found = non_finite_number(record)
    if found is not None:
        raise NonFiniteNumberError(*found)
    return record.model_dump_json(exclude_none=True).encode()
