"""The CQL the projector writes with (one place, so column orders match ``projections.rows``)."""

from __future__ import annotations

INSERT_EVENT = (
    "INSERT INTO {ks}.events_by_session (app_name, user_id, session_id, ts, event_id, seq, filter_key, author, "
    "role, request_id, invocation_id, text, tool_call_id, tool_name, tool_call_ids, has_tool_calls, partial, "
    "skip_summarization, token_count, content_size, event_json) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_EVENT_ID = (
    "INSERT INTO {ks}.event_ids (app_name, user_id, session_id, event_id, ts, seq, digest) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
SELECT_DIGESTS = "SELECT event_id, digest FROM {ks}.event_ids WHERE app_name = ? AND user_id = ? AND session_id = ?"
"""Each event id of a session with its first record's digest (``schemas.event_ids``; ``null``: projected
before migration 012)."""
INSERT_LATE_EVENT = (
    "INSERT INTO {ks}.late_events (app_name, user_id, session_id, seq, ts, event_id, filter_key, role, partial) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_LATEST_TS = (
    "SELECT ts FROM {ks}.events_by_session WHERE app_name = ? AND user_id = ? AND session_id = ? "
    "ORDER BY ts DESC, event_id DESC LIMIT 1"
)
"""The session's newest timestamp (``projections.late_events``: what a new event is compared with)."""
SELECT_EVENT_POSITION = (
    "SELECT ts, seq FROM {ks}.event_ids WHERE app_name = ? AND user_id = ? AND session_id = ? AND event_id = ?"
)
UPSERT_TOOL_CALL = (
    "UPDATE {ks}.tool_calls SET tool_name = ?, call_event_id = ?, call_ts = ? "
    "WHERE app_name = ? AND user_id = ? AND session_id = ? AND tool_call_id = ?"
)
UPSERT_TOOL_RESULT = (
    "UPDATE {ks}.tool_calls SET result_event_id = ?, result_ts = ? "
    "WHERE app_name = ? AND user_id = ? AND session_id = ? AND tool_call_id = ?"
)
INSERT_TOOL_CALL_EVENT = (
    "INSERT INTO {ks}.tool_call_events (app_name, user_id, session_id, tool_call_id, seq, event_id, ts, role, "
    "filter_key, partial, tool_name) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""A call or a result of a tool-call id at its log position (``011_tool_call_events``)."""
INSERT_RECALL = (
    "INSERT INTO {ks}.recall_docs (app_name, user_id, session_id, ts, event_id, seq, filter_key, role, text, "
    "tool_call_id, tool_name, content_bytes, tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_RECALL_CHUNK = (
    "INSERT INTO {ks}.recall_chunks (app_name, user_id, session_id, ts, event_id, chunk, seq, filter_key, role, "
    "text, tool_call_id, tool_name, content_bytes, tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_SUMMARY_HISTORY = (
    "INSERT INTO {ks}.summaries_history (app_name, user_id, session_id, filter_key, version, summary, cutoff_at, "
    "last_event_id, prev_cutoff_at, prev_last_event_id, created_at, summary_json) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_SUMMARY_EPOCH_HISTORY = (
    "INSERT INTO {ks}.summaries_epoch_history (app_name, user_id, session_id, filter_key, version, summary, "
    "cutoff_at, last_event_id, prev_cutoff_at, prev_last_event_id, created_at, summary_json, epoch) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_SUMMARY_LATEST = (
    "INSERT INTO {ks}.summaries_latest (app_name, user_id, session_id, filter_key, version, summary, cutoff_at, "
    "last_event_id, created_at, summary_json, epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
)
UPDATE_SUMMARY_LATEST = (
    "UPDATE {ks}.summaries_latest SET version = ?, summary = ?, cutoff_at = ?, last_event_id = ?, created_at = ?, "
    "summary_json = ?, epoch = ? WHERE app_name = ? AND user_id = ? AND session_id = ? AND filter_key = ? "
    "IF version < ?"
)
SELECT_SERVED = (
    "SELECT filter_key, served_epoch, served_since FROM {ks}.summaries_latest "
    "WHERE app_name = ? AND user_id = ? AND session_id = ?"
)
SERVE_EPOCH = (
    "UPDATE {ks}.summaries_latest SET served_epoch = ?, served_since = ? "
    "WHERE app_name = ? AND user_id = ? AND session_id = ? IF served_since = ?"
)
"""The condition of an epoch switch's batch: nobody switched the session meanwhile."""
PUT_SUMMARY_LATEST = (
    "INSERT INTO {ks}.summaries_latest (app_name, user_id, session_id, filter_key, version, summary, cutoff_at, "
    "last_event_id, created_at, summary_json, epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
DELETE_SUMMARY_LATEST = (
    "DELETE FROM {ks}.summaries_latest WHERE app_name = ? AND user_id = ? AND session_id = ? AND filter_key = ?"
)
INSERT_ADOPTION = (
    "INSERT INTO {ks}.summary_adoptions (app_name, user_id, session_id, record_offset, topic, partition, epoch, "
    "previous_epoch, command_id, caught_up, keys, source, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_DELETED = (
    "SELECT deleted_at, deleted_offset FROM {ks}.deleted_sessions WHERE app_name = ? AND user_id = ? AND session_id = ?"
)
INSERT_DELETED = (
    "INSERT INTO {ks}.deleted_sessions (app_name, user_id, session_id, deleted_at, deleted_partition, deleted_offset) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
SELECT_TENANT_DELETED = "SELECT session_id, deleted_at FROM {ks}.deleted_sessions WHERE app_name = ? AND user_id = ?"
SELECT_DELETED_OFFSETS = (
    "SELECT session_id, deleted_at, deleted_partition, deleted_offset FROM {ks}.deleted_sessions "
    "WHERE app_name = ? AND user_id = ? AND session_id IN ?"
)
INSERT_RECALL_LINE = (
    "INSERT INTO {ks}.recall_lines (app_name, user_id, session_id, ts, event_id, role, line) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
RECALL_TABLES = ("recall_docs", "recall_chunks", "recall_lines")
"""The recall index of ``session_search``: ``recall_docs`` / ``recall_chunks`` (partition ``(app_name,
user_id)``, clustering from ``session_id``) and ``recall_lines`` (a partition per session), every one
keyed by ``session_id`` after the tenant, so one statement shape deletes a session's rows from each."""
DELETE_RECALL = "DELETE FROM {ks}.{table} WHERE app_name = ? AND user_id = ? AND session_id = ?"
DELETE_RECALL_AT = "DELETE FROM {ks}.{table} USING TIMESTAMP ? WHERE app_name = ? AND user_id = ? AND session_id = ?"
SELECT_LATEST_LINE_TS = (
    "SELECT ts FROM {ks}.recall_lines WHERE app_name = ? AND user_id = ? AND session_id = ? "
    "ORDER BY ts DESC, event_id DESC LIMIT 1"
)
"""The newest timestamp the recall index holds for a session (the indexer's ``LatestStamps``)."""
SELECT_RECALL_SEQ = (
    "SELECT seq FROM {ks}.recall_docs WHERE app_name = ? AND user_id = ? AND session_id = ? AND ts = ? AND event_id = ?"
)
"""Where the index placed an event (``seq``): an event published again keeps that place."""
SELECT_RECALL_SEQS = "SELECT ts, event_id, seq FROM {ks}.{table} WHERE app_name = ? AND user_id = ? AND session_id = ?"
"""A session's rows in ``recall_docs`` / ``recall_chunks`` with their log position (what a deletion left)."""
DELETE_RECALL_EVENT = (
    "DELETE FROM {ks}.{table} WHERE app_name = ? AND user_id = ? AND session_id = ? AND ts = ? AND event_id = ?"
)
SESSION_TABLES = (
    "events_by_session", "event_ids", "tool_calls", "summaries_latest", "summaries_history", "session_turns",
    "session_sources", "summaries_epoch_history", "summary_adoptions", "late_events", "tool_call_events",
)  # fmt: skip
DELETE_SESSION_PARTITION = "DELETE FROM {ks}.{table} WHERE app_name = ? AND user_id = ? AND session_id = ?"
DELETE_SESSION_ROWS = (
    "DELETE FROM {ks}.{table} WHERE app_name = ? AND user_id = ? AND session_id = ? AND filter_key >= ''"
)
"""A deletion of ``summaries_latest``: every summary row, not the static columns (the served epoch)."""
SAVE_OFFSET = (
    "INSERT INTO {ks}.projector_offsets (consumer_group, topic, partition, next_offset, updated_at) "
    "VALUES (?, ?, ?, ?, toTimestamp(now()))"
)
INSERT_TURN = (
    "INSERT INTO {ks}.session_turns (app_name, user_id, session_id, invocation_id, request_id, ts, event_id, seq, "
    "filter_key, role, partial) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
UPSERT_SESSION_SOURCE = (
    "INSERT INTO {ks}.session_sources (app_name, user_id, session_id, topic, partition) VALUES (?, ?, ?, ?, ?)"
)
SELECT_RECORD_KEY = (
    "SELECT record_key, partition FROM {ks}.session_record_keys WHERE app_name = ? AND user_id = ? AND session_id = ?"
)
INSERT_RECORD_KEY = (
    "INSERT INTO {ks}.session_record_keys (app_name, user_id, session_id, record_key, topic, partition, fixed_offset) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
SAVE_PROGRESS = (
    "UPDATE {ks}.projector_progress SET next_offset = ?, log_end_offset = ?, updated_at = ?, stage = ? "
    "WHERE topic = ? AND partition = ? AND consumer_group = ?"
)
SAVE_PROGRESS_CAUGHT_UP = (
    "UPDATE {ks}.projector_progress SET next_offset = ?, log_end_offset = ?, updated_at = ?, caught_up_at = ?, "
    "stage = ? "
    "WHERE topic = ? AND partition = ? AND consumer_group = ?"
)
LOAD_OFFSETS = "SELECT topic, partition, next_offset FROM {ks}.projector_offsets WHERE consumer_group = ?"


def vector_table(dimensions: int) -> str:
    """The vector table for an embedder of ``dimensions`` (a new size gets a new table)."""
    return f"recall_vectors_d{dimensions}"


def vector_ddl(ks: str, dimensions: int) -> tuple[str, str]:
    """``CREATE TABLE`` and its ANN index for ``dimensions``-sized embeddings (idempotent)."""
    table = vector_table(dimensions)
    return (
        f"CREATE TABLE IF NOT EXISTS {ks}.{table} (app_name text, user_id text, session_id text, ts timestamp, "
        f"event_id text, embedding vector<float, {dimensions}>, "
        "PRIMARY KEY ((app_name, user_id), session_id, ts, event_id))",
        f"CREATE CUSTOM INDEX IF NOT EXISTS {table}_ann ON {ks}.{table} (embedding) "
        "USING 'StorageAttachedIndex' WITH OPTIONS = {'similarity_function': 'COSINE'}",
    )


def insert_vector(ks: str, dimensions: int) -> str:
    return (
        f"INSERT INTO {ks}.{vector_table(dimensions)} (app_name, user_id, session_id, ts, event_id, embedding) "
        "VALUES (?, ?, ?, ?, ?, ?)"
    )
