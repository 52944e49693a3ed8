"""Helpers of the pipeline integration tests: worker subprocesses, event builders, topic readers."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas import SessionEvent
from schemas.settings import Settings
from streams.clients.kafka_config import consumer_kwargs
from tests.support.cleanup import register_prefix
from tests.support.markers import find_markers
from tests.support.openai_server import Reply, answer, request_text

ROOT = Path(__file__).resolve().parents[2]
DISTILL = str(ROOT / ".venv" / "bin" / "distill")


def worker_env(settings: Settings) -> dict[str, str]:
    """Environment that makes a subprocess load exactly ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTILL_")}
    for section in ("kafka", "cassandra", "topics", "summary", "worker"):
        env[f"DISTILL_{section.upper()}"] = getattr(settings, section).model_dump_json()
    llm = settings.llm.model_dump(mode="json")
    llm["api_key"] = settings.llm.api_key.get_secret_value() if settings.llm.api_key else None
    env["DISTILL_LLM"] = json.dumps(llm)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class WorkerProcess:
    """``distill worker`` in a subprocess, its output in a log file."""

    def __init__(self, settings: Settings, log_path: Path, *extra: str) -> None:
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [DISTILL, "worker", *extra], env=worker_env(settings), stdout=self._log, stderr=subprocess.STDOUT,
            cwd=str(ROOT),
        )  # fmt: skip

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def diagnosis(self, tail: int = 3000, wait_s: float = 2.0) -> str:
        """The log's tail, then every thread's stack and asyncio task the worker has now.

        For an assertion's message (evaluated only when it fails): the worker dumps every
        thread's stack on SIGQUIT (from C: even a blocked event loop answers) and Faust's
        tasks on SIGUSR1, so a run that stalled in CI says where it waits.
        """
        before = self.log_path.stat().st_size
        head = self.log_text()[-tail:]
        if self.proc.poll() is not None:
            return f"{head}\n(worker exited {self.proc.returncode})"
        self.proc.send_signal(signal.SIGQUIT)
        time.sleep(0.5)
        self.proc.send_signal(signal.SIGUSR1)
        time.sleep(wait_s)
        if self.proc.poll() is not None:  # not yet (or no longer) handling the signal: it ended the worker
            return f"{head}\n(worker exited {self.proc.returncode} at the stack dump signal)"
        with self.log_path.open("rb") as f:
            f.seek(before)
            stacks = compact_stacks(f.read().decode(errors="replace"))
        return f"{head}\n--- worker stacks (SIGQUIT) and tasks (SIGUSR1) ---\n{shorten(stacks)}"


def shorten(stacks: str, most: int = 20000) -> str:
    """At most ``most`` characters of a dump: its start (the threads' stacks) and its end (the tasks)."""
    if len(stacks) <= most:
        return stacks
    return f"{stacks[: most * 3 // 10]}\n[...]\n{stacks[-most * 7 // 10 :]}"


def compact_stacks(dump: str) -> str:
    """The stack dumps (faulthandler's, then mode's without its local variables): each stack's
    header and frames (file line, code)."""
    lines = dump.splitlines()
    kept: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith(("THREAD ", "Stack for ", "  TASK ", "Thread 0x", "Current thread 0x")):
            kept.append(line[:200])
        elif line.lstrip().startswith('File "'):
            kept.append(line)
            if i + 1 < len(lines) and not lines[i + 1].lstrip().startswith('File "'):  # mode's: the code line
                kept.append(lines[i + 1])
    return "\n".join(kept)


def marker_echo(body: dict[str, Any]) -> Reply:
    """The scripted model of the replay tests: "摘要" and every marker of the request (the oracle)."""
    return answer("摘要 " + " ".join(find_markers(request_text(body))))


def start_replay(settings: Settings, *args: str) -> subprocess.Popen[str]:
    """``distill replay --no-adopt`` (no live worker needed to build an epoch) with ``args``, output piped."""
    command = [DISTILL, "replay", "--no-adopt", "--idle-exit", "4", "--timeout", "150", *args]
    return subprocess.Popen(command, env=worker_env(settings),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(ROOT))  # fmt: skip


def replay_output(proc: subprocess.Popen[str]) -> str:
    """What a replay printed, once it ended well (else its worker's log tail and stacks fail the test)."""
    try:
        out, _ = proc.communicate(timeout=200)  # the replay's own --timeout ends it first
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    # The replay's own words last: a CI log shows a failure's tail, and they say what the run waited for.
    assert proc.returncode == 0, f"{replay_log_tail(out)}\n--- replay output ---\n{out}"
    return out


