"""Summary epochs: which line of summaries a session is served from, as records.

Every ``SessionSummary`` belongs to an *epoch*, a line of versions: epoch 0 is
the live line (a record without the field is epoch 0), epoch N the line the
N-th ``distill replay`` built (typically after a prompt or model change).
Versions count within an epoch; listings order them by ``(epoch, version)``.

Which epoch a session is served from is itself recorded on the summaries
topic, so re-reading that topic rebuilds it:

* :class:`AdoptEpoch` (a command on the events topic, ordered with the
  session's events) asks the worker owning the session to serve ``epoch``
  from now on. It carries the epoch's latest summary per filter key as the
  replay left them (``heads``); a switch back to an epoch the session was
  served from before needs none (the worker kept them, see below).
* :class:`EpochAdopted` (summaries topic, written by that worker under the
  session's head locks, so no summary of the old line can follow it) is the
  switch: from its position on, the session's summaries roll forward
  ``heads`` of ``epoch``. It also carries the heads it replaced, so the log
  holds what a later switch back starts from. The projector applies it to the
  read side in one single-partition write (every key of the session at once).

A refused adoption (the epoch is not caught up with the live line, its
summaries lack history the live line holds, or the session is already served
from it) is answered with a ``SummaryFailure``
whose ``error_class`` is one of :data:`ADOPTION_REFUSED`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, field_validator, model_validator

from schemas.base import SCHEMA_VERSION, ContractModel, SessionKey, SessionRecord, WireBool, WireInt, utc_instant
from schemas.summaries import SessionSummary

EPOCH_NOT_CAUGHT_UP = "EpochNotCaughtUp"
"""The epoch's heads do not reach the live line's boundaries (adopting it would serve less)."""
EPOCH_MISSING_HISTORY = "EpochMissingHistory"
"""A head of the epoch rolls forward a chain that starts after the session's first record: serving
it would leave the events before that start in no served summary, cut from the request at its
boundary. Refused even when ``require_caught_up`` is off (``--force``): no later pass reads them."""
EPOCH_ALREADY_SERVED = "EpochAlreadyServed"
EPOCH_UNKNOWN = "EpochUnknown"
"""Neither the command nor the worker's log holds heads of the epoch for the session."""
ADOPTION_REFUSED = frozenset({EPOCH_NOT_CAUGHT_UP, EPOCH_MISSING_HISTORY, EPOCH_ALREADY_SERVED, EPOCH_UNKNOWN})


class AdoptedHead(ContractModel):
    """The latest summary of one filter key in an epoch, and where its boundary event is.

    ``events_offset``: the events-topic offset (the session's partition) of the
    last event the summary covers: the next pass reads its delta after it.
    """

    summary: SessionSummary
    events_offset: int | None = Field(default=None, ge=0)


def _check_heads(session: SessionKey, epoch: int, heads: tuple[AdoptedHead, ...]) -> None:
    keys = set()
    for head in heads:
        s = head.summary
        if s.session_key != session:
            raise ValueError(f"head of key {s.filter_key!r} belongs to session {'/'.join(s.session_key)}")
        if s.epoch != epoch:
            raise ValueError(f"head of key {s.filter_key!r} is of epoch {s.epoch}, not {epoch}")
        if s.filter_key in keys:
            raise ValueError(f"two heads for key {s.filter_key!r}")
        keys.add(s.filter_key)


class AdoptEpoch(SessionRecord):
    """Serve the session from ``epoch`` (a command; see the module docstring).

    ``require_caught_up`` (what ``distill replay`` sends): refused unless, for
    every key the live line has summarized, the epoch's head reaches the live
    head's boundary. Off (a manual switch, or back to an older epoch): the
    worker adopts whatever the epoch holds, and its next pass of each key rolls
    that head forward over every event after it — nothing is lost, only the
    first prompts after the switch carry more unsummarized events. Either way
    a head whose chain starts after the session's first record (its
    ``chain_from_offset``) is refused (:data:`EPOCH_MISSING_HISTORY`): no pass
    would ever read the events before that start again.

    ``require_known_start`` (what is sent for an epoch a ``distill replay
    --from-latest`` run built): refused as well unless the worker knows where the
    session's history starts and every head says where its chain starts. Such an
    epoch serves only the sessions that began after the run started; one whose
    start cannot be compared is not switched.
    """

    type: Literal["adopt_epoch"] = "adopt_epoch"
    command_id: str = Field(min_length=1)
    epoch: WireInt = Field(ge=0)
    heads: tuple[AdoptedHead, ...] = ()
    require_caught_up: WireBool = True
    require_known_start: WireBool = False
    reply_to: str | None = None
    source: str = ""
    """Where the heads come from (the replay run), for the record."""

    @model_validator(mode="after")
    def _heads_match(self) -> AdoptEpoch:
        _check_heads(self.session_key, self.epoch, self.heads)
        return self


class EpochAdopted(ContractModel):
    """The session is served from ``epoch`` from this record on (see the module docstring).

    ``heads``: the epoch's latest summary per key, what the session's next
    passes roll forward (a key without one starts over from the session's
    first event). ``replaced``: the heads of ``previous_epoch`` at the switch.
    """

    schema_version: int = SCHEMA_VERSION
    type: Literal["epoch_adopted"] = "epoch_adopted"
    app_name: str = Field(min_length=1)
    user_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    epoch: int = Field(ge=0)
    previous_epoch: int = Field(ge=0)
    heads: tuple[AdoptedHead, ...] = ()
    replaced: tuple[AdoptedHead, ...] = ()
    command_id: str
    reply_to: str | None = None
    caught_up: bool = True
    """Every key's head reached the live line's boundary at the switch."""
    source: str = ""
    created_at: datetime

    @field_validator("created_at")
    @classmethod
    def _created_utc(cls, value: datetime) -> datetime:
        return utc_instant(value, "created_at")

    @property
    def session_key(self) -> SessionKey:
        return SessionKey(self.app_name, self.user_id, self.session_id)

    @model_validator(mode="after")
    def _heads_match(self) -> EpochAdopted:
        _check_heads(self.session_key, self.epoch, self.heads)
        _check_heads(self.session_key, self.previous_epoch, self.replaced)
        return self
