"""``distill ui`` in a real headless Chromium, against real Kafka and Cassandra, on the demo session.

Setup (once for the module): the bundled demo session and summaries of three
keys at known boundaries are projected into a fresh keyspace by the real
``Projector`` (``tests.support.ui_demo``); dead letters, a consumer group's
committed offset and a worker trigger state with a job in flight are written
to fresh Kafka topics. Then ``distill ui --port 0 --allow-writes`` runs as a
subprocess (this tree's code) and Selenium drives Debian's Chromium through
its pages. Screenshots of the main pages go to ``.distill/screenshots/``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
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

from schemas.dead_letter import DeadLetter
from schemas.settings import Settings
from streams.dead_letters import REDRIVE_HEADER
from tests.support import ui_demo
from tests.support.browser import ensure_chromium, full_page_screenshot, start_driver
from tests.support.ui_demo import DemoSeed

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / ".distill" / "screenshots"
IN_FLIGHT_JOB = "job-ui-in-flight"


@dataclass
class UIEnv:
    settings: Settings
    seed: DemoSeed
    url: str
    proc: subprocess.Popen[str]
    log_path: Path
    driver: Any
    group: str
    redrivable: str
    changelog: str

    def open(self, path: str, **params: str) -> None:
        self.driver.get(self.url.rstrip("/") + path + (("?" + urlencode(params)) if params else ""))

    def session_params(self) -> dict[str, str]:
        k = self.seed.key
        return {"app": k.app_name, "user": k.user_id, "id": k.session_id}

    def shot(self, name: str) -> Path:
        return full_page_screenshot(self.driver, SCREENSHOTS / name)

    def rows(self, selector: str) -> list[dict[str, str]]:
        script = (
            "return [...document.querySelectorAll(arguments[0])].map(el => Object.assign({_class: el.className, "
            "_text: el.innerText}, el.dataset));"
        )
        return list(self.driver.execute_script(script, selector))


def _settings(base: Settings, suffix: str) -> Settings:
    data = base.model_dump()
    data["cassandra"]["keyspace"] = f"t_{suffix}"
    for name in ("events", "jobs", "summaries", "dead_letters"):
        data["topics"][name] = f"t-{suffix}.{name}"
    data["topics"]["partitions"] = 2
    data["worker"]["app_id"] = f"t-{suffix}"
    return Settings(**data)


def _env_for(settings: Settings) -> dict[str, str]:
    t = settings.topics
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DISTILL_CASSANDRA__KEYSPACE": settings.cassandra.keyspace,
        "DISTILL_TOPICS__EVENTS": t.events,
        "DISTILL_TOPICS__JOBS": t.jobs,
        "DISTILL_TOPICS__SUMMARIES": t.summaries,
        "DISTILL_TOPICS__DEAD_LETTERS": t.dead_letters,
        "DISTILL_TOPICS__PARTITIONS": str(t.partitions),
        "DISTILL_WORKER__APP_ID": settings.worker.app_id,
        "DISTILL_WORKER__LOG_JSON": "false",
    }


def _letter(settings: Settings, offset: int, value: bytes, error_class: str, reason: str, key: bytes) -> DeadLetter:
    return DeadLetter(
        source_topic=settings.topics.events, source_partition=0, source_offset=offset,
        key_b64=base64.b64encode(key).decode(), value_b64=base64.b64encode(value).decode(), error_class=error_class,
        reason=reason, stage="track", failed_at=datetime(2026, 5, 2, 11, 0, offset % 60, tzinfo=UTC),
    )  # fmt: skip


async def _kafka_setup(settings: Settings, seed: DemoSeed, group: str, changelog: str) -> str:
    """Dead letters, a group 2 records behind on the events topic, a trigger state with a job in flight."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from streams.kafka_config import common_kwargs, consumer_kwargs, producer_kwargs
    from streams.rules.trigger_state import InFlight, SessionTriggerState
    from streams.topics_admin import ensure_topics

    await ensure_topics(settings)
    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(changelog, 1, 1)])
    finally:
        await admin.close()
    key = seed.key.kafka_key()
    event = json.dumps(ui_demo.load_demo_session(seed.key.session_id)[6]).encode()
    letters = [
        _letter(settings, 7, event, "RetryableError", "cassandra unavailable: gave up after 5 attempts", key),
        _letter(settings, 8, b"{not json", "RecordDecodeError", "not valid JSON: Expecting property name", key),
        _letter(settings, 9, b"x" * 10, "RecordTooLargeError", "value truncated to 10 of 9000000 bytes", key),
    ]
    k = seed.key
    job = InFlight(IN_FLIGHT_JOB, "ev-046", int(time.time() * 1e6) - 5_000_000)
    busy = SessionTriggerState(k.app_name, k.user_id, k.session_id, "", in_flight=job)
    producer = AIOKafkaProducer(**producer_kwargs(settings.kafka))
    await producer.start()
    try:
        for letter in letters:
            await producer.send_and_wait(settings.topics.dead_letters, letter.model_dump_json().encode(), key=key)
        for _ in range(3):
            await producer.send_and_wait(settings.topics.events, event, key=key, partition=0)
        await producer.send_and_wait(changelog, busy.to_bytes(), key=f"{k.session_id}|".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(**consumer_kwargs(settings.kafka), group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(settings.topics.events, 0)
        consumer.assign([tp])
        await consumer.commit({tp: 1})
    finally:
        await consumer.stop()
    return f"{settings.topics.events}/0/7"


async def _kafka_teardown(settings: Settings, changelog: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    from streams.kafka_config import common_kwargs

    admin = AIOKafkaAdminClient(**common_kwargs(settings.kafka))
    await admin.start()
    try:
        t = settings.topics
        await admin.delete_topics([t.events, t.jobs, t.summaries, t.dead_letters, changelog])
    except Exception:  # best effort: leftover test topics harm nobody
        pass
    finally:
        await admin.close()


@pytest.fixture(scope="module")
def ui(service_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UIEnv]:
    from projections.cassandra_session import connect
    from projections.migrations import apply_migrations
    from projections.projector import Projector
    from streams.rules.tokens import get_token_counter

    ensure_chromium()  # skips before anything is written when there is no browser
    suffix = uuid.uuid4().hex[:8]
    settings = _settings(service_settings, suffix)
    group, changelog = f"t-{suffix}-readers", f"t-{suffix}-track-state-changelog"
    cluster, session = connect(settings.cassandra)
    proc = None
    driver = None
    try:
        apply_migrations(session, settings.cassandra)
        projector = Projector(
            session, settings.cassandra.keyspace, events_topic=settings.topics.events,
            summaries_topic=settings.topics.summaries, consumer_group=f"t-{suffix}-projector",
            count_tokens=get_token_counter().count_message,
        )  # fmt: skip
        seed = asyncio.run(ui_demo.seed_demo(projector, f"demo-ui-{suffix}"))
        redrivable = asyncio.run(_kafka_setup(settings, seed, group, changelog))
        log_path = tmp_path_factory.mktemp("ui") / "distill-ui.log"
        log_file = log_path.open("w")
        proc = subprocess.Popen(
            [sys.executable, "-c", "from streams.cli.main import main; main()", "ui", "--port", "0", "--allow-writes"],
            cwd=ROOT, env=_env_for(settings), stdout=subprocess.PIPE, stderr=log_file, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "distill ui → http://127.0.0.1:" in line, (line, log_path.read_text())
        url = line.split("→", 1)[1].split()[0]
        driver = start_driver()
        yield UIEnv(settings, seed, url, proc, log_path, driver, group, redrivable, changelog)
    finally:
        if driver is not None:
            driver.quit()
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.cassandra.keyspace}", timeout=60)
        cluster.shutdown()
        asyncio.run(_kafka_teardown(settings, changelog))


def test_the_sessions_page_lists_the_demo_session_with_its_three_summary_keys(ui: UIEnv) -> None:
    ui.open("/", q=ui.seed.key.session_id)
    rows = ui.rows("tr.session-row")
    assert [r["sessionId"] for r in rows] == [ui.seed.key.session_id]
    text = rows[0]["_text"]
    assert "46" in text  # events
    for label in ("full session v2", "travel-agent/itinerary v1", "travel-agent/research v2"):
        assert label in " ".join(text.split()), text
    ui.shot("sessions.png")
    ui.open("/", q="no-such-session-anywhere")
    assert ui.rows("tr.session-row") == []


def test_each_boundary_marker_sits_between_the_right_events(ui: UIEnv) -> None:
    from streams.cli.demo_cmd import demo_url

    # the address `make demo` ends with, on this server's port
    ui.driver.get(demo_url(ui.seed.key, int(ui.url.rstrip("/").rsplit(":", 1)[1])))
    assert ui.driver.find_element("css selector", "h1").text == ui.seed.key.session_id
    rows = ui.rows("#timeline tbody tr")
    order = [r.get("eventId") or f"marker:{r['keys']}" for r in rows]
    expected = {
        "": ("ev-035", "ev-036"),
        ui_demo.RESEARCH: ("ev-023", "ev-024"),
        ui_demo.ITINERARY: ("ev-029", "ev-030"),
    }
    for filter_key, (before, after) in expected.items():
        at = next(i for i, r in enumerate(rows) if "boundary" in r["_class"] and filter_key in r["keys"].split("|"))
        assert rows[at]["afterEvent"] == ui.seed.boundaries[filter_key] == before
        assert order[at - 1] == before and order[at + 1] == after, order[at - 2 : at + 3]
    # every stored complete event is on the timeline, in order (ev-041 is a partial event: never stored)
    assert [x for x in order if not x.startswith("marker:")] == [e for e in ui.seed.event_ids if e != "ev-041"]
    headers = ui.driver.execute_script("return [...document.querySelectorAll('#timeline th.keycol')].map(h => h.title)")
    assert headers == ["full session", ui_demo.ITINERARY, ui_demo.RESEARCH]
    # the research summary does not take the itinerary branch's events; both take the planner's
    states = ui.driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#timeline tr.event')].map(tr => [tr.dataset.eventId,"
        " Object.fromEntries([...tr.querySelectorAll('td.st')].map(td => [td.dataset.key, td.dataset.state]))]))"
    )
    assert states["ev-025"] == {"": "hidden", ui_demo.ITINERARY: "hidden", ui_demo.RESEARCH: "outside"}
    assert states["ev-030"] == {"": "hidden", ui_demo.ITINERARY: "visible", ui_demo.RESEARCH: "visible"}
    assert states["ev-036"] == {"": "visible", ui_demo.ITINERARY: "visible", ui_demo.RESEARCH: "visible"}
    # what the next prompt of the full session carries: the read API's events after the boundary
    carried = [r["eventId"] for r in ui.rows("div.carried[data-filter-key=''] tr[data-event-id]")]
    assert carried == ["ev-036", "ev-037", "ev-038", "ev-039", "ev-040", "ev-042", "ev-043", "ev-044", "ev-045",
                       "ev-046"]  # fmt: skip
    hidden = [
        r["eventId"] for r in ui.rows(f"div.hidden-history[data-filter-key='{ui_demo.RESEARCH}'] tr[data-event-id]")
    ]
    assert hidden[0] == "ev-001" and hidden[-1] == "ev-023" and "ev-024" not in hidden and len(hidden) == 23
    ui.shot("session.png")


def test_session_search_finds_a_detail_only_the_hidden_history_holds(ui: UIEnv) -> None:
    for text in (ui_demo.FULL_V1, ui_demo.FULL_V2, ui_demo.RESEARCH_V1, ui_demo.RESEARCH_V2, ui_demo.ITINERARY_V1):
        assert ui_demo.HIDDEN_DETAIL not in text  # no summary kept it
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    ui.open("/session", **ui.session_params())
    ui.driver.find_element(By.ID, "search-query").send_keys(ui_demo.HIDDEN_DETAIL)
    Select(ui.driver.find_element(By.ID, "search-scope")).select_by_value("current_hidden")
    ui.driver.find_element(By.ID, "search-submit").click()
    hits = ui.rows("#search-results tr.hit")
    assert {h["eventId"] for h in hits} >= {"ev-010"}, hits
    assert all("current_hidden" in h["_text"] for h in hits)
    assert ui_demo.HIDDEN_DETAIL in hits[0]["_text"]
    ui.shot("search.png")
    # load the tool result around the hit, as session_load does
    ui.driver.find_element(By.CSS_SELECTOR, "#search-results tr.hit[data-event-id='ev-010'] a").click()
    anchor = ui.rows("#load-results article.anchor")
    assert [a["eventId"] for a in anchor] == ["ev-010"] and '"pnr": "X7Q2LM"' in anchor[0]["_text"]
    # scope matters: the e-mail id was sent after the boundary, so the summary hides nothing of it
    ui.open("/recall", **ui.session_params(), tool="session_search", query="m-9921", scope="current_hidden")
    assert ui.rows("#search-results tr.hit") == [] and ui.rows("#no-results")
    ui.open("/recall", **ui.session_params(), tool="session_search", query="m-9921", scope="current_session")
    assert [h["eventId"] for h in ui.rows("#search-results tr.hit")][:1] == ["ev-045"]


def test_a_summary_shows_its_versions_the_cjk_diff_and_its_report(ui: UIEnv) -> None:
    ui.open("/summary", **ui.session_params(), key=ui_demo.RESEARCH)
    assert [r["version"] for r in ui.rows("#versions tbody tr")] == ["2", "1"]
    deleted = ui.driver.execute_script("return [...document.querySelectorAll('#diff del')].map(x => x.textContent)")
    inserted = ui.driver.execute_script("return [...document.querySelectorAll('#diff ins')].map(x => x.textContent)")
    assert "需提前两周" in "".join(deleted) and "5月14日20:00" in "".join(inserted)
    assert "预订" not in "".join(deleted)  # kept in both versions: per character, not per sentence
    report = ui.rows("#report")[0]["_text"]
    assert "force" in report and "ev-020" in report and "ev-023" in report
    assert "6000" in ui.rows("#calls tbody tr")[0]["_text"]
    ui.shot("summary.png")


def test_consumer_lag_per_group_and_partition_and_the_job_in_flight(ui: UIEnv) -> None:
    ui.open("/ops")
    lag = [" ".join(r["_text"].split()) for r in ui.rows("#lag tbody tr")]
    assert not ui.rows("p.error"), ui.rows("p.error")
    assert f"{ui.group} {ui.settings.topics.events} 0 1 3 2 kafka" in lag, lag
    jobs = ui.rows("#jobs tbody tr")
    assert len(jobs) == 1 and IN_FLIGHT_JOB in jobs[0]["_text"] and ui.seed.key.session_id in jobs[0]["_text"]
    ui.shot("ops.png")


def test_dead_letters_filter_by_reason_and_redrive_publishes_the_original_record(ui: UIEnv) -> None:
    from selenium.webdriver.common.by import By

    ui.open("/dead-letters")
    assert len(ui.rows("#dead-letters tr.letter")) == 3
    ui.open("/dead-letters", reason="json")
    assert [r["coordinates"] for r in ui.rows("#dead-letters tr.letter")] == [f"{ui.settings.topics.events}/0/8"]
    ui.open("/dead-letters")
    ui.shot("dead_letters.png")
    truncated = ui.driver.find_element(By.CSS_SELECTOR, f"tr[data-coordinates='{ui.settings.topics.events}/0/9']")
    assert truncated.find_elements(By.CSS_SELECTOR, "button.redrive") == []  # cannot be redriven
    button = ui.driver.find_element(By.CSS_SELECTOR, f"tr[data-coordinates='{ui.redrivable}'] button.redrive")
    button.click()
    notice = _after_post(ui, "notice")
    assert notice.startswith(f"redriven {ui.redrivable} → {ui.settings.topics.events}/"), notice
    landed = [h for _, headers in asyncio.run(_read_events(ui.settings, 4)) for h in headers]
    assert landed == [ui.redrivable]


def test_delete_publishes_delete_session_for_this_session_only(ui: UIEnv) -> None:
    from selenium.webdriver.common.by import By

    ui.open("/session", **ui.session_params())
    ui.driver.find_element(By.CSS_SELECTOR, "form.danger button").click()
    ui.driver.switch_to.alert.accept()
    assert "delete_session" in _after_post(ui, "message")
    records = [json.loads(v) for v, _ in asyncio.run(_read_events(ui.settings, 5))]
    deletes = [r for r in records if r.get("type") == "delete_session"]
    k = ui.seed.key
    assert [(d["app_name"], d["user_id"], d["session_id"]) for d in deletes] == [(k.app_name, k.user_id, k.session_id)]


def _after_post(ui: UIEnv, element_id: str) -> str:
    """The text of ``element_id`` on the page a form post leads to (a click returns before that page loads)."""
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


async def _read_events(settings: Settings, expected: int) -> list[tuple[bytes, list[str]]]:
    """The events topic's records (until ``expected`` arrived or 10 s passed): value and redrive headers."""
    from aiokafka import AIOKafkaConsumer

    from streams.kafka_config import consumer_kwargs

    consumer = AIOKafkaConsumer(settings.topics.events, **consumer_kwargs(settings.kafka), group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    try:
        found: list[tuple[bytes, list[str]]] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(found) < expected:
            for msgs in (await consumer.getmany(timeout_ms=500)).values():
                found += [(m.value, [v.decode() for k, v in (m.headers or ()) if k == REDRIVE_HEADER]) for m in msgs]
        return found
    finally:
        await consumer.stop()


def test_the_access_log_carries_no_message_content(ui: UIEnv) -> None:
    access = [line for line in ui.log_path.read_text().splitlines() if "distill.ui.access" in line]
    assert any("GET /recall ?app,id,query,scope,tool,user 200" in line for line in access), access
    assert any("POST /dead-letters/redrive 303" in line for line in access), access
    for line in access:
        for content in (ui_demo.HIDDEN_DETAIL, "m-9921", "json", ui.seed.key.session_id):
            assert content not in line, line
