"""``distill ui`` in a real headless Chromium, on the demo session as the real worker summarized it.

Setup (once for the module): a ``distill worker`` and a ``distill projector``
(``LocalPipeline``, as ``distill demo`` runs them) on fresh topics and a fresh
keyspace, their model the scripted OpenAI-compatible server answering with
``tests.support.ui_demo.DemoModel``. The demo session is published exactly as
``distill demo`` publishes it; what each page must show is derived from the
summary records the worker published (``DemoRun``) and the demo's events, never
written down. Then, for the other pages: two bad records (dead-lettered by the
worker and the projector for real), a second session whose model call hangs
with a second job queued behind it (jobs in flight), and a consumer group
left behind on the events topic (lag). ``distill ui --port 0 --allow-writes``
runs as a subprocess and Selenium drives Debian's Chromium through its pages.
Screenshots of the main pages go to ``.distill/screenshots/`` of the checkout.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from schemas import SessionKey, SessionSummary
from schemas.dead_letter import DeadLetter
from schemas.settings import Settings
from streams.rules.dead_letters import REDRIVE_HEADER
from tests.integration.pipeline_support import create_topics, read_topic, scripted_pipeline_settings, worker_env
from tests.support import ui_demo
from tests.support.browser import ensure_chromium, full_page_screenshot, start_driver
from tests.support.keyspaces import KeyspacePool
from tests.support.openai_server import OpenAIServer
from tests.support.ui_demo import DemoRun

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / ".distill" / "screenshots"
OVERSIZE = 70_000
"""Bytes of a bad record larger than what a dead letter keeps (``DEAD_LETTER_VALUE_LIMIT``, 64 KiB)."""


@dataclass
class UIEnv:
    settings: Settings
    run: DemoRun
    busy: SessionKey
    busy_partition: int
    busy_jobs: list[str]
    letters: list[DeadLetter]
    bad_json: str
    oversize: str
    readers: str
    readers_end: int
    url: str
    log_path: Path
    driver: Any

    def open(self, path: str, **params: str) -> None:
        self.driver.get(self.url.rstrip("/") + path + (("?" + urlencode(params)) if params else ""))

    def session_params(self, key: SessionKey | None = None) -> dict[str, str]:
        k = key or self.run.key
        return {"app": k.app_name, "user": k.user_id, "id": k.session_id}

    def shot(self, name: str) -> Path:
        return full_page_screenshot(self.driver, SCREENSHOTS / name)

    def rows(self, selector: str) -> list[dict[str, str]]:
        script = (
            "return [...document.querySelectorAll(arguments[0])].map(el => Object.assign({_class: el.className, "
            "_text: el.innerText}, el.dataset));"
        )
        return list(self.driver.execute_script(script, selector))


# -- the oracle: what the demo's events and the worker's summary records say the pages must show -------------


def in_input(event_filter_key: str, summary_key: str) -> bool:
    """Whether a summary of ``summary_key`` takes an event of ``event_filter_key`` (the seeds' branch rule)."""
    return summary_key == "" or event_filter_key in ("", summary_key) or event_filter_key.startswith(summary_key + "/")


def label(filter_key: str) -> str:
    return filter_key or "full session"


def split_at(run: DemoRun, filter_key: str, summary: SessionSummary) -> tuple[list[str], list[str]]:
    """The complete events of ``filter_key``'s input up to ``summary``'s boundary event, and those after it."""
    ids = run.complete_ids
    assert summary.boundary.last_event_id in ids, summary.boundary
    cut = ids.index(summary.boundary.last_event_id)
    mine = [(i, e) for i, e in enumerate(ids) if in_input(run.filter_key_of(e), filter_key)]
    return [e for i, e in mine if i <= cut], [e for i, e in mine if i > cut]


def tools_called(run: DemoRun, event_ids: list[str]) -> list[str]:
    """The tool names the events call, in order."""
    by_id = {r["event_id"]: r for r in run.records}
    return [c["function"]["name"] for e in event_ids for c in by_id[e]["message"].get("tool_calls") or ()]


# -- setup -----------------------------------------------------------------------------------------------------


def _settings(base: Settings, llm_url: str, keyspace: str) -> Settings:
    # A hung model call must stay in flight for the whole module: no client timeout, no job timeout within it
    # (nor in event time: the demo's idle gap is 16 minutes, and a job unanswered across it would be re-emitted).
    settings = scripted_pipeline_settings(base, llm_url, partitions=2, llm={"timeout_s": 3600.0}, job_timeout_s=3600.0)
    data = settings.model_dump()
    data["cassandra"]["keyspace"] = keyspace
    return Settings(**data)


def _event(key: SessionKey, n: int, role: str, text: str, at: datetime) -> dict[str, Any]:
    return {
        "type": "event", "app_name": key.app_name, "user_id": key.user_id, "session_id": key.session_id,
        "event_id": f"{key.session_id}-{n}", "timestamp": at.isoformat(), "request_id": "r1", "invocation_id": "r1",
        "author": "user" if role == "user" else "planner", "filter_key": "", "message": {"role": role, "content": text},
    }  # fmt: skip


async def _after_the_demo(settings: Settings, run: DemoRun, readers: str) -> dict[str, Any]:
    """Dead letters, a session with two jobs in flight, a consumer group behind (see the module doc)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from schemas.commands import Summarize
    from streams.client import DistillClient
    from streams.clients.kafka_config import consumer_kwargs

    demo_key = run.key.kafka_key()
    busy = SessionKey(run.key.app_name, run.key.user_id, f"{run.key.session_id}-busy")
    now = datetime.now(UTC)
    bad = dict(run.records[0], event_id=None, message={"role": "user", "content": "x" * OVERSIZE})
    async with DistillClient(settings) as client:
        part, bad_json = await client.publish_raw(demo_key, b"{not json")
        _, oversize = await client.publish_raw(demo_key, json.dumps(bad).encode())
        # The model hangs on this session's first job; the second is decided meanwhile and queues behind it.
        steps = [("user", f"Summarize this please: {ui_demo.HOLD}"), ("assistant", "Sure."), None,
                 ("assistant", "And more."), None]  # fmt: skip
        for n, step in enumerate(steps):
            if step is None:
                command = {"app_name": busy.app_name, "user_id": busy.user_id, "session_id": busy.session_id}
                await client.publish(Summarize(**command, command_id=f"busy-{n}", force=True))
            else:
                busy_part, _ = await client.publish_raw(
                    busy.kafka_key(), json.dumps(_event(busy, n, *step, now)).encode()
                )
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=readers, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(settings.topics.events, part)
        consumer.assign([tp])
        await consumer.commit({tp: 1})
        end = (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()
    letters = [
        DeadLetter.model_validate_json(r.value)
        for r in await read_topic(settings, settings.topics.dead_letters, min_records=4, timeout=30.0)
    ]
    jobs = [json.loads(r.value) for r in await read_topic(settings, settings.topics.jobs, timeout=10.0,
                                                          until=lambda rs: _busy_jobs(rs, busy) >= 2)]  # fmt: skip
    topic = settings.topics.events
    return {
        "busy": busy, "busy_partition": busy_part,
        "busy_jobs": [j["job_id"] for j in jobs if j.get("session_id") == busy.session_id],
        "letters": letters, "bad_json": f"{topic}/{part}/{bad_json}", "oversize": f"{topic}/{part}/{oversize}",
        "readers_end": end,
    }  # fmt: skip


def _busy_jobs(records: list[Any], busy: SessionKey) -> int:
    return sum(1 for r in records if json.loads(r.value).get("session_id") == busy.session_id)


async def _settled(sources: Any, settings: Settings, run: DemoRun, busy_jobs: list[str]) -> None:
    """Until the projector read every record and the recall indexer every event (``distill projector`` runs
    both, each its own group), the worker's changelog shows the busy session's two jobs and its group committed
    on the jobs topic (the lag panel lists a group's topics from its commits)."""
    deadline = time.monotonic() + 30.0
    projected: dict[str, set[tuple[str, int]]] = {}
    ends: dict[tuple[str, int], int] = {}
    unanswered: list[str] = []
    await ui_demo.wait_projected(sources.reader, run)
    stages = {f"{settings.worker.app_id}-projector": (settings.topics.events, settings.topics.summaries),
              f"{settings.worker.app_id}-indexer": (settings.topics.events,)}  # fmt: skip
    while time.monotonic() < deadline:
        committed, ends = await sources.kafka_offsets()
        worker = {topic for topic, _ in committed.get(settings.worker.app_id, {})}
        offsets = await sources.catalog.projector_offsets()
        projected = {group: {(o.topic, o.partition) for o in offsets if o.consumer_group == group
                             and o.next_offset >= ends.get((o.topic, o.partition), 0)} for group in stages}  # fmt: skip
        states, _, _ = await sources.trigger_states()
        unanswered = [j.job_id for t in states if t.state.session_id.endswith("-busy") for j in t.state.unanswered]
        caught_up = all({tp for tp, end in ends.items() if end and tp[0] in read} <= projected[group]
                        for group, read in stages.items())  # fmt: skip
        if caught_up and unanswered == busy_jobs and settings.topics.jobs in worker:
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"not settled: projected {projected} of {ends}; jobs in the changelog {unanswered}")


@pytest.fixture(scope="module")
def ui(
    service_settings: Settings, keyspaces: KeyspacePool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UIEnv]:
    from streams.services.local_pipeline import LocalPipeline
    from streams.ui.sources import Sources

    ensure_chromium()  # skips before anything is written when there is no browser
    started = time.monotonic()
    tmp = tmp_path_factory.mktemp("ui")
    with OpenAIServer(ui_demo.DemoModel()) as llm:
        settings = _settings(service_settings, llm.base_url, keyspaces.lease())
        env = {**worker_env(settings), "PYTHONPATH": str(ROOT)}
        ui_env = {**env, "DISTILL_WORKER": settings.worker.model_copy(update={"log_json": False}).model_dump_json()}
        proc: subprocess.Popen[str] | None = None
        driver = None
        pipeline = LocalPipeline(tmp / "pipeline", env=env)
        try:
            asyncio.run(create_topics(settings))
            pipeline.start()
            log_path = tmp / "distill-ui.log"
            proc = subprocess.Popen(
                [sys.executable, "-c", "from streams.cli.main import main; main()", "ui", "--port", "0",
                 "--allow-writes"], cwd=ROOT, env=ui_env, stdout=subprocess.PIPE, stderr=log_path.open("w"), text=True,
            )  # fmt: skip
            driver = start_driver()
            pipeline.wait_for_worker(60)
            run = asyncio.run(ui_demo.run_demo(settings, f"demo-ui-{uuid.uuid4().hex[:8]}"))
            readers = f"{settings.worker.app_id}-readers"
            extra = asyncio.run(_after_the_demo(settings, run, readers))
            sources = Sources.open(settings)
            try:
                asyncio.run(_settled(sources, settings, run, extra["busy_jobs"]))
            finally:
                sources.close()
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "distill ui → http://127.0.0.1:" in line, (line, log_path.read_text())
            url = line.split("→", 1)[1].split()[0]
            print(f"\nui browser test: setup {time.monotonic() - started:.1f} s; screenshots in {SCREENSHOTS}")
            yield UIEnv(settings, run, readers=readers, url=url, log_path=log_path, driver=driver, **extra)
        finally:
            if driver is not None:
                driver.quit()
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=10)
            worker = pipeline.procs.get("worker")
            if worker is not None:
                worker.kill()  # its model call hangs on purpose: a graceful stop would wait for it
            pipeline.stop()
            keyspaces.release(settings.cassandra.keyspace)


