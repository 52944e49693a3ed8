"""Operating summary epochs: numbering replay runs, reading an epoch's heads, asking sessions to switch.

* A replay run builds epoch N into ``<summaries>.replay-eN-<time>-<id>``: the
  topic names are the register of epochs (:func:`replay_epochs`). A new run
  claims its number first (:func:`claim_epoch`): it creates the empty topic
  ``<summaries>.epoch-claim-eN`` for the highest number taken + 1, and Kafka
  creates a topic once, so of two runs started at the same moment one gets N
  and the other (its create answered ``TopicAlreadyExists``) tries N + 1.
* A session that adopted epoch N is served from a line the live worker
  continues with its own versions: resuming the run of N must not write more
  of that session (:func:`adopted_sessions` finds them on the summaries topic).
* :func:`epoch_heads` reads an epoch's topic: per session the latest summary of
  each key (and the events offset its header names), with the record key and
  the partition the session lives on.
* :func:`request_adoptions` sends one ``adopt_epoch`` command per session (on
  the events topic, with the session's own record key and partition, ordered
  with its events) and collects the answers from the summaries topic: an
  ``EpochAdopted``, or a ``SummaryFailure`` saying why not (``schemas.epochs``).

Records are read and written with aiokafka; :func:`collect_heads`, :func:`epoch_numbers`,
:func:`claim_first_free` (given its create) and :func:`sessions_adopting` are pure.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

from schemas import AdoptedHead, AdoptEpoch, EpochAdopted, SessionKey, SessionSummary, SummaryFailure
from schemas.settings import Settings
from streams.app.decoding import decode_summary_record
from streams.app.headers import EVENTS_OFFSET, header_int
from streams.clients.kafka_config import common_kwargs, consumer_kwargs, producer_kwargs
from streams.clients.topic_reader import read_to_end
from streams.errors import DistillError

_RUN = re.compile(r"^e(\d+)-")
_CLAIM = re.compile(r"^e(\d+)$")
CLAIM_ATTEMPTS = 1000
"""Numbers :func:`claim_epoch` tries past the highest taken before giving up."""


class EpochClaimError(DistillError):
    """No epoch number could be claimed (Kafka refused the claim topic, or every number tried was taken)."""


def run_epoch(run_id: str) -> int | None:
    """The epoch a run id names (``e3-20260101120000-042`` → 3); ``None``: a run from before epochs."""
    match = _RUN.match(run_id)
    return int(match.group(1)) if match else None


TAIL_RUN_SUFFIX = "-tail"
"""Ends the id of a ``distill replay --from-latest`` run (see :func:`is_tail_run`)."""


def new_run_id(epoch: int, *, from_latest: bool = False) -> str:
    """A run id naming its epoch (and, for a ``--from-latest`` run, saying so: :func:`is_tail_run`)."""
    return f"e{epoch}-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:4]}{TAIL_RUN_SUFFIX if from_latest else ''}"


def is_tail_run(run_id: str) -> bool:
    """Whether the run read only the records that arrived after it started (``--from-latest``).

    Its summaries of a session that already had events roll forward nothing of what came before
    (the run's first pass of the session starts at its first record *after* the start), so its
    epoch is never switched to: it would serve a chain without that history and cut it from the
    request at the chain's boundary. The live worker refuses such a switch by itself too, from the
    chains' starts (``streams.app.epochs.missing_history``); this check stays for the epochs whose
    summaries were built before they recorded their chain's start (``chain_from_offset``).
    """
    return run_id.endswith(TAIL_RUN_SUFFIX)


async def _topic_names(settings: Settings) -> list[str]:
    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await admin.start()
    try:
        return list(await admin.list_topics())
    finally:
        await admin.close()


async def replay_epochs(settings: Settings) -> dict[int, list[str]]:
    """Epoch → the replay output topics that built it (a resumed run keeps its topic)."""
    prefix = f"{settings.topics.summaries}.replay-"
    out: dict[int, list[str]] = {}
    for name in sorted(await _topic_names(settings)):
        if name.startswith(prefix):
            epoch = run_epoch(name[len(prefix) :])
            if epoch is not None:
                out.setdefault(epoch, []).append(name)
    return out


def claim_topic(summaries: str, epoch: int) -> str:
    """The topic whose creation claims ``epoch`` (empty: its existence is the claim)."""
    return f"{summaries}.epoch-claim-e{epoch}"


def epoch_numbers(names: Iterable[str], summaries: str) -> set[int]:
    """The epochs taken among topic ``names``: claimed, or built by a run (runs from before claims)."""
    runs, claims = f"{summaries}.replay-", f"{summaries}.epoch-claim-"
    out: set[int] = set()
    for name in names:
        if name.startswith(runs):
            epoch = run_epoch(name[len(runs) :])
        elif name.startswith(claims):
            match = _CLAIM.match(name[len(claims) :])
            epoch = int(match.group(1)) if match else None
        else:
            continue
        if epoch is not None:
            out.add(epoch)
    return out


async def next_epoch(settings: Settings) -> int:
    """The number the next replay would try to claim (epoch 0 is the live line); see :func:`claim_epoch`."""
    return max(epoch_numbers(await _topic_names(settings), settings.topics.summaries), default=0) + 1


async def claim_first_free(taken: Iterable[int], create: Callable[[int], Awaitable[bool]],
                           attempts: int = CLAIM_ATTEMPTS) -> int:  # fmt: skip
    """The first epoch after ``taken`` whose ``create`` (an atomic create-if-absent) succeeded.

    ``create(n)`` is ``False`` when ``n`` was claimed first by someone else:
    the next number is tried, so concurrent claimers end on distinct numbers.
    """
    start = max(taken, default=0) + 1
    for epoch in range(start, start + attempts):
        if await create(epoch):
            return epoch
    raise EpochClaimError(f"epochs {start}..{start + attempts - 1} are all claimed")


async def claim_epoch(settings: Settings) -> int:
    """Claim the next epoch number for a new replay run: only one run gets each number."""
    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    summaries = settings.topics.summaries

    async def create(epoch: int) -> bool:
        topic = NewTopic(claim_topic(summaries, epoch), 1, settings.topics.replication_factor)
        response = await admin.create_topics([topic])
        for _, code, message in response.topic_errors:
            if code == TopicAlreadyExistsError.errno:
                return False
            if code:
                raise EpochClaimError(f"claiming epoch {epoch} ({topic.name}): {for_code(code).__name__}: {message}")
        return True

    try:
        await admin.start()
        return await claim_first_free(epoch_numbers(await admin.list_topics(), summaries), create)
    except KafkaError as exc:
        raise EpochClaimError(f"claiming an epoch at {settings.kafka.bootstrap_servers}: {exc}") from exc
    finally:
        await admin.close()


def sessions_adopting(records: Iterable[RawRecord], epoch: int) -> set[SessionKey]:
    """The sessions an ``EpochAdopted`` of ``epoch`` among ``records`` switched (even if they left it since:
    the live worker continued their line of ``epoch`` while served from it)."""
    out: set[SessionKey] = set()
    for _, _, value, _ in records:
        if value is None or b"epoch_adopted" not in value:
            continue
        try:
            record = decode_summary_record(value)
        except ValueError:
            continue
        if isinstance(record, EpochAdopted) and record.epoch == epoch:
            out.add(record.session_key)
    return out


def write_excluded(path: Path, sessions: Iterable[SessionKey]) -> None:
    """Write the sessions a replay worker must not summarize (``distill worker --replay-exclude-file``)."""
    path.write_text(json.dumps(sorted([list(k) for k in sessions])))


def read_excluded(path: str | Path) -> frozenset[SessionKey]:
    return frozenset(SessionKey(*k) for k in json.loads(Path(path).read_text()))


async def adopted_sessions(settings: Settings, epoch: int) -> set[SessionKey]:
    """The sessions that adopted ``epoch`` (the live summaries topic records every switch)."""
    return sessions_adopting(await read_topic(settings, settings.topics.summaries), epoch)


@dataclass
class SessionHeads:
    """One session's heads in an epoch, and where its records live."""

    key: SessionKey
    record_key: bytes
    partition: int
    heads: dict[str, AdoptedHead] = field(default_factory=dict)


RawRecord = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]
"""``(partition, record key, value, headers)`` of a summaries-topic record."""


