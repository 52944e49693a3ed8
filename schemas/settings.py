"""The one settings object of distill (pydantic-settings, ``DISTILL_`` prefix).

Nothing else in the project reads the environment. Nested sections use ``__``:
``DISTILL_KAFKA__BOOTSTRAP_SERVERS``, ``DISTILL_LLM__API_KEY``. A TOML file
named by ``DISTILL_CONFIG_FILE`` (or passed to :func:`load_settings`) may set
the same fields, plus per-app summary overrides under ``[summary.apps.<app>]``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

DEFAULT_KAFKA_PORT = 19092
DEFAULT_KAFKA_CONTROLLER_PORT = 19093
DEFAULT_CASSANDRA_PORT = 19042
DEFAULT_CASSANDRA_STORAGE_PORT = 17010


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KafkaSettings(_Section):
    """How to reach Kafka."""

    bootstrap_servers: str = f"127.0.0.1:{DEFAULT_KAFKA_PORT}"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    client_id: str = "distill"
    max_record_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    request_timeout_s: float = Field(default=30.0, gt=0)

    @property
    def bootstrap_list(self) -> list[str]:
        return [s.strip() for s in self.bootstrap_servers.split(",") if s.strip()]


class CassandraSettings(_Section):
    """How to reach Cassandra and where distill keeps its tables."""

    contact_points: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_CASSANDRA_PORT, gt=0, lt=65536)
    keyspace: str = Field(default="distill", pattern=r"^[A-Za-z][A-Za-z0-9_]{0,47}$")
    replication: dict[str, Any] = Field(default_factory=lambda: {"class": "SimpleStrategy", "replication_factor": 1})
    username: str | None = None
    password: SecretStr | None = None
    local_datacenter: str = "datacenter1"
    consistency: Literal["ONE", "LOCAL_ONE", "LOCAL_QUORUM", "QUORUM", "EACH_QUORUM", "ALL"] = "LOCAL_QUORUM"
    """Consistency level of every read and write. ``LOCAL_QUORUM`` (the default) gives an agent's
    read what the projector wrote on a replicated keyspace (quorum writes + quorum reads overlap);
    with one replica it is one replica. ``LOCAL_ONE`` is faster and may read stale rows."""
    request_timeout_s: float = Field(default=10.0, gt=0)
    schema_timeout_s: float = Field(default=120.0, gt=0)
    """Client timeout of a schema statement (``distill init``'s migrations): Cassandra applies schema
    changes one at a time, so under concurrent DDL one waits behind the others far longer than a read."""
    connect_timeout_s: float = Field(default=10.0, gt=0)
    reconnect_max_delay_s: float = Field(default=2.0, gt=0)
    """Cap of the driver's reconnection to a host it saw go down (its default grows to 10 minutes) and of the
    projector's retry backoff while Cassandra is unavailable: once Cassandra answers, work resumes within it."""

    @property
    def contact_list(self) -> list[str]:
        return [s.strip() for s in self.contact_points.split(",") if s.strip()]


class TopicSettings(_Section):
    """Topic names and the partition count ``distill init`` creates them with."""

    events: str = "distill.session-events"
    jobs: str = "distill.summary-jobs"
    summaries: str = "distill.summaries"
    dead_letters: str = "distill.dead-letters"
    partitions: int = Field(default=4, gt=0)
    replication_factor: int = Field(default=1, gt=0)


class LLMSettings(_Section):
    """The OpenAI-compatible endpoint the summarizer calls.

    With neither ``api_key`` nor ``base_url`` set, the embedded extractive
    summarizer answers (no network, no key).
    """

    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = None
    calls_in_thread: bool = True
    """A worker calls the endpoint from an event loop in a thread of its own
    (``streams.summarizer.model_thread``): the HTTP client's work in a burst of jobs no longer
    queues the events fetched meanwhile behind it. ``false``: on the worker's loop."""

    @property
    def configured(self) -> bool:
        return self.base_url is not None or self.api_key is not None


class EmbedderSettings(_Section):
    """Optional embeddings endpoint for semantic ``session_search``."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "text-embedding-3-small"
    dimensions: int = Field(default=384, gt=0, le=8192)

    @property
    def configured(self) -> bool:
        return self.base_url is not None or self.api_key is not None


class SummarySettings(_Section):
    """Trigger and summarizer configuration (see ``streams.rules.policy``).

    ``None`` for a threshold means "not configured". Configured checks must
    all pass (``composition="all"``, as in both guides: each threshold option
    adds a check and the checks are ANDed); ``composition="any"`` fires when
    one of them passes. When no check is configured at all, the worker uses
    the Go guide's main example, an explicit any-of: more than 20 events,
    more than 4000 tokens, or an idle gap of more than 5 minutes; summaries of
    at most 200 words.
    """

    event_threshold: int | None = Field(default=None, ge=0)
    token_threshold: int | None = Field(default=None, ge=0)
    time_threshold_s: float | None = Field(default=None, ge=0)
    context_threshold: bool = False
    context_ratio: float = Field(default=0.5, gt=0, le=1)
    context_min_tokens: int = Field(default=2000, ge=0)
    context_fallback_window: int | None = Field(default=None, gt=0)
    """The context threshold's window for events that name no known model and
    carry no window; ``None``: the summary LLM's window (``llm.context_window``,
    else the registry entry of ``llm.model``), else 8192."""
    conversation_threshold: int | None = Field(default=None, ge=0)
    important_keywords: list[str] | None = None
    """Words or phrases (case-insensitive) that make an event important: the
    important-content check also fires when the delta holds one."""
    important_content_threshold: int | None = Field(default=None, ge=0)
    composition: Literal["any", "all"] = "all"
    """How two or more configured checks combine: ``all`` (AND, the default) or ``any`` (OR)."""
    filter_key_allowlist: list[str] | None = None
    cascade_full_session: bool = True
    token_counter: Literal["simple", "tiktoken"] = "simple"
    approx_runes_per_token: float = Field(default=4.0, gt=0)
    tiktoken_default_encoding: str = "o200k_base"
    max_summary_words: int | None = Field(default=200, ge=0)
    max_summary_length: int | None = Field(default=None, ge=0)
    """The Python guide's cap on the summary, in characters: stated to the model in every request
    (``{max_summary_length}`` in a prompt, else a line beside it), an answer over it sent back once to
    be shortened, and a cut that still happens reported (``SummaryReport.length_cut``). ``None``/0: none."""
    prompt: str | None = None
    system_prompt: str | None = None
    fork_prompt: str | None = None
    """The instruction appended to the caller's own request when summarizing cache-safe (a
    ``summarize_sync`` carrying ``model_request``); ``None``: the built-in one."""
    empty_answer_retries: int = Field(default=1, ge=0, le=5)
    """How many times an empty model answer is asked again with the same request (same budget)
    before the summary fails as retryable; an empty answer never cuts the input."""
    cache_safe_forking: bool = True
    """Summarize a ``summarize_sync`` that carries the caller's ``model_request`` as a fork of that
    request (shares its prompt cache). On by default, unlike Go's option: a caller only sends
    ``model_request`` to get this; ``False`` summarizes standalone and ignores it."""
    skip_recent_events: int = Field(default=0, ge=0)
    keep_recent_rounds: int = Field(default=0, ge=0)
    async_summary_num: int = Field(default=4, gt=0)
    """Model calls a worker makes at once (Go's ``WithAsyncSummaryNum``). Jobs needing none (answered
    from the cache, stale, nothing to summarize) do not wait for one: up to 8× this many jobs run."""
    job_timeout_s: float = Field(default=120.0, gt=0)
    """How long one job may take on the summarize side: its model calls and their retries. A
    call still running then is cancelled (its late result is never published) and the job ends
    as a failure record plus a dead letter; the boundary stays."""
    job_max_attempts: int = Field(default=5, ge=1)
    """Model calls of one job on transient failures (429, 5xx, timeouts) before it is given up,
    whichever of this and ``job_timeout_s`` comes first."""
    failure_cooldown_s: float = Field(default=30.0, ge=0)
    """After a key's job is given up, no new job for the key until an event this much later
    (event time); doubled with each further failure in a row, up to ``failure_cooldown_max_s``.
    The first job after the cooldown is the half-open retry; a summary resets it. 0: off."""
    failure_cooldown_max_s: float = Field(default=1800.0, ge=0)
    idle_summary_after_s: float | None = Field(default=None, gt=0)
    """The idle sweep (off: ``None``): a key with content after its decided boundary, no job in flight
    and no event for this long (event time against the wall clock) gets a job (``idle_sweep``) — the
    events that came while its last job ran too; not while it cools down after a given-up job."""
    apps: dict[str, dict[str, Any]] = Field(default_factory=dict)


class AgentSettings(_Section):
    """The agent facade (``streams.agent.DistillAgent``): the Go guide's ``llmagent`` options, snake_cased.

    ``WithAddSessionSummary`` is ``add_session_summary``, ``WithEnableContextCompaction``
    is ``enable_context_compaction``, and so on (``DISTILL_AGENT__ADD_SESSION_SUMMARY``).
    Go's defaults, except two (see the fields): summary injection and the recall
    tools are on, because with them off a request that must shrink can only drop
    history, and the history a summary hides can only come back through the tools.
    """

    add_session_summary: bool = True
    """Inject the key's summary and cut the history at its boundary (Go default: ``False``). Off: the whole
    history is sent (or the last ``max_history_runs`` runs), and a request over the budget can only be tailored."""
    session_summary_injection_mode: Literal["system", "user"] = "system"
    """``system``: merged into the first system message (kept by tailoring); ``user``: into the first user turn."""
    max_history_runs: int = Field(default=0, ge=0)
    """With ``add_session_summary`` off only: the last N runs are sent (0 = all). The older runs are not in
    the request (still stored; ``session_search`` with scope ``current_session`` finds them)."""
    sync_summary_intra_run: bool = False
    """Before each model call of a run but the first, ask for a summary of the key (``summarize_sync``,
    ``force=False``: the thresholds apply) and build the request on it, as Go's flow does."""
    enable_context_compaction: bool = False
    """Tool-result compaction (passes 0/1/2) of the request, and the summary refresh when the request reaches
    ``context_compaction_threshold_ratio`` of the window."""
    context_compaction_threshold_ratio: float = Field(default=0.7, gt=0, le=1)
    """With compaction and summaries on: a request of at least ``clamp(window x ratio, 2000, window)`` tokens
    asks for a summary first (``force=False``) and is rebuilt when the boundary moved."""
    context_compaction_tool_result_max_tokens: int = Field(default=1024, ge=0)
    """Pass 1: results of older requests above this are replaced by a placeholder naming the event (0: off)."""
    context_compaction_oversized_tool_result_max_tokens: int = Field(default=0, ge=0)
    """Pass 2: any result above this keeps its head and tail (0: off; Go recommends 8192)."""
    context_compaction_keep_recent_requests: int = Field(default=1, ge=0)
    """Completed requests after the current one that passes 0 and 1 leave alone."""
    force_clean_tool_names: list[str] = Field(default_factory=list)
    """Pass 0: older results of these tools are replaced by a policy placeholder (``ToolResultCompactionConfig``)."""
    keep_tool_names: list[str] = Field(default_factory=list)
    """Results of these tools are never compacted (wins over ``force_clean_tool_names``); with
    ``enable_on_demand_session``, ``session_search`` and ``session_load`` are always among them."""
    enable_on_demand_session: bool = True
    """Offer ``session_search`` and ``session_load`` and answer them from Cassandra (Go default: ``False``; Go
    offers what the backend implements, and distill's implements both)."""
    token_tailoring: bool = True
    """Fit each request into the model's window (Go: ``openai.WithEnableTokenTailoring``). Before whole rounds
    are dropped, tool-result payloads are cut (head + tail, naming the event) and a summary is forced."""
    context_window: int | None = Field(default=None, gt=0)
    """The agent model's window; ``None``: the registry entry of the facade's model, else 8192."""
    reserved_output_tokens: int = Field(default=2048, ge=0)
    """Tokens of the window left for the reply (at most half the window): the budget is the rest."""
    token_counter: Literal["script_aware", "tiktoken", "simple"] = "script_aware"
    """How requests are counted against the budget: ``script_aware`` is 4 characters a token with CJK, kana
    and Hangul characters 1 token each (plain 4-a-token, ``simple``, counts Chinese 3-4x under a BPE
    tokenizer, so a "fitting" request overflows the window); ``tiktoken`` counts exactly with the encoding of
    the facade's model (o200k for a model it does not know). The worker's trigger counting is
    ``summary.token_counter``, unaffected."""
    summary_timeout_s: float = Field(default=30.0, gt=0)
    """How long one ``summarize_sync`` the facade sends may take before the request is built without it."""
    projection_wait_s: float = Field(default=10.0, gt=0)
    """How long ``next_request`` waits for Cassandra to show what the facade published (then it fails)."""