# -- the pages -------------------------------------------------------------------------------------------------


def test_the_demo_session_has_summaries_of_three_keys_by_the_worker(ui: UIEnv) -> None:
    latest = ui.run.latest()
    assert sorted(latest) == ["", "travel-agent/itinerary", "travel-agent/research"], latest
    assert {s.model for s in ui.run.summaries} == {"scripted-model"}
    # each a version chain answered by the scripted model, rolled forward (the digest grows, nothing is lost)
    for filter_key in latest:
        chain = [ui_demo.DemoDigest.parse(s.summary) for s in ui.run.history(filter_key)]
        assert [s.version for s in ui.run.history(filter_key)] == list(range(1, len(chain) + 1))
        for old, new in itertools.pairwise(chain):
            assert old and new and new.tools[: len(old.tools)] == old.tools and new.messages > old.messages


def test_the_sessions_page_lists_the_demo_session_with_its_three_summary_keys(ui: UIEnv) -> None:
    ui.open("/", q=ui.run.key.session_id)
    rows = ui.rows("tr.session-row")
    assert sorted(r["sessionId"] for r in rows) == sorted([ui.run.key.session_id, ui.busy.session_id])
    demo = next(r for r in rows if r["sessionId"] == ui.run.key.session_id)
    cells = ui.driver.execute_script(
        "return [...document.querySelectorAll(`tr.session-row[data-session-id='${arguments[0]}'] td`)]"
        ".map(td => td.innerText.trim())",
        ui.run.key.session_id,
    )
    assert cells[2] == str(len(ui.run.records)), cells  # events stored (a partial one too)
    text = " ".join(demo["_text"].split())
    for filter_key, summary in ui.run.latest().items():
        assert f"{label(filter_key)} v{summary.version}" in text, text
    ui.shot("sessions.png")
    ui.open("/", q="no-such-session-anywhere")
    assert ui.rows("tr.session-row") == []


