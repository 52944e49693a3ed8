"""Deciding an epoch switch (pure): the answer to an ``AdoptEpoch`` from the session's heads.

The summarize side calls :func:`decide_adoption` under the head locks of every
key of the session, with the heads of the epoch the session is served from
(``live``) and the heads an earlier switch left on the requested epoch
(``parked``). The answer is the ``EpochAdopted`` record to publish, or the
``SummaryFailure`` refusing it (``schemas.epochs.ADOPTION_REFUSED``).

The heads of the requested epoch are, per key, the newer of the command's
(what the replay left) and the parked one (the line continued by the live
worker before the session switched away from it). With ``require_caught_up``
the epoch must reach the live line: for every key the live line has a head
for, the epoch's head covers that head's boundary (:func:`reaches`).

Whatever ``require_caught_up`` says, every head the switch would serve must
roll forward the session's whole history: its chain must start at or before
the session's first record as the live worker knows it (``first_offset``, the
full-session key's ``TrackedKey.first_offset``), else the events before the
chain's start would be in no served summary while the request is cut at the
head's boundary (:func:`missing_history`; a replay Kafka's retention had dropped
the session's first records from, or a ``--from-latest`` run). A head whose
chain start is not known (a summary of an older build), or a session whose
first offset is not known (deleted, no event since), is judged as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from schemas import AdoptedHead, AdoptEpoch, EpochAdopted, SummaryFailure
from schemas.epochs import EPOCH_ALREADY_SERVED, EPOCH_MISSING_HISTORY, EPOCH_NOT_CAUGHT_UP, EPOCH_UNKNOWN
from streams.app.heads import Head, head_of


def reaches(epoch_head: Head, live_head: Head) -> bool:
    """Whether ``epoch_head`` covers every event ``live_head`` covers (its boundary is at or after)."""
    if epoch_head.boundary.last_event_id is not None and epoch_head.boundary.last_event_id == (
        live_head.boundary.last_event_id
    ):
        return True
    if epoch_head.events_offset is not None and live_head.events_offset is not None:
        return epoch_head.events_offset >= live_head.events_offset
    return epoch_head.boundary.cutoff_at >= live_head.boundary.cutoff_at


def target_heads(command: AdoptEpoch, parked: Mapping[str, Head] | None) -> dict[str, Head]:
    """Filter key → the requested epoch's head: the command's or the parked one, the newer version."""
    out = dict(parked or {})
    for adopted in command.heads:
        head = head_of(adopted.summary, adopted.events_offset)
        current = out.get(adopted.summary.filter_key)
        if current is None or current.version < head.version:
            out[adopted.summary.filter_key] = head
    return out


def lagging(target: Mapping[str, Head], live: Mapping[str, Head]) -> list[str]:
    """``key: epoch at X, live at Y`` for every live key the epoch does not reach."""
    out = []
    for key, head in sorted(live.items()):
        found = target.get(key)
        if found is None:
            out.append(f"{key or '(session)'}: no summary in the epoch, live v{head.version} at "
                       f"{head.boundary.last_event_id}")  # fmt: skip
        elif not reaches(found, head):
            out.append(f"{key or '(session)'}: epoch v{found.version} at {found.boundary.last_event_id}, "
                       f"live v{head.version} at {head.boundary.last_event_id}")  # fmt: skip
    return out


def starts_late(head: Head, first_offset: int | None) -> bool:
    """Whether ``head``'s chain starts after the session's first record (it lacks history before it)."""
    start = head.chain_from_offset
    return start is not None and first_offset is not None and start > first_offset


def missing_history(target: Mapping[str, Head], first_offset: int | None) -> list[str]:
    """``key: vN's chain starts at X, the session at Y`` per head of ``target`` starting late (:func:`starts_late`)."""
    out = []
    for key, head in sorted(target.items()):
        if starts_late(head, first_offset):
            out.append(f"{key or '(session)'}: v{head.version}'s chain starts at events offset "
                       f"{head.chain_from_offset}, the session at {first_offset}")  # fmt: skip
    return out


def unknown_starts(target: Mapping[str, Head], first_offset: int | None) -> list[str]:
    """Why a head of ``target`` cannot be shown to start with the session (``require_known_start``)."""
    if first_offset is None:
        return ["the session's first record is not known to this worker (none folded since its state began)"]
    return [f"{key or '(session)'}: v{head.version} does not say where its chain starts"
            for key, head in sorted(target.items()) if head.chain_from_offset is None]  # fmt: skip


def decide_adoption(
    command: AdoptEpoch,
    served_epoch: int,
    live: Mapping[str, Head],
    parked: Mapping[str, Head] | None,
    now: datetime,
    first_offset: int | None = None,
) -> EpochAdopted | SummaryFailure:
    """The switch of ``command``'s session to ``command.epoch``, or why not (see the module docstring).

    ``parked``: the heads the session left on the epoch (``None``: never served from it).
    ``first_offset``: the events-topic offset of the session's first record as the live
    worker knows it (``None``: not known; no head is then judged by its chain's start).
    Epoch 0 is where every session started: switching back to it without heads
    (the session had none when it left) starts every key over.
    """

    def refuse(error_class: str, reason: str) -> SummaryFailure:
        return SummaryFailure(
            app_name=command.app_name, user_id=command.user_id, session_id=command.session_id,
            job_id=f"adopt:{command.command_id}", reply_to=command.reply_to, error_class=error_class,
            reason=reason[:2000], created_at=now,
        )  # fmt: skip

    session = "/".join(command.session_key)
    if command.epoch == served_epoch:
        return refuse(EPOCH_ALREADY_SERVED, f"session {session} is already served from epoch {served_epoch}")
    target = target_heads(command, parked)
    if not target and live and parked is None and command.epoch != 0:
        return refuse(EPOCH_UNKNOWN, f"epoch {command.epoch} holds no summary of session {session} "
                                     f"(neither the command nor an earlier switch brought any)")  # fmt: skip
    lacking = missing_history(target, first_offset)
    if command.require_known_start and not lacking:
        lacking = unknown_starts(target, first_offset)
    if lacking:
        return refuse(EPOCH_MISSING_HISTORY, (
            f"epoch {command.epoch} lacks the start of session {session}'s history: its summaries roll forward "
            f"nothing of the events before their chain's start (a replay that began after the session's first "
            f"record: --from-latest, or Kafka's retention had dropped it), no later pass reads them and the "
            f"request is cut at their boundary; not switched, --force neither: " + "; ".join(lacking)
        ))  # fmt: skip
    behind = lagging(target, live)
    if behind and command.require_caught_up:
        lead = f"epoch {command.epoch} has not caught up with the live line (epoch {served_epoch}) of session {session}"
        return refuse(EPOCH_NOT_CAUGHT_UP, f"{lead}: " + "; ".join(behind))
    return EpochAdopted(
        app_name=command.app_name,
        user_id=command.user_id,
        session_id=command.session_id,
        epoch=command.epoch,
        previous_epoch=served_epoch,
        heads=tuple(adopted(h) for _, h in sorted(target.items())),
        replaced=tuple(adopted(h) for _, h in sorted(live.items())),
        command_id=command.command_id,
        reply_to=command.reply_to,
        caught_up=not behind,
        source=command.source,
        created_at=now,
    )


def adopted(head: Head) -> AdoptedHead:
    return head.adopted()


__all__ = ["decide_adoption", "lagging", "missing_history", "reaches", "starts_late", "target_heads"]