class ServicesSettings(_Section):
    """The local JVM services started by ``distill services``."""

    home: Path = Path.home() / ".cache" / "distill"
    data_dir: Path | None = None
    kafka_port: int = DEFAULT_KAFKA_PORT
    kafka_controller_port: int = DEFAULT_KAFKA_CONTROLLER_PORT
    cassandra_port: int = DEFAULT_CASSANDRA_PORT
    cassandra_storage_port: int = DEFAULT_CASSANDRA_STORAGE_PORT
    kafka_heap_mb: int = 512
    cassandra_heap_mb: int = 2048
    kafka_start_timeout_s: float = 90.0
    """``services up`` gives up when the broker's log has been silent this long (or after 5× this)."""
    cassandra_start_timeout_s: float = 180.0
    """As ``kafka_start_timeout_s``, for Cassandra."""
    java: str = "java"
    mvn: str = "mvn"
    jvm_options: list[str] = []
    """Extra options for both JVMs, before our own (``["-XX:TieredStopAtLevel=1"]`` boots them in
    about half the CPU on a small box, at some cost in throughput once they run)."""

    @property
    def resolved_data_dir(self) -> Path:
        return self.data_dir if self.data_dir is not None else self.home / "data"


class IndexSettings(_Section):
    """The recall index's two stages (``projections.indexer``: ``distill indexer`` and ``distill indexer --deep``)."""

    primary_chunks: int = Field(default=0, ge=0)
    """The chunks after a long document's first that the primary stage writes; the deep stage writes the rest.
    Both stages of one index must run with the same value. 0 (the default, ``rows.DEFAULT_PRIMARY_CHUNKS``):
    only first chunks on the primary path, what keeps it up with 1,000 events/s of the benchmark's mix on a
    2-core box."""