def test_each_boundary_marker_sits_between_the_right_events(ui: UIEnv) -> None:
    from streams.cli.demo_cmd import demo_url

    # the address `make demo` ends with, on this server's port
    ui.driver.get(demo_url(ui.run.key, int(ui.url.rstrip("/").rsplit(":", 1)[1])))
    assert ui.driver.find_element("css selector", "h1").text == ui.run.key.session_id
    rows = ui.rows("#timeline tbody tr")
    order = [r.get("eventId") or f"marker:{r['keys']}" for r in rows]
    ids = [r["event_id"] for r in ui.run.records]
    # every event of the session is on the timeline, in session order (the partial one too)
    assert [x for x in order if not x.startswith("marker:")] == ids
    partial = [e for e in ids if e not in ui.run.complete_ids]
    assert partial and all("partial" in r["_text"] for r in rows if r.get("eventId") in partial)
    latest = ui.run.latest()
    headers = ui.driver.execute_script("return [...document.querySelectorAll('#timeline th.keycol')].map(h => h.title)")
    assert headers == [label(k) for k in sorted(latest)]
    states = ui.driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#timeline tr.event')].map(tr => [tr.dataset.eventId,"
        " Object.fromEntries([...tr.querySelectorAll('td.st')].map(td => [td.dataset.key, td.dataset.state]))]))"
    )
    for filter_key, summary in latest.items():
        upto = summary.boundary.last_event_id
        assert upto is not None
        at = next(i for i, r in enumerate(rows) if "boundary" in r["_class"] and filter_key in r["keys"].split("|"))
        assert rows[at]["afterEvent"] == upto
        # right after the boundary event; the next event row is the session's next event (none after the last)
        before = next(x for x in reversed(order[:at]) if not x.startswith("marker:"))
        after = next((x for x in order[at + 1 :] if not x.startswith("marker:")), None)
        following = ids[ids.index(upto) + 1] if ids.index(upto) + 1 < len(ids) else None
        assert (before, after) == (upto, following), (filter_key, order[max(0, at - 2) : at + 3])
        hidden, visible = split_at(ui.run, filter_key, summary)
        for e in ids:  # a partial event is in no key's input
            want = "hidden" if e in hidden else "visible" if e in visible else "outside"
            assert states[e][filter_key] == want, (filter_key, e, states[e])
        # the history the summary hides, and what the next prompt carries (the read API's events after the boundary)
        shown_hidden, carried = (
            [r["eventId"] for r in ui.rows(f"div.{div}[data-filter-key='{filter_key}'] tr[data-event-id]")]
            for div in ("hidden-history", "carried")
        )
        assert (shown_hidden, carried) == (hidden, visible), filter_key
    # the branches' boundaries fall where their sub-agents handed back, before the planner went on
    research, itinerary = latest["travel-agent/research"], latest["travel-agent/itinerary"]
    assert ui.run.filter_key_of(ids[ids.index(research.boundary.last_event_id or "") + 1]) != "travel-agent/research"
    assert ui.run.filter_key_of(ids[ids.index(itinerary.boundary.last_event_id or "") + 1]) == ""
    ui.shot("session.png")