def collect_heads(records: Iterable[RawRecord], accept: Callable[[SessionKey], bool] | None = None
                  ) -> dict[SessionKey, SessionHeads]:  # fmt: skip
    """Per session the latest summary of each key among ``records`` (other records are skipped)."""
    out: dict[SessionKey, SessionHeads] = {}
    for partition, key, value, headers in records:
        if value is None:
            continue
        try:
            record = decode_summary_record(value)
        except ValueError:
            continue
        if not isinstance(record, SessionSummary) or (accept is not None and not accept(record.session_key)):
            continue
        found = out.get(record.session_key)
        if found is None:
            found = out[record.session_key] = SessionHeads(record.session_key, key or record.session_key.kafka_key(),
                                                           partition)  # fmt: skip
        current = found.heads.get(record.filter_key)
        if current is None or current.summary.version < record.version:
            offset = header_int(headers, EVENTS_OFFSET)
            found.heads[record.filter_key] = AdoptedHead(summary=record, events_offset=offset)
    return out


async def read_topic(settings: Settings, topic: str) -> list[RawRecord]:
    """Every record of ``topic`` up to its end now."""
    # Replay outputs are co-partitioned with the events topic (created with its partition count).
    records = await read_to_end(settings.kafka, topic, settings.topics.partitions)
    return [(m.partition, m.key, m.value, list(m.headers or ())) for m in records]