def replay_log_tail(out: str, lines: int = 60) -> str:
    """The end of the log of the replay worker ``distill replay`` named in ``out``, stacks compacted.

    A replay that timed out has its worker write its stacks and tasks there (SIGUSR1): what a
    failed run was waiting for.
    """
    named = re.search(r"log (\S+\.log)", out)
    if named is None:
        return ""
    path = Path(named.group(1))
    try:
        text = (path if path.is_absolute() else ROOT / path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    marker = min((i for i in (text.find("THREAD "), text.find("Thread 0x"), text.find("Current thread 0x")) if i >= 0),
                 default=-1)  # fmt: skip
    stacks = f"\n--- worker stacks and tasks ---\n{shorten(compact_stacks(text[marker:]))}" if marker >= 0 else ""
    head = text[:marker] if marker >= 0 else text
    return "\n--- replay worker log tail ---\n" + "\n".join(head.splitlines()[-lines:]) + stacks


class ProjectorProcess:
    """``distill projector`` in a subprocess (the settings' topics and keyspace), its output in a log file."""

    def __init__(self, settings: Settings, log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [DISTILL, "projector", "--group", f"{settings.worker.app_id}-projector"], env=worker_env(settings),
            stdout=self._log, stderr=subprocess.STDOUT, cwd=str(ROOT),
        )  # fmt: skip

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def workers(settings: Settings, tmp: Path, count: int = 1) -> Iterator[list[WorkerProcess]]:
    tmp.mkdir(parents=True, exist_ok=True)
    procs = [WorkerProcess(settings, tmp / f"worker-{i}.log") for i in range(count)]
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()
        for p in procs:
            if p.proc.returncode not in (0, -signal.SIGKILL, -signal.SIGTERM, None):
                sys.stderr.write(p.log_text()[-5000:])


@contextmanager
def live_pipeline(settings: Settings, keyspace: str, tmp: Path) -> Iterator[Any]:
    """A worker and a projector over ``settings`` (topics created, ``keyspace`` set): yields a CQL session on
    it, and checks on the way out that neither process died meanwhile. The caller leases and releases the
    keyspace."""
    from projections.cassandra_session import connect

    settings.cassandra.keyspace = keyspace
    asyncio.run(create_topics(settings))
    cluster, cql = connect(settings.cassandra)
    projector = ProjectorProcess(settings, tmp / "projector.log")
    try:
        with workers(settings, tmp) as procs:
            yield cql
            for p in procs:
                assert p.proc.poll() is None, p.log_text()[-4000:]
        assert projector.proc.poll() is None, projector.log_text()[-4000:]
    finally:
        projector.stop()
        cluster.shutdown()


@contextmanager
def marker_echo_pipeline(service_settings: Settings, keyspaces: Any, tmp: Path) -> Iterator[tuple[Settings, Any]]:
    """A live pipeline (:func:`live_pipeline`: worker and projector, two partitions, event threshold 3)
    summarizing with a scripted model that echoes the markers it read (:func:`marker_echo`), on a keyspace
    leased from ``keyspaces`` (a ``KeyspacePool``) and released on the way out: yields its settings and a
    CQL session."""
    from tests.support.openai_server import OpenAIServer

    with OpenAIServer(default=marker_echo) as llm:
        settings = scripted_pipeline_settings(service_settings, llm.base_url, partitions=2, event_threshold=3)
        keyspace = keyspaces.lease()
        try:
            with live_pipeline(settings, keyspace, tmp) as cql:
                yield settings, cql
        finally:
            keyspaces.release(keyspace)


def isolated_worker_settings(settings: Settings, **summary: Any) -> Settings:
    data = settings.model_dump()
    data["worker"]["app_id"] = register_prefix(f"distill-test-{uuid.uuid4().hex[:8]}")
    data["worker"]["web_port"] = 0
    data["worker"]["log_level"] = "INFO"
    data["summary"].update(summary)
    data["llm"]["api_key"] = settings.llm.api_key
    return Settings(**data)


def scripted_pipeline_settings(
    base: Settings,
    llm_base_url: str,
    *,
    partitions: int | None = None,
    topic_prefix: str = "t",
    llm: dict[str, Any] | None = None,
    kafka: dict[str, Any] | None = None,
    worker: dict[str, Any] | None = None,
    **summary: Any,
) -> Settings:
    """``base`` with fresh topics, the scripted LLM at ``llm_base_url`` and a fresh worker app id.

    ``llm`` / ``kafka`` / ``worker`` override fields of those sections; ``summary`` keyword
    arguments override summary settings (see :func:`isolated_worker_settings`).
    """
    data = base.model_dump()
    suffix = uuid.uuid4().hex[:8]
    run = register_prefix(f"{topic_prefix}-{suffix}.")
    for name in ("events", "jobs", "summaries", "dead_letters"):
        data["topics"][name] = f"{run}{name}"
    if partitions is not None:
        data["topics"]["partitions"] = partitions
    data["llm"].update({"base_url": llm_base_url, "api_key": "k", "max_retries": 0, "model": "scripted-model"})
    data["llm"].update(llm or {})
    data["kafka"].update(kafka or {})
    data["worker"].update(worker or {})
    return isolated_worker_settings(Settings(**data), **summary)


class SessionBuilder:
    """Builds a session's events with increasing timestamps."""

    def __init__(self, app: str = "app", user: str = "u1", session: str | None = None, start: datetime | None = None):
        self.app_name, self.user_id = app, user
        self.session = session or f"s-{uuid.uuid4().hex[:8]}"
        self.t = start or datetime(2026, 1, 1, tzinfo=UTC)
        self.n = 0
        self.request = "r0"

    def _next(self, gap_s: float = 1.0) -> datetime:
        self.t += timedelta(seconds=gap_s)
        return self.t

    def event(
        self, role: str, content: str | None, *, gap_s: float = 1.0, filter_key: str = "", **extra: Any
    ) -> SessionEvent:
        self.n += 1
        message: dict[str, Any] = {"role": role, "content": content}
        message.update(extra.pop("message", {}))
        return SessionEvent.model_validate(
            {
                "app_name": self.app_name, "user_id": self.user_id, "session_id": self.session,
                "event_id": f"{self.session}-e{self.n}", "timestamp": self._next(gap_s).isoformat(),
                "request_id": self.request, "invocation_id": self.request,
                "author": "user" if role == "user" else ("tool" if role == "tool" else "assistant"),
                "filter_key": filter_key, "message": message, **extra,
            }
        )  # fmt: skip

    def user(self, text: str, *, gap_s: float = 1.0, new_request: bool = True, **kw: Any) -> SessionEvent:
        if new_request:
            self.request = f"r{self.n + 1}"
        return self.event("user", text, gap_s=gap_s, **kw)

    def assistant(self, text: str, **kw: Any) -> SessionEvent:
        return self.event("assistant", text, **kw)


async def read_topic(settings: Settings, topic: str, *, min_records: int = 0, timeout: float = 60.0,
                     until: Any = None) -> list[Any]:  # fmt: skip
    """Every record of ``topic`` (waits until ``min_records`` exist or ``until(records)`` holds)."""
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=None, enable_auto_commit=False)
    await consumer.start()
    out: list[Any] = []
    try:
        deadline = time.monotonic() + timeout
        parts = None
        while parts is None and time.monotonic() < deadline:
            parts = consumer.partitions_for_topic(topic)
            if not parts:
                parts = None
                await consumer._client.force_metadata_update()
                await asyncio.sleep(0.2)
        tps = [TopicPartition(topic, p) for p in sorted(parts or ())]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=300)
            for msgs in batch.values():
                out.extend(msgs)
            if len(out) >= min_records and (until is None or until(out)):
                ends = await consumer.end_offsets(tps)
                if all([await consumer.position(tp) >= ends[tp] for tp in tps]):
                    break
        return out
    finally:
        await consumer.stop()