def test_session_search_finds_a_detail_only_the_hidden_history_holds(ui: UIEnv) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    detail = ui_demo.HIDDEN_DETAIL
    assert all(detail not in s.summary for s in ui.run.summaries)  # no summary kept it
    holders = ui.run.containing(detail)
    hidden, _ = split_at(ui.run, "", ui.run.latest()[""])
    assert holders and set(holders) <= set(hidden)  # and the full session's summary hides every event that has it
    ui.open("/session", **ui.session_params())
    ui.driver.find_element(By.ID, "search-query").send_keys(detail)
    Select(ui.driver.find_element(By.ID, "search-scope")).select_by_value("current_hidden")
    ui.driver.find_element(By.ID, "search-submit").click()
    _after_post(ui, "search-results")  # the click returns before the results page is there
    hits = ui.rows("#search-results tr.hit")
    assert {h["eventId"] for h in hits} >= set(holders), hits
    assert all("current_hidden" in h["_text"] for h in hits)
    assert all(detail in h["_text"] for h in hits if h["eventId"] in holders)
    ui.shot("search.png")
    # load the tool result around its hit, as session_load does
    tool_result = next(e for e in holders if ui.run.record(e)["message"]["role"] == "tool")
    ui.driver.find_element(By.CSS_SELECTOR, f"#search-results tr.hit[data-event-id='{tool_result}'] a").click()
    _after_post(ui, "load-results")
    anchor = ui.rows("#load-results article.anchor")
    assert [a["eventId"] for a in anchor] == [tool_result] and f'"pnr": "{detail}"' in anchor[0]["_text"]
    # scope matters: the e-mail's message id came after a branch's boundary, which hides nothing of it
    (sent,) = ui.run.containing("m-9921")
    assert all("m-9921" not in s.summary for s in ui.run.summaries)
    branch = next(k for k, s in ui.run.latest().items() if sent in split_at(ui.run, k, s)[1])
    search = {**ui.session_params(), "tool": "session_search", "query": "m-9921", "key": branch}
    ui.open("/recall", **search, scope="current_hidden")
    assert ui.rows("#search-results tr.hit") == [] and ui.rows("#no-results")
    ui.open("/recall", **search, scope="current_session")
    assert [h["eventId"] for h in ui.rows("#search-results tr.hit")][:1] == [sent]


