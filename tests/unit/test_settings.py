"""The one settings object: environment, TOML file, nesting, secrets."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from schemas.settings import Settings, load_settings


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about defaults and sources: the caller's DISTILL_* variables must not leak in."""
    import os

    for name in list(os.environ):
        if name.startswith("DISTILL_"):
            monkeypatch.delenv(name)


def test_defaults_point_at_the_local_services() -> None:
    s = Settings()
    assert s.kafka.bootstrap_list == ["127.0.0.1:19092"]
    assert (s.cassandra.contact_list, s.cassandra.port) == (["127.0.0.1"], 19042)
    assert s.kafka.max_record_bytes == 8 * 1024 * 1024
    assert s.topics.events == "distill.session-events"
    assert s.llm.configured is False


def test_environment_nesting_and_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTILL_KAFKA__BOOTSTRAP_SERVERS", "a:1, b:2")
    monkeypatch.setenv("DISTILL_LLM__API_KEY", "sk-secret")
    monkeypatch.setenv("DISTILL_TOPICS__PARTITIONS", "8")
    s = load_settings()
    assert s.kafka.bootstrap_list == ["a:1", "b:2"]
    assert s.topics.partitions == 8
    assert s.llm.configured
    assert "sk-secret" not in repr(s) and "sk-secret" not in s.model_dump_json()
    assert s.llm.api_key is not None and s.llm.api_key.get_secret_value() == "sk-secret"


def test_toml_file_below_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "distill.toml"
    cfg.write_text(
        '[kafka]\nbootstrap_servers = "file:1"\n[topics]\npartitions = 6\n[summary.apps.support]\nevent_threshold = 5\n'
    )
    monkeypatch.setenv("DISTILL_CONFIG_FILE", str(cfg))
    monkeypatch.setenv("DISTILL_TOPICS__PARTITIONS", "3")
    s = load_settings()
    assert s.kafka.bootstrap_servers == "file:1"
    assert s.topics.partitions == 3  # the environment wins over the file
    assert s.summary.apps == {"support": {"event_threshold": 5}}


def test_invalid_values_name_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTILL_TOPICS__PARTITIONS", "0")
    with pytest.raises(ValidationError, match=r"topics\.partitions"):
        load_settings()


def test_unknown_keys_are_rejected(tmp_path: Path) -> None:
    cfg = tmp_path / "distill.toml"
    cfg.write_text("[kafka]\nbootstrap = 'typo'\n")
    with pytest.raises(ValidationError, match="bootstrap"):
        load_settings(cfg)


def test_missing_config_file_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DISTILL_CONFIG_FILE", str(tmp_path / "nope.toml"))
    with pytest.raises(ValidationError, match="does not exist"):
        load_settings()
