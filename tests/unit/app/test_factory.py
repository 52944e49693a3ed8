"""``create_app``: what the composition root registers (nothing connects until the app starts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from schemas.settings import LLMSettings, Settings
from streams.app.factory import ReplayOptions, create_app


def _settings(tmp_path: Any, **summary: Any) -> Settings:
    return Settings(
        summary={"idle_summary_after_s": 30.0, **summary},
        services={"home": str(tmp_path)},
        worker={"app_id": "distill-unit"},
    )


def _task_names(app: Any) -> set[str]:
    return {t.__name__ for t in app._app_tasks}


def test_live_worker_registers_the_sweep(tmp_path: Any) -> None:
    app = create_app(_settings(tmp_path))
    assert "_sweep" in _task_names(app)


def test_replay_registers_no_sweep_it_would_write_into_the_live_events_topic(tmp_path: Any) -> None:
    settings = _settings(tmp_path)
    app = create_app(settings, replay=ReplayOptions("r1"))
    names = _task_names(app)
    assert "_sweep" not in names
    assert "_consumer_lag" in names  # the other timers are still there


@pytest.fixture(autouse=True)
def _no_stray_dirs(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_faust_web_server_is_off_by_default_so_workers_share_a_host(tmp_path: Any) -> None:
    assert Settings().worker.web_port == 0
    app = create_app(_settings(tmp_path))
    assert app.conf.web_enabled is False
    on = create_app(Settings(services={"home": str(tmp_path)}, worker={"app_id": "distill-web", "web_port": 6099}))
    assert on.conf.web_enabled is True and on.conf.web_port == 6099


def test_faust_data_lives_under_the_configured_directory_not_the_cwd(tmp_path: Any) -> None:
    app = create_app(_settings(tmp_path))
    assert Path(app.conf.datadir) == tmp_path / "faust" / "distill-unit"
    replay = create_app(_settings(tmp_path), replay=ReplayOptions("r2"))
    assert Path(replay.conf.datadir) == tmp_path / "faust" / "distill-unit-replay-r2"
    explicit = Settings(worker={"app_id": "x", "data_dir": str(tmp_path / "d")})
    assert Path(create_app(explicit).conf.datadir) == tmp_path / "d" / "x"
    assert Path(app.conf.tabledir).is_relative_to(tmp_path / "faust")


def test_trigger_policies_count_tokens_with_the_summary_models_encoding(tmp_path: Any) -> None:
    settings = Settings(
        summary={"token_counter": "tiktoken", "tiktoken_default_encoding": "o200k_base", "apps": {"a": {}}},
        llm={"model": "gpt-4"},
        services={"home": str(tmp_path)},
    )
    policies = create_app(settings).distill_runtime.track.policies  # type: ignore[attr-defined]
    assert policies.default.counter.name == "tiktoken:cl100k_base"
    assert policies.for_app("a").counter.name == "tiktoken:cl100k_base"


def test_replay_session_filter_takes_full_keys_and_bare_ids() -> None:
    from schemas import SessionKey
    from streams.app.factory import session_filter

    accept = session_filter(frozenset({"shop/alice/s1", "s2"}))
    assert accept(SessionKey("shop", "alice", "s1"))
    assert not accept(SessionKey("shop", "bob", "s1"))  # the full key picks one user's s1
    assert not accept(SessionKey("blog", "alice", "s1"))
    assert accept(SessionKey("shop", "bob", "s2")) and accept(SessionKey("blog", "carol", "s2"))
    assert not accept(SessionKey("shop", "alice", "s3"))
    assert session_filter(frozenset({"a/b"}))(SessionKey("x", "y", "a/b"))  # not three parts: a bare id


def test_the_worker_creates_the_data_directorys_parents(tmp_path: Any) -> None:
    from streams.app.worker import prepare_data_dir

    app = create_app(Settings(worker={"app_id": "x", "data_dir": str(tmp_path / "a" / "b")}))
    prepare_data_dir(app)
    assert (tmp_path / "a" / "b").is_dir()
    app._create_directories()  # what Faust runs at startup: mkdir of datadir and tabledir
    assert (tmp_path / "a" / "b" / "x").is_dir()


@pytest.mark.parametrize(
    ("summary", "where", "rule"),
    [
        (
            {"apps": {"support": {"prompt": "总结一下这段对话"}}},
            r"\[summary\.apps\.support\] \(app 'support'\)",
            "prompt.conversation_text_required",
        ),
        (
            {"apps": {"ok": {}, "billing": {"system_prompt": "{conversation_text} is data"}}},
            r"\[summary\.apps\.billing\]",
            "system_prompt.no_conversation_placeholders",
        ),
        (
            {"apps": {"x": {"fork_prompt": "continue {nope}"}}},
            r"\[summary\.apps\.x\]",
            "fork_prompt.unknown_placeholder",
        ),
        ({"prompt": "Summarize please"}, r"\[summary\]", "prompt.conversation_text_required"),
        (
            {"apps": {"typo": {"promt": "{conversation_text}"}}},
            r"\[summary\.apps\.typo\]",
            "invalid summary override: promt",
        ),
    ],
)
def test_a_bad_prompt_or_override_stops_the_worker_at_startup_naming_the_app(
    tmp_path: Any, summary: dict[str, Any], where: str, rule: str
) -> None:
    from streams.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=rf"{where}.*{rule}"):
        create_app(_settings(tmp_path, **summary))


def test_good_per_app_prompts_start_and_are_used(tmp_path: Any) -> None:
    from streams.app.extensions import Extensions
    from streams.app.factory import _summarizers

    settings = _settings(tmp_path, apps={"zh": {"prompt": "请总结以下对话：\n{conversation_text}\n\n总结："}})
    create_app(settings)
    summarizer_for, _ = _summarizers(settings, Extensions())
    assert summarizer_for("zh").metadata()["prompt_version"] != summarizer_for("other").metadata()["prompt_version"]


@pytest.mark.parametrize("in_thread", [True, False])
def test_a_workers_model_calls_run_in_their_own_thread_unless_turned_off(tmp_path: Any, in_thread: bool) -> None:
    from streams.app.extensions import Extensions
    from streams.app.factory import TimedModel, _summarizers
    from streams.summarizer.model_thread import ThreadedModel
    from streams.summarizer.openai_adapter import OpenAIChatModel

    settings = _settings(tmp_path).model_copy(
        update={"llm": LLMSettings(base_url="http://127.0.0.1:9/v1", calls_in_thread=in_thread)}
    )
    _, model = _summarizers(settings, Extensions())
    shared = model()
    assert isinstance(shared, TimedModel)
    if in_thread:
        assert isinstance(shared.inner, ThreadedModel) and isinstance(shared.inner.inner, OpenAIChatModel)
        assert not shared.inner.started  # its thread starts at the first call
    else:
        assert isinstance(shared.inner, OpenAIChatModel)


def test_the_worker_holds_a_small_batchs_table_writes_and_sends_them_when_partitions_are_revoked(
    tmp_path: Any,
) -> None:
    assert Settings().worker.changelog_hold_ms > 0
    app = create_app(_settings(tmp_path))
    assert app._producer_flush.__module__ == "streams.app.write_behind"
    assert app._stop_consumer.__module__ == "streams.app.write_behind"
