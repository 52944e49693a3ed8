"""How ``distill replay`` reads its group's progress while it follows the replay worker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from aiokafka.errors import GroupAuthorizationFailedError, GroupCoordinatorNotAvailableError

from streams.cli.replay_cmd import _committed, llm_shares, settled, worker_logs, worker_state


class Admin:
    """Answers ``list_consumer_group_offsets`` with a value or an error, as the broker would."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def list_consumer_group_offsets(self, group: str) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def test_a_fresh_broker_without_a_coordinator_yet_means_nothing_committed() -> None:
    # Seen on a fresh broker: the two replays of the concurrency test asked before the broker
    # had created its offsets topic, and the command died with this error.
    assert await _committed(Admin(GroupCoordinatorNotAvailableError("Unable to get coordinator id")), "g") == {}


async def test_committed_offsets_are_passed_through() -> None:
    assert await _committed(Admin({"tp": 7}), "g") == {"tp": 7}


async def test_an_error_that_retrying_cannot_cure_still_ends_the_command() -> None:
    with pytest.raises(GroupAuthorizationFailedError):
        await _committed(Admin(GroupAuthorizationFailedError("denied")), "g")


def test_a_replay_is_settled_once_every_event_job_and_summary_is_committed() -> None:
    assert settled(120, 120, 0)
    assert not settled(119, 120, 0)  # an event not yet consumed
    assert not settled(120, 120, 3)  # jobs or summaries not yet answered
    assert not settled(0, 120, 0)  # the worker has not committed yet
    assert settled(0, 0, 0)  # an empty events topic: nothing to do (it used to wait for --timeout)


@pytest.mark.parametrize(("total", "workers"), [(1, 1), (2, 2), (7, 2), (8, 3), (64, 4)])
def test_the_llm_bound_is_shared_so_the_workers_together_make_at_most_it(total: int, workers: int) -> None:
    shares = llm_shares(total, workers)
    assert len(shares) == workers
    assert sum(shares) == total
    assert min(shares) >= 1 and max(shares) - min(shares) <= 1


def test_fewer_llm_calls_than_workers_is_refused_naming_the_option() -> None:
    with pytest.raises(click.BadParameter, match="3 workers") as raised:
        llm_shares(2, 3)
    assert raised.value.param_hint == "--llm-concurrency"


def test_the_first_worker_keeps_the_log_name_of_a_one_worker_run() -> None:
    logs = worker_logs(Path("/w"), "e3-run", 3)
    assert logs == [Path("/w/e3-run.log"), Path("/w/e3-run.w2.log"), Path("/w/e3-run.w3.log")]


def _log(*entries: dict[str, Any]) -> str:
    return "\n".join(["[^--LeanMonitor]: Starting...", *(json.dumps(e) for e in entries)])


START = {"ts": "2026-12-05T00:28:33.9+00:00", "level": "info", "msg": "summary cache preload started"}


def test_a_stalled_run_says_its_preload_is_still_running() -> None:
    assert worker_state(_log(START)) == (
        "summary cache preload still running (started 2026-12-05T00:28:33.9+00:00; jobs wait for it), no warning"
    )


def test_a_stalled_run_says_its_preload_ended_and_the_last_warning_where_it_waits() -> None:
    """The stall of the joining-worker test: preloaded at once, then its first jobs never acknowledged."""
    done = {"level": "info", "msg": "summary cache preloaded", "entries": 96, "seconds": 0.1, "given_up": 0}
    stuck = {"level": "warning", "logger": "streams.app.slow_wait", "msg": "produce not acknowledged by the broker: "
             "still waiting after 80 s", "records": 47, "leaders": "t.jobs[0]=None"}  # fmt: skip
    state = worker_state(_log(START, done, stuck))
    assert state.startswith("summary cache preloaded (96 entries in 0.1 s, 0 partitions given up), last warning: "
                            "produce not acknowledged by the broker: still waiting after 80 s (")  # fmt: skip
    assert "leaders=t.jobs[0]=None" in state


def test_a_worker_that_never_started_its_preload_says_so() -> None:
    assert worker_state("no json at all") == "summary cache preload not started, no warning"