class WorkerSettings(_Section):
    """The Faust worker."""

    app_id: str = "distill"
    store: str = "memory://"
    """Faust table store: ``memory://`` (rebuilt from the changelog at start) or ``rocksdb://``
    (production; the ``rocksdb`` extra, files under ``data_dir``)."""
    web_port: int = 0
    """Faust's own web server (0: off, the default — several workers and a replay share a host;
    metrics are served on ``metrics_port``)."""
    metrics_port: int | None = None
    data_dir: Path | None = None
    """Faust's data directory (table stores); ``None``: ``services.home / "faust"``. Each app id
    gets its own folder below it; nothing is written to the current directory."""
    log_level: str = "INFO"
    log_json: bool = True
    batch_fetch_wait_ms: int = Field(default=30, ge=1, le=1000)
    """While events flow, the shortest a fetch waits for more of them (64 KiB) before the worker
    takes what came (``event_job_budget_ms`` lets a lightly loaded worker wait longer; with it 0,
    the wait): latency against CPU on a thin, steady stream (a stream that pauses gets the long
    poll, which returns at its first record). Each fetch-and-batch cycle costs the worker a few ms
    of CPU whatever its size, most of it waking up (``benchmarks/bench_wake.py``): at 500 events/s,
    30 ms gave 170-193 µs CPU/event and 40 ms 149-156 (saturated: ~45), at up to this much more
    event→job latency."""
    event_job_budget_ms: int = Field(default=50, ge=0, le=10_000)
    """The event→job latency the batching fetch wait may use up with the worker's own lag: while
    events flow, a fetch waits this long less what the worker's recent batches took from their
    fetch until their writes were sent, less 5 ms (``streams.app.fetch_wait``), and never less than
    ``batch_fetch_wait_ms``. A lightly loaded worker waits longer for a fuller batch (fewer fetch
    cycles: less CPU per event on a thin stream); 0: always ``batch_fetch_wait_ms``."""
    changelog_hold_ms: int = Field(default=100, ge=0, le=1000)
    """A batch of events that wrote only track-table rows (no job, reply or dead letter), with no
    further events waiting for the track agent (a thin stream, not a backlog), holds them back up to
    this long and sends them with the next batch's writes (``streams.app.write_behind``):
    at a low rate, one produce round trip per few fetch cycles instead of one per cycle. Its
    events are acked (become committable) once the rows are on the broker; jobs never wait for it.
    0: every batch sends its rows at once."""
    jobs_give_way_ms: int = Field(default=50, ge=0, le=1000)
    """Between its steps a summary job waits up to this long while events wait for the track agent
    (until the agent took its next batch): a burst of jobs on the worker's one event loop otherwise
    delays the events fetched meanwhile, and their triggers (``streams.app.ingest_first``). 0: off."""
    recent_events_mb: int = Field(default=128, ge=0)
    """Memory (MiB) for the events the worker consumed, kept for the summary jobs that read
    them back as their delta. Past it a job fetches its own records from Kafka one offset at a
    time (a round trip each: ~5x the job's CPU once a backlog of many interleaved sessions no
    longer fits). Size it to the events not yet summarized: sessions in flight x events between
    two summaries x (event bytes + ~100). At most a quarter of it keeps the newest events as the
    track agent decoded them (counted at ~2.5 KiB + twice the event's bytes each): a job taking
    them is spared their decode."""