def test_a_summary_shows_its_versions_the_per_character_diff_and_its_report(ui: UIEnv) -> None:
    filter_key = "travel-agent/research"
    history = ui.run.history(filter_key)
    assert len(history) >= 2, history  # the large search result's token trigger, then the hand-back
    old, new = history[-2], history[-1]
    ui.open("/summary", **ui.session_params(), key=filter_key)
    assert [r["version"] for r in ui.rows("#versions tbody tr")] == [str(s.version) for s in reversed(history)]
    deleted, inserted = (
        "".join(
            ui.driver.execute_script(f"return [...document.querySelectorAll('#diff {tag}')].map(x => x.textContent)")
        )
        for tag in ("del", "ins")
    )
    # the oracle: the tools called between the two boundaries (from the events), the counts the model wrote
    before, _ = split_at(ui.run, filter_key, old)
    upto, _ = split_at(ui.run, filter_key, new)
    earlier = tools_called(ui.run, before)
    added = [t for t in tools_called(ui.run, [e for e in upto if e not in before]) if t not in earlier]
    was, now = ui_demo.DemoDigest.parse(old.summary), ui_demo.DemoDigest.parse(new.summary)
    assert was and now and added and now.tools == was.tools + tuple(added)
    assert all(t in inserted for t in added) and str(now.messages) in inserted and str(was.messages) in deleted
    # per character inside the Chinese sentences: what both versions say is not marked
    for kept in ("对话摘要", "条消息", "已调用工具", *was.tools, *was.requests):
        assert kept not in deleted and kept not in inserted, kept
    report = ui.rows("#report")[0]["_text"]
    assert new.report.trigger.name in report
    assert f"{old.boundary.last_event_id} → " in report and f"· {new.boundary.last_event_id}" in report
    call = new.report.calls[0]
    calls = ui.rows("#calls tbody tr")[0]["_text"]
    assert call.budget_tokens is not None and str(call.budget_tokens) in calls and call.mode in calls
    stats = " ".join(ui.rows("#stats")[0]["_text"].split())
    assert f"original event count {new.stats.original_event_count}" in stats, stats
    ui.shot("summary.png")


