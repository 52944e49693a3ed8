"""LocalPipeline waits for this run's worker, not for an earlier run's lines in the appended log."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

import streams.services.local_pipeline as local_pipeline
from streams.errors import ServiceError
from streams.services.local_pipeline import LocalPipeline


def _silent_executable(tmp_path: Path) -> str:
    script = tmp_path / "fake-distill"
    script.write_text("#!/bin/sh\nsleep 30\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_an_earlier_runs_assignment_line_is_not_this_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_pipeline, "distill_executable", lambda: _silent_executable(tmp_path))
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "worker.log").write_text('{"msg": "partitions assigned", "topic": "old-run.jobs"}\n')
    pipeline = LocalPipeline(workdir)
    pipeline.start()
    try:
        with pytest.raises(ServiceError, match="did not get its partitions"):
            pipeline.wait_for_worker(1.0)
        with (workdir / "worker.log").open("a") as log:
            log.write('{"msg": "partitions assigned", "topic": "this-run.jobs"}\n')
        pipeline.wait_for_worker(5.0)
    finally:
        pipeline.stop()
