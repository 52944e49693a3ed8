"""How ``distill replay`` reads its group's progress while it follows the replay worker."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import GroupAuthorizationFailedError, GroupCoordinatorNotAvailableError

from streams.cli.replay_cmd import _committed, settled


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
