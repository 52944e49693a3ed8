"""The driver profile follows the settings (no server needed: the cluster is not connected)."""

from __future__ import annotations

import pytest
from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT
from pydantic import ValidationError

from projections.cassandra_session import open_cluster
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