def test_consumer_lag_per_group_and_partition_and_the_jobs_in_flight(ui: UIEnv) -> None:
    ui.open("/ops")
    assert not ui.rows("p.error"), ui.rows("p.error")
    lag = [" ".join(r["_text"].split()) for r in ui.rows("#lag tbody tr")]
    events, end = ui.settings.topics.events, ui.readers_end
    assert any(x.startswith(f"{ui.readers} {events} ") and x.endswith(f" 1 {end} {end - 1} kafka") for x in lag), lag
    stored = [x.split() for x in lag if x.endswith(" cassandra")]  # the stages that keep their offsets there
    app = ui.settings.worker.app_id
    stages = {f"{app}-projector", f"{app}-indexer", f"{app}-indexer-deep"}
    assert {x[0] for x in stored} == stages and all(x[5] == "0" for x in stored), lag
    # the worker has not finished the hung job: its group is behind on that jobs partition (committed nothing
    # there yet when the job is the partition's first record)
    stuck = f"{ui.settings.worker.app_id} {ui.settings.topics.jobs} {ui.busy_partition} "
    (jobs_lag,) = [x.removeprefix(stuck).split() for x in lag if x.startswith(stuck)]
    assert (jobs_lag[2:] == ["?", "kafka"] and jobs_lag[0] == "—") or int(jobs_lag[2]) >= 2, jobs_lag
    jobs = ui.rows("#jobs tr.job")
    # the busy session's two jobs (as the jobs topic has them), the second queued behind the hung one; none of the demo
    assert [(j["sessionId"], j["jobId"], j["queuePosition"]) for j in jobs] == [
        (ui.busy.session_id, job, str(i)) for i, job in enumerate(ui.busy_jobs)
    ], jobs
    assert "summarizing" in jobs[0]["_text"] and "queued #1" in jobs[1]["_text"]
    # the hung job's age counts from the worker's own clock (emitted seconds ago); the queued one has none
    age = ui.driver.execute_script(
        "return [...document.querySelectorAll('#jobs tr.job')].map(tr => tr.cells[6].innerText)"
    )
    assert age[0].endswith(" s") and 0 <= int(age[0].removesuffix(" s")) < 600 and age[1] == "—", age
    ui.shot("ops.png")


