"""The JSON log line: one object, the record's ``extra`` fields after the standard four."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

import pytest

from streams.logging_setup import JsonFormatter


class _Named:
    def __str__(self) -> str:
        return "named"


def _record(**extra: object) -> logging.LogRecord:
    return logging.getLogger("distill.test").makeRecord(
        "distill.test", logging.INFO, __file__, 1, "summary %s", ("made",), None, extra=extra
    )


def test_a_line_is_the_json_of_the_standard_fields_then_the_extras_in_order() -> None:
    record = _record(session_id="s1", partition=3, ratio=0.5, caught_up=True, version=None, report=_Named(),
                     tags=["a"], filter_key="日本", _private="never")  # fmt: skip
    line = JsonFormatter().format(record)
    expected = {
        "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
        "level": "info",
        "logger": "distill.test",
        "msg": "summary made",
        "session_id": "s1",
        "partition": 3,
        "ratio": 0.5,
        "caught_up": True,
        "version": None,
        "report": "named",
        "tags": "['a']",
        "filter_key": "日本",
    }
    # Byte for byte what ``json.dumps(..., ensure_ascii=False)`` writes: non-ASCII as it is, ", " and ": ".
    assert line == json.dumps(expected, ensure_ascii=False)
    assert list(json.loads(line)) == list(expected)


def test_an_exception_is_written_after_the_extras() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.getLogger("distill.test").makeRecord(
        "distill.test", logging.ERROR, __file__, 1, "failed", (), exc_info, extra={"job_id": "j"}
    )
    out = json.loads(JsonFormatter().format(record))
    assert list(out)[-2:] == ["job_id", "exc"]
    assert out["exc"].startswith("Traceback") and "ValueError: boom" in out["exc"]


def test_after_setup_records_do_not_look_up_their_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.logging_setup import setup_logging

    monkeypatch.setattr(logging, "_srcfile", logging._srcfile)  # put back after the test
    monkeypatch.setattr(logging, "logThreads", logging.logThreads)
    monkeypatch.setattr(logging, "logMultiprocessing", logging.logMultiprocessing)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    setup_logging("INFO")
    keep = Keep()
    logging.getLogger().addHandler(keep)
    try:
        logging.getLogger("distill.test").info("summary made", extra={"job_id": "j"})
    finally:
        logging.getLogger().removeHandler(keep)
    [record] = records
    assert (record.funcName, record.lineno) == ("(unknown function)", 0)  # no walk up the frames
    # Nor their thread's and process's names (no format writes them; a third of a line's cost).
    assert (record.threadName, record.processName) == (None, None)
    assert record.process is not None  # Faust's and mode's text formats write it
    line = json.loads(JsonFormatter().format(record))
    assert line["job_id"] == "j" and not {"threadName", "processName", "thread"} & set(line)
