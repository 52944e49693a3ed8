"""The driver profile follows the settings (no server needed: the cluster is not connected)."""

from __future__ import annotations

import pytest
from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT
from cassandra.query import named_tuple_factory
from pydantic import ValidationError

from projections.cassandra_session import named_tuple_rows, open_cluster
from schemas.settings import CassandraSettings


def test_reads_and_writes_default_to_local_quorum() -> None:
    cluster = open_cluster(CassandraSettings())
    assert cluster.profile_manager.profiles[EXEC_PROFILE_DEFAULT].consistency_level == ConsistencyLevel.LOCAL_QUORUM


def test_the_configured_level_is_used() -> None:
    cluster = open_cluster(CassandraSettings(consistency="LOCAL_ONE", request_timeout_s=3))
    profile = cluster.profile_manager.profiles[EXEC_PROFILE_DEFAULT]
    assert (profile.consistency_level, profile.request_timeout) == (ConsistencyLevel.LOCAL_ONE, 3)


def test_an_unknown_level_is_refused_by_name() -> None:
    with pytest.raises(ValidationError, match="consistency"):
        CassandraSettings(consistency="TWO")  # type: ignore[arg-type]


def test_the_control_connection_waits_as_long_as_a_connect() -> None:
    """Its 2 s default failed ``connect`` while the node applied other clients' schema changes."""
    assert open_cluster(CassandraSettings(connect_timeout_s=7)).control_connection_timeout == 7


def test_rows_are_the_drivers_named_tuples_with_one_class_per_column_list() -> None:
    """``named_tuple_rows`` answers what the driver's default factory does, without a class per result."""
    columns = ["[applied]", "version", "summary_json", "class"]  # an LWT answer's names; namedtuple refuses "class"
    values = [(False, 3, "{}", "x"), (True, None, None, "y")]
    ours, theirs = named_tuple_rows(columns, values), named_tuple_factory(columns, values)
    assert ours == theirs
    assert [r._fields for r in ours] == [r._fields for r in theirs]
    assert ours[0].applied is False and ours[0].version == 3
    assert type(named_tuple_rows(list(columns), values[:1])[0]) is type(ours[0])
    assert named_tuple_rows(["a"], []) == []
    profile = open_cluster(CassandraSettings()).profile_manager.profiles[EXEC_PROFILE_DEFAULT]
    assert profile.row_factory is named_tuple_rows