class Settings(BaseSettings):
    """Every setting of distill. Build it once (``load_settings``) and pass it down."""

    model_config = SettingsConfigDict(
        env_prefix="DISTILL_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=False,
    )

    kafka: KafkaSettings = KafkaSettings()
    cassandra: CassandraSettings = CassandraSettings()
    topics: TopicSettings = TopicSettings()
    llm: LLMSettings = LLMSettings()
    embedder: EmbedderSettings = EmbedderSettings()
    summary: SummarySettings = SummarySettings()
    agent: AgentSettings = AgentSettings()
    services: ServicesSettings = ServicesSettings()
    worker: WorkerSettings = WorkerSettings()
    index: IndexSettings = IndexSettings()
    config_file: Path | None = None

    @field_validator("config_file")
    @classmethod
    def _exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"config file {value} does not exist")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings)


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Environment, then the TOML file (lower priority), then ``overrides``.

    The TOML file is ``config_file`` or ``DISTILL_CONFIG_FILE``.
    """
    env_only = Settings(**overrides)
    path = config_file or env_only.config_file
    if path is None:
        return env_only
    with path.open("rb") as fh:
        file_values = tomllib.load(fh)
    merged = _deep_merge(file_values, _explicit(env_only))
    merged = _deep_merge(merged, overrides)
    merged["config_file"] = path
    return Settings(**merged)


def _explicit(settings: BaseModel) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in settings.model_fields_set:
        value = getattr(settings, name)
        out[name] = _explicit(value) if isinstance(value, BaseModel) else value
    return out


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
