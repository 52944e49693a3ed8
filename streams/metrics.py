"""Prometheus metrics of the worker (scraped from ``DISTILL_WORKER__METRICS_PORT``).

Documented series (``DOCUMENTED``): events processed (``rate()`` gives events/s),
consumer lag, jobs in flight (held by the summarize pool, updated on submit and
on completion), job age, LLM latency (the model call only), tokens in/out,
failures by class, dead letters, summaries cut to ``max_summary_length`` and the fetch wait
the worker chose while events flow.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram, start_http_server

EVENTS = Counter("distill_events_total", "Events-topic records processed by the track agent", ["kind"])
DEAD_LETTERS = Counter("distill_dead_letters_total", "Records sent to the dead-letter topic", ["stage", "error_class"])
JOBS_EMITTED = Counter("distill_jobs_emitted_total", "Summary jobs emitted", ["origin"])
JOBS_DONE = Counter("distill_jobs_total", "Summary jobs finished, by outcome", ["outcome"])
JOBS_IN_FLIGHT = Gauge("distill_jobs_in_flight", "Summary jobs held by the summarize pool")
JOB_AGE = Histogram(
    "distill_job_age_seconds",
    "From the job record's timestamp to its summary being published",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)
LLM_LATENCY = Histogram(
    "distill_llm_latency_seconds",
    "Summarizer call latency",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
TOKENS = Counter("distill_llm_tokens_total", "Tokens sent to / received from the summarizer model", ["direction"])
FAILURES = Counter("distill_failures_total", "Failures by class (retried or not)", ["stage", "error_class", "retried"])
CONSUMER_LAG = Gauge(
    "distill_consumer_lag", "Records behind the log end, by topic and partition", ["topic", "partition"]
)
CACHE_HITS = Counter("distill_summary_cache_hits_total", "Summaries reused from the content-addressed cache")
LENGTH_CUTS = Counter(
    "distill_summary_length_cuts_total",
    "Summaries published cut to max_summary_length (the model's shorter rewrite still over it, or failed)",
)
FETCH_WAIT = Gauge(
    "distill_fetch_wait_ms",
    "While events flow, the longest the worker's next fetch waits for more of them (worker.event_job_budget_ms)",
)

DOCUMENTED = (
    "distill_events_total",
    "distill_consumer_lag",
    "distill_jobs_in_flight",
    "distill_job_age_seconds",
    "distill_llm_latency_seconds",
    "distill_llm_tokens_total",
    "distill_failures_total",
    "distill_dead_letters_total",
    "distill_summary_length_cuts_total",
    "distill_fetch_wait_ms",
)


def set_consumer_lag(lags: Iterable[tuple[str, int, int]]) -> None:
    """Replace the lag gauge with ``(topic, partition, records behind)`` of the assigned partitions."""
    CONSUMER_LAG.clear()
    for topic, partition, lag in lags:
        CONSUMER_LAG.labels(topic, str(partition)).set(lag)


def serve_metrics(port: int | None) -> None:
    """Start the scrape endpoint on ``port`` (nothing when ``None``; 0 picks a free port)."""
    if port is not None:
        start_http_server(port, addr="127.0.0.1" if port == 0 else "0.0.0.0")