def summaries_of(records: list[Any]) -> list[dict[str, Any]]:
    out = []
    for r in records:
        try:
            data = json.loads(r.value)
        except ValueError:  # not a distill record (a test may put such on the topic)
            continue
        if isinstance(data, dict) and data.get("type") == "summary":
            out.append(data)
    return out


async def create_topics(settings: Settings) -> None:
    """Create the test's topics (``ensure_topics`` waits until they describe with partitions)."""
    from streams.clients.topics_admin import ensure_topics

    await ensure_topics(settings)


MK_MARKER = re.compile(r"MK-[0-9a-f]{8}-\d+")
"""The markers of :class:`MarkedSession`."""


def echo_mk_markers(request: dict[str, Any]) -> Reply:
    """Every ``MK-`` marker of the request, in order of first appearance (the oracle's model)."""
    text = " ".join(str(m.get("content") or "") for m in request.get("messages", []))
    return answer("markers: " + " ".join(dict.fromkeys(MK_MARKER.findall(text))))


class MarkedSession:
    """A session's events, each with its own ``MK-`` marker in ``text`` (``{n}``: its number)."""

    def __init__(self, app: str, user: str = "u1", session: str | None = None, text: str = "step {n}") -> None:
        self.b = SessionBuilder(app=app, user=user, session=session)
        self.tag = uuid.uuid4().hex[:8]
        self.text = text
        self.markers: list[str] = []

    def events(self, count: int) -> list[SessionEvent]:
        out = []
        for _ in range(count):
            n = self.b.n + 1
            marker = f"MK-{self.tag}-{n}"
            self.markers.append(marker)
            text = f"{self.text.format(n=n)} {marker}"
            out.append(self.b.user(text) if self.b.n % 2 == 0 else self.b.assistant(text))
        return out

    @property
    def last_event_id(self) -> str:
        return f"{self.b.session}-e{self.b.n}"
