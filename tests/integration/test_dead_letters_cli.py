"""``distill dead-letters list | redrive`` against the real Kafka, on isolated topics.

The dead letters are written here with the real producer (the worker's
dead-lettering is tested in ``test_pipeline_core``); the command reads its
settings from the environment, as in production.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from queue import Empty, Queue
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from click.testing import CliRunner, Result

from schemas.dead_letter import DeadLetter
from schemas.settings import Settings
from streams.cli.main import cli
from streams.clients.kafka_config import producer_kwargs
from tests.integration.pipeline_support import DISTILL, ROOT, create_topics, read_topic, worker_env

pytestmark = pytest.mark.integration

SECRET = "MY-SECRET-CONTENT"


@dataclass
class Topic:
    settings: Settings
    letters: dict[str, DeadLetter]

    def env(self) -> dict[str, str | None]:
        """The command's environment: exactly these settings (other DISTILL_* variables removed)."""
        env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("DISTILL_")}
        env.update({k: v for k, v in worker_env(self.settings).items() if k.startswith("DISTILL_")})
        return env

    def run(self, *args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(cli, ["dead-letters", *args], env=self.env(), input=input)


def _letter(topic: str, partition: int, offset: int, error_class: str, stage: str, value: bytes, key: bytes | None,
            ago: timedelta, reason: str = "rejected") -> DeadLetter:  # fmt: skip
    return DeadLetter(
        source_topic=topic, source_partition=partition, source_offset=offset,
        key_b64=base64.b64encode(key).decode() if key is not None else None,
        value_b64=base64.b64encode(value).decode(), error_class=error_class, reason=reason, stage=stage,
        failed_at=datetime.now(UTC) - ago,
    )  # fmt: skip


async def _produce(settings: Settings, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(settings.topics.dead_letters, value, key=b"dlq-test")
    finally:
        await producer.stop()


@pytest.fixture()
def dlq(isolated_settings: Settings) -> Topic:
    """Isolated topics whose dead-letters topic holds five dead letters and one invalid record."""
    t = isolated_settings.topics
    asyncio.run(create_topics(isolated_settings))
    ten_min = timedelta(minutes=10)
    letters = {
        "decode": _letter(t.events, 0, 3, "RecordDecodeError", "track", b"{not json", b"app/u/s1", ten_min,
                          "not valid JSON:\nExpecting property name"),
        "invalid": _letter(t.events, 1, 4, "ValidationError", "track", f'{{"content": "{SECRET}"}}'.encode(), None,
                           timedelta(minutes=5)),
        "huge": _letter(t.events, 0, 5, "OversizedRecord", "track", b"x" * 8, b"app/u/s2", timedelta(minutes=4),
                        "record of 300000 bytes exceeds the limit (value truncated to 8 of 300000 bytes)"),
        "summary": _letter(t.summaries, 1, 2, "InvalidSummary", "project", b'{"type": "summary"}', b"app/u/s3",
                           timedelta(hours=3)),
        "job": _letter(t.jobs, 0, 9, "PermanentError", "summarize", b'{"job_id": "j"}', b"app/u/s4",
                       timedelta(minutes=1)),
    }  # fmt: skip
    values = [d.model_dump_json().encode() for d in letters.values()]
    asyncio.run(_produce(isolated_settings, [*values[:2], b"not a dead letter", *values[2:]]))
    return Topic(isolated_settings, letters)


def _topic(settings: Settings, topic: str, count: int = 0) -> list[Any]:
    return asyncio.run(read_topic(settings, topic, min_records=count, timeout=20 if count else 3))


def test_list_prints_one_line_per_dead_letter_and_never_the_payload(dlq: Topic) -> None:
    result = dlq.run("list")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    t = dlq.settings.topics
    assert len([x for x in lines if "  track  " in x or "  project  " in x or "  summarize  " in x]) == 5
    assert f"{t.events}/0/3  track  RecordDecodeError  not valid JSON: Expecting property name  [9 B]" in result.output
    assert "[300000 B (truncated to 8)]" in result.output
    assert SECRET not in result.output
    [invalid] = [x for x in lines if x.startswith("invalid record")]
    assert invalid.startswith(f"invalid record at {t.dead_letters}/") and "not a DeadLetter" in invalid
    assert lines[-1] == (
        "5 dead letters: InvalidSummary 1, OversizedRecord 1, PermanentError 1, RecordDecodeError 1, "
        "ValidationError 1; 1 invalid record"
    )  # fmt: skip


def test_list_json_prints_the_full_records_and_the_summary_on_stderr(dlq: Topic) -> None:
    result = dlq.run("list", "--json")
    assert result.exit_code == 0, result.output
    printed = [DeadLetter.model_validate_json(x) for x in result.stdout.splitlines()]
    assert sorted(printed, key=lambda d: d.source_offset) == sorted(dlq.letters.values(), key=lambda d: d.source_offset)
    secret = next(d for d in printed if d.error_class == "ValidationError")
    assert SECRET.encode() in base64.b64decode(secret.value_b64)
    assert "invalid record at" in result.stderr and result.stderr.splitlines()[-1].startswith("5 dead letters")


@pytest.mark.parametrize(
    ("args", "classes"),
    [
        (["--error-class", "RecordDecodeError", "--error-class", "ValidationError"],
         ["RecordDecodeError", "ValidationError"]),
        (["--stage", "project"], ["InvalidSummary"]),
        (["--since", "1h", "--stage", "track"], ["RecordDecodeError", "ValidationError", "OversizedRecord"]),
        (["--limit", "2"], ["InvalidSummary", "RecordDecodeError"]),
    ],
)  # fmt: skip
def test_list_filters(dlq: Topic, args: list[str], classes: list[str]) -> None:
    result = dlq.run("list", "--json", *args)
    assert result.exit_code == 0, result.output
    assert [json.loads(x)["error_class"] for x in result.stdout.splitlines()] == classes
    by_topic = dlq.run("list", "--json", "--source-topic", dlq.settings.topics.summaries)
    assert [json.loads(x)["error_class"] for x in by_topic.stdout.splitlines()] == ["InvalidSummary"]


def test_redrive_publishes_the_original_bytes_with_the_trace_header_and_skips_truncated(dlq: Topic) -> None:
    t = dlq.settings.topics
    result = dlq.run("redrive", "--source-topic", t.events, "--yes")
    assert result.exit_code == 0, result.output
    assert "skipped: value truncated: only 8 of 300000 bytes were kept" in result.output
    assert result.output.splitlines()[-1] == "done: 2 redriven, 1 skipped (value truncated 1)"
    records = _topic(dlq.settings, t.events, 2)
    got = {(r.key, r.value, tuple(r.headers)) for r in records}
    assert got == {
        (b"app/u/s1", b"{not json", (("distill-redrive-of", f"{t.events}/0/3".encode()),)),
        (None, f'{{"content": "{SECRET}"}}'.encode(), (("distill-redrive-of", f"{t.events}/1/4".encode()),)),
    }
    assert SECRET not in result.output


def test_dry_run_and_a_declined_confirmation_publish_nothing(dlq: Topic) -> None:
    t = dlq.settings.topics
    dry = dlq.run("redrive", "--since", "1h", "--stage", "track", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "plan: 2 to " + t.events in dry.output and dry.output.splitlines()[-1] == "dry run: nothing published"
    declined = dlq.run("redrive", "--offset", f"{t.summaries}:1:2", input="n\n")
    assert declined.exit_code == 1 and "publish 1 record(s) again?" in declined.output
    assert _topic(dlq.settings, t.events) == [] and _topic(dlq.settings, t.summaries) == []


def test_redrive_by_offset_goes_to_the_summaries_topic_after_confirmation(dlq: Topic) -> None:
    t = dlq.settings.topics
    result = dlq.run("redrive", "--offset", f"{t.summaries}:1:2", "--offset", f"{t.events}:7:7", input="y\n")
    assert result.exit_code == 0, result.output
    assert f"no dead letter for {t.events}:7:7" in result.output
    [record] = _topic(dlq.settings, t.summaries, 1)
    assert (record.key, record.value) == (b"app/u/s3", b'{"type": "summary"}')
    assert list(record.headers) == [("distill-redrive-of", f"{t.summaries}/1/2".encode())]


def test_redrive_refuses_a_topic_distill_does_not_consume(dlq: Topic) -> None:
    t = dlq.settings.topics
    result = dlq.run("redrive", "--all", "--yes")
    assert result.exit_code == 1
    assert f"refusing to redrive to {t.jobs} (1)" in result.output
    assert _topic(dlq.settings, t.events) == [] and _topic(dlq.settings, t.summaries) == []
    unfiltered = dlq.run("redrive", "--yes")
    assert unfiltered.exit_code == 2 and "--all" in unfiltered.output


def test_follow_prints_new_dead_letters_until_interrupted(dlq: Topic) -> None:
    env = {k: v for k, v in dlq.env().items() if v is not None}
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DISTILL_")}, **env}
    proc = subprocess.Popen([DISTILL, "dead-letters", "list", "--follow", "--stage", "track"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    lines: Queue[str] = Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or ()], daemon=True).start()

    seen: list[str] = []

    def wait_for(text: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(Empty):
                seen.append(lines.get(timeout=1))
                if text in seen[-1]:
                    return
        raise AssertionError(f"{text!r} never printed; exit code {proc.poll()}; output:\n" + "".join(seen))

    try:
        wait_for("OversizedRecord")
        late = _letter(dlq.settings.topics.events, 1, 77, "LateError", "track", b"v", None, timedelta(0))
        asyncio.run(_produce(dlq.settings, [late.model_dump_json().encode()]))
        wait_for(f"{dlq.settings.topics.events}/1/77  track  LateError")
        proc.send_signal(signal.SIGINT)
        wait_for("4 dead letters")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