async def epoch_heads(
    settings: Settings, epoch: int, accept: Callable[[SessionKey], bool] | None = None
) -> dict[SessionKey, SessionHeads]:
    """The heads of ``epoch`` as its replay runs left them (epoch 0: the sessions of every run, no heads)."""
    topics = await replay_epochs(settings)
    names = [n for e, found in topics.items() for n in found] if epoch == 0 else topics.get(epoch, [])
    records = [r for name in names for r in await read_topic(settings, name)]
    found = collect_heads(records, accept)
    if epoch == 0:  # a switch back: the worker holds the heads the session left on epoch 0
        for heads in found.values():
            heads.heads.clear()
    return found


async def tail_runs(settings: Settings, epoch: int) -> list[str]:
    """The output topics of ``epoch`` that a ``--from-latest`` run wrote (:func:`is_tail_run`).

    Such an epoch holds only what arrived after its run started: a session is switched to it
    only where its worker shows that the session began after that (``require_known_start``).
    """
    if epoch == 0:
        return []
    prefix = f"{settings.topics.summaries}.replay-"
    return [n for n in (await replay_epochs(settings)).get(epoch, []) if is_tail_run(n[len(prefix) :])]


Answer = EpochAdopted | SummaryFailure


async def request_adoptions(
    settings: Settings, epoch: int, sessions: Iterable[SessionHeads], *, require_caught_up: bool, source: str = "",
    timeout: float = 60.0, require_known_start: bool = False,
) -> dict[SessionKey, Answer | None]:  # fmt: skip
    """Ask each session's worker to switch to ``epoch``; the answers (``None``: none within ``timeout``)."""
    todo = list(sessions)
    batch = uuid.uuid4().hex[:12]
    commands = {
        f"adopt-{batch}-{i}": (s, AdoptEpoch(
            app_name=s.key.app_name, user_id=s.key.user_id, session_id=s.key.session_id,
            command_id=f"adopt-{batch}-{i}", reply_to=f"adopt-{batch}-{i}", epoch=epoch,
            heads=tuple(h for _, h in sorted(s.heads.items())), require_caught_up=require_caught_up, source=source,
            require_known_start=require_known_start,
        ))
        for i, s in enumerate(todo)
    }  # fmt: skip
    answers: dict[SessionKey, Answer | None] = {s.key: None for s in todo}
    if not todo:
        return answers
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), enable_auto_commit=False, group_id=None)
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await consumer.start()
    await producer.start()
    try:
        tps = [TopicPartition(settings.topics.summaries, p) for p in range(settings.topics.partitions)]
        consumer.assign(tps)
        for tp, end in (await consumer.end_offsets(tps)).items():
            consumer.seek(tp, end)  # only answers to the commands sent below
        sent = [await producer.send(settings.topics.events, command.model_dump_json().encode(),
                                    key=s.record_key, partition=s.partition)
                for s, command in commands.values()]  # fmt: skip
        await asyncio.gather(*sent)
        deadline = time.monotonic() + timeout
        waiting = set(commands)
        while waiting and time.monotonic() < deadline:
            batch_ = await consumer.getmany(timeout_ms=500)
            for messages in batch_.values():
                for msg in messages:
                    answer = _answer(msg.value)
                    if answer is not None and answer.reply_to in waiting:
                        waiting.discard(answer.reply_to)
                        answers[commands[answer.reply_to][0].key] = answer
    finally:
        await producer.stop()
        await consumer.stop()
    return answers


def _answer(value: bytes | None) -> Answer | None:
    if value is None:
        return None
    try:
        record = decode_summary_record(value)
    except ValueError:
        return None
    return record if isinstance(record, EpochAdopted | SummaryFailure) else None


__all__ = [
    "EpochClaimError", "SessionHeads", "adopted_sessions", "claim_epoch", "claim_first_free",
    "claim_topic", "collect_heads", "epoch_heads", "epoch_numbers", "is_tail_run", "new_run_id", "next_epoch",
    "read_excluded", "replay_epochs", "request_adoptions", "run_epoch", "sessions_adopting", "tail_runs",
    "write_excluded",
]  # fmt: skip


async def start_group_at_end(settings: Settings, group: str, topic: str) -> dict[int, int]:
    """Commit ``topic``'s end offsets for ``group`` where it has none yet; returns ``{partition: start}``.

    A replay ``--from-latest`` reads only what arrives after its start: its fresh group starts at the
    offsets of that moment (committed here, before its worker joins) rather than at wherever "latest"
    is when the worker's assignment comes (records between the two would be skipped), and its
    progress counts from them (with nothing committed a run never looked done). A partition the
    group already committed (a resumed run) keeps its offset.
    """
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not parts:
            parts = [TopicPartition(topic, p) for p in range(settings.topics.partitions)]
        consumer.assign(parts)
        ends = await consumer.end_offsets(parts)
        committed = {tp: await consumer.committed(tp) for tp in parts}
        fresh = {tp: ends[tp] for tp in parts if committed[tp] is None}
        if fresh:
            await consumer.commit(fresh)
        return {tp.partition: committed[tp] if committed[tp] is not None else ends[tp] for tp in parts}
    finally:
        await consumer.stop()
