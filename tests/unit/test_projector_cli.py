"""``distill projector`` runs all three stages by default (nothing a user starts loses search); ``distill indexer``
one (the primary index stage, or with ``--deep`` the deep one)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

import streams.cli.indexer_cmd as indexer_cmd
import streams.cli.projector_cmd as projector_cmd


@pytest.fixture()
def started(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[str, str]]]:
    calls: list[list[tuple[str, str]]] = []

    async def fake(settings: Any, stages: list[tuple[str, str]], max_batch: int) -> None:
        calls.append(list(stages))

    monkeypatch.setattr(projector_cmd, "run_stages", fake)
    monkeypatch.setattr(indexer_cmd, "run_stages", fake)
    monkeypatch.setenv("DISTILL_WORKER__APP_ID", "acme")
    return calls


@pytest.mark.parametrize(
    ("args", "stages"),
    [
        ([], [("project", "acme-projector"), ("index", "acme-indexer"), ("index-deep", "acme-indexer-deep")]),
        (["--no-index"], [("project", "acme-projector")]),
        (["--no-deep"], [("project", "acme-projector"), ("index", "acme-indexer")]),
        (["--group", "g1"], [("project", "g1"), ("index", "g1-indexer"), ("index-deep", "g1-indexer-deep")]),
        # the default name given explicitly: the same indexer group as ``distill indexer`` (one index, not two)
        (["--group", "acme-projector", "--no-deep"], [("project", "acme-projector"), ("index", "acme-indexer")]),
        (["--group", "g1", "--index-group", "ix"], [("project", "g1"), ("index", "ix"), ("index-deep", "ix-deep")]),
    ],
)
def test_projector_stages_and_groups(started: list[Any], args: list[str], stages: list[tuple[str, str]]) -> None:
    result = CliRunner().invoke(projector_cmd.command, args)
    assert result.exit_code == 0, result.output
    assert started == [stages]


def test_indexer_runs_the_index_stage_alone(started: list[Any]) -> None:
    assert CliRunner().invoke(indexer_cmd.command, []).exit_code == 0
    assert CliRunner().invoke(indexer_cmd.command, ["--group", "ix2"]).exit_code == 0
    assert started == [[("index", "acme-indexer")], [("index", "ix2")]]


def test_indexer_deep_runs_the_deep_stage_behind_its_group(started: list[Any]) -> None:
    assert CliRunner().invoke(indexer_cmd.command, ["--deep"]).exit_code == 0
    assert CliRunner().invoke(indexer_cmd.command, ["--deep", "--group", "ix2"]).exit_code == 0
    assert started == [[("index-deep", "acme-indexer-deep")], [("index-deep", "ix2-deep")]]


def test_the_deep_stage_follows_the_group_it_is_named_after() -> None:
    from projections.indexer import deep_group_of, primary_group_of

    assert primary_group_of(deep_group_of("acme-indexer")) == "acme-indexer"


def test_the_stages_expected_batch_warnings_are_not_logged(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from streams.logging_setup import setup_logging

    setup_logging("INFO", json_logs=False)
    log = logging.getLogger("cassandra.protocol")
    log.warning("Server warning: %s", "Batch for [ks.events_by_session] is of size 70000, exceeding threshold")
    log.warning("Server warning: %s", "Unlogged batch covering 12 partitions detected against table [ks.t]")
    log.warning("Server warning: %s", "Read 5000 live rows and 100001 tombstone cells")
    err = capsys.readouterr().err
    assert "tombstone" in err and "Batch for" not in err and "Unlogged batch" not in err