def test_dead_letters_filter_by_reason_and_redrive_publishes_the_original_record(ui: UIEnv) -> None:
    from selenium.webdriver.common.by import By

    letters = [
        DeadLetter.model_validate_json(r.value)
        for r in asyncio.run(read_topic(ui.settings, ui.settings.topics.dead_letters))
    ]
    assert len(letters) >= len(ui.letters)  # each bad record refused by the worker and by the projector
    ui.open("/dead-letters")
    assert len(ui.rows("#dead-letters tr.letter")) == len(letters)
    matching = sorted(f"{x.source_topic}/{x.source_partition}/{x.source_offset}" for x in letters
                      if "json" in x.reason.casefold())  # fmt: skip
    assert matching and len(matching) < len(letters) and set(matching) == {ui.bad_json}
    ui.open("/dead-letters", reason="JSON")
    assert sorted(r["coordinates"] for r in ui.rows("#dead-letters tr.letter")) == matching
    ui.open("/dead-letters")
    ui.shot("dead_letters.png")
    # the worker kept 64 KiB of the oversized record: that letter cannot be redriven
    cut = ui.driver.find_element(By.CSS_SELECTOR, f"tr[data-coordinates='{ui.oversize}'][data-stage='track']")
    assert cut.find_elements(By.CSS_SELECTOR, "button.redrive") == [] and "cannot redrive" in cut.text
    button = ui.driver.find_element(By.CSS_SELECTOR, f"tr[data-coordinates='{ui.bad_json}'] button.redrive")
    button.click()
    notice = _after_post(ui, "notice")
    assert notice.startswith(f"redriven {ui.bad_json} → {ui.settings.topics.events}/"), notice
    landed = asyncio.run(read_topic(ui.settings, ui.settings.topics.events, timeout=15.0,
                                    until=lambda rs: any(_redriven(r) for r in rs)))  # fmt: skip
    assert [(r.value, _redriven(r)) for r in landed if _redriven(r)] == [(b"{not json", [ui.bad_json])]


def _redriven(record: Any) -> list[str]:
    return [v.decode() for k, v in (record.headers or ()) if k == REDRIVE_HEADER]


def test_delete_removes_this_session_only(ui: UIEnv) -> None:
    from selenium.webdriver.common.by import By

    ui.open("/session", **ui.session_params(ui.busy))
    ui.driver.find_element(By.CSS_SELECTOR, "form.danger button").click()
    ui.driver.switch_to.alert.accept()
    assert "delete_session" in _after_post(ui, "message")
    records = [json.loads(r.value) for r in asyncio.run(read_topic(ui.settings, ui.settings.topics.events, timeout=10))
               if r.value.startswith(b"{") and b"delete_session" in r.value]  # fmt: skip
    deletes = [(d["app_name"], d["user_id"], d["session_id"]) for d in records if d.get("type") == "delete_session"]
    b = ui.busy
    assert deletes == [(b.app_name, b.user_id, b.session_id)]
    # the projector removes its rows; the demo session stays
    deadline = time.monotonic() + 20
    listed: list[str] = []
    while time.monotonic() < deadline:
        ui.open("/", q=ui.run.key.session_id)
        listed = [r["sessionId"] for r in ui.rows("tr.session-row")]
        if listed == [ui.run.key.session_id]:
            return
        time.sleep(0.5)
    raise AssertionError(f"after delete_session the sessions page lists {listed}")


def _after_post(ui: UIEnv, element_id: str) -> str:
    """The text of ``element_id`` on the page a form post or a link leads to (a click returns before that
    page loads: a look right after it may still see the page it left)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(ui.driver, 15).until(expected_conditions.presence_of_element_located((By.ID, element_id)))
    except TimeoutException:
        body = ui.driver.find_element(By.TAG_NAME, "body").text
        raise AssertionError(f"no #{element_id} after the post; the page says: {body[:1500]}") from None
    return str(ui.driver.find_element(By.ID, element_id).text)


def test_the_access_log_carries_no_message_content(ui: UIEnv) -> None:
    log = ui.log_path.read_text().splitlines()
    access = [line for line in log if "distill.ui.access" in line]
    assert any("GET /recall ?app,id,key,query,scope,tool,user 200" in line for line in access), access
    assert any("POST /dead-letters/redrive 303" in line for line in access), access
    for line in access:
        for content in (ui_demo.HIDDEN_DETAIL, "m-9921", "JSON", ui.run.key.session_id):
            assert content not in line, line
    # nor does anything else the server logged (searched text, loaded payloads)
    assert not [line for line in log if ui_demo.HIDDEN_DETAIL in line or "m-9921" in line]
