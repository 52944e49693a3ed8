"""``distill epochs``: list the summary epochs replays built, switch sessions to one (or back)."""

from __future__ import annotations

import asyncio

import click

from schemas import EpochAdopted, SessionKey
from schemas.epochs import EPOCH_ALREADY_SERVED, EPOCH_MISSING_HISTORY, EPOCH_NOT_CAUGHT_UP
from schemas.settings import Settings, load_settings


def adopt_sessions(
    settings: Settings, epoch: int, specs: set[str], *, require_caught_up: bool, source: str = "",
    timeout: float = 60.0, resume_hint: str | None = None, exclude: set[SessionKey] | None = None,
) -> dict[str, int]:  # fmt: skip
    """Switch the sessions ``specs`` selects (all when empty), but none of ``exclude``, to ``epoch``;
    prints and returns the outcome counts."""
    from streams.app.factory import replay_accept
    from streams.cli.epochs_admin import epoch_heads, request_adoptions, tail_runs

    accept = replay_accept(specs, frozenset(exclude or ()))
    sessions = asyncio.run(epoch_heads(settings, epoch, accept))
    tails = asyncio.run(tail_runs(settings, epoch))
    if tails:
        click.echo(f"epoch {epoch} was built by 'distill replay --from-latest' ({', '.join(tails)}): it holds "
                   f"only what arrived after the run began; only sessions that began after it can switch")  # fmt: skip
    answers = asyncio.run(request_adoptions(
        settings, epoch, sessions.values(), require_caught_up=require_caught_up, source=source, timeout=timeout,
        require_known_start=bool(tails),
    ))  # fmt: skip
    counts = {"adopted": 0, "already": 0, "behind": 0, "missing": 0, "refused": 0, "unanswered": 0}
    behind: list[str] = []
    for key, answer in sorted(answers.items()):
        name = "/".join(key)
        if isinstance(answer, EpochAdopted):
            counts["adopted"] += 1
        elif answer is None:
            counts["unanswered"] += 1
            click.echo(f"  {name}: no answer within {timeout:g}s (is a worker running?)")
        elif answer.error_class == EPOCH_ALREADY_SERVED:
            counts["already"] += 1
        elif answer.error_class == EPOCH_NOT_CAUGHT_UP:
            counts["behind"] += 1
            behind.append(f"  {name}: {answer.reason}")
        else:
            counts["missing" if answer.error_class == EPOCH_MISSING_HISTORY else "refused"] += 1
            click.echo(f"  {name}: {answer.error_class}: {answer.reason}")
    for line in behind[:20]:
        click.echo(line)
    missing = f", {counts['missing']} lacking earlier history (not switched, --force neither)"
    click.echo(
        f"epoch {epoch}: {counts['adopted']} sessions switched, {counts['already']} already on it, "
        f"{counts['behind']} not caught up, {counts['refused']} refused, {counts['unanswered']} unanswered"
        f"{missing if counts['missing'] else ''}"
    )
    if counts["behind"] and resume_hint:
        click.echo(f"  the live line moved on meanwhile: '{resume_hint}' catches them up and switches them")
    return counts


def session_key(spec: str) -> SessionKey:
    parts = spec.split("/")
    if len(parts) != 3 or not all(parts):
        raise click.BadParameter(f"{spec!r} is not APP/USER/SESSION")
    return SessionKey(*parts)


@click.group("epochs")
def command() -> None:
    """Summary epochs: each replay builds one; a session is served from one at a time (see 'distill show --epochs')."""


@command.command("list")
def list_epochs() -> None:
    """The epochs replay runs built (epoch 0 is the live line) and their output topics."""
    from streams.cli.epochs_admin import replay_epochs

    settings = load_settings()
    found = asyncio.run(replay_epochs(settings))
    click.echo(f"epoch 0: the live line ({settings.topics.summaries})")
    for epoch, topics in sorted(found.items()):
        click.echo(f"epoch {epoch}: " + ", ".join(topics))


@command.command("adopt")
@click.argument("epoch", type=click.IntRange(min=0))
@click.option("--session", "sessions", multiple=True, metavar="APP/USER/SESSION",
              help="Only this session (repeatable; a bare SESSION id: under every app and user).")  # fmt: skip
@click.option("--app", "apps", multiple=True, metavar="APP", help="Only the sessions of this app (repeatable).")
@click.option("--force", is_flag=True,
              help="Switch even where the epoch has not caught up with the live line (the next passes roll "
                   "its heads forward over every later event: nothing is lost; prompts carry more events "
                   "meanwhile). Never where the epoch's summaries start after the session's first record "
                   "(EpochMissingHistory): nothing would roll the earlier events forward.")  # fmt: skip
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for the workers' answers.")
def adopt(epoch: int, sessions: tuple[str, ...], apps: tuple[str, ...], force: bool, timeout: float) -> None:
    """Serve the selected sessions (default: every session of the epoch) from EPOCH.

    EPOCH 0 switches back to the live line, from where each session left it; a
    replay epoch is switched to from where its run left it, or, for a session
    served from it before, from where the session left it. Each session's worker
    switches all its keys at once and records it on the summaries topic; the
    read side follows.
    """
    settings = load_settings()
    specs = {*sessions, *(f"{app}/*/*" for app in apps)}
    counts = adopt_sessions(settings, epoch, specs, require_caught_up=epoch != 0 and not force, source="cli",
                            timeout=timeout)  # fmt: skip
    if counts["unanswered"] or counts["refused"] or counts["missing"]:
        raise SystemExit(1)


__all__ = ["adopt_sessions", "command"]
