"""Grouping a batch's outgoing records by partition keeps each partition's order (pure)."""

from __future__ import annotations

from streams.app.batch_produce import group_by_partition


def test_groups_keep_the_order_of_each_partition() -> None:
    records = [("cl", b"a", b"1", 0), ("jobs", b"a", b"j", 0), ("cl", b"b", None, 1), ("cl", b"a", b"2", 0),
               ("cl", b"c", "三".encode(), 1)]  # fmt: skip
    groups = group_by_partition(records)
    assert groups == {("cl", 0): [(b"a", b"1"), (b"a", b"2")], ("jobs", 0): [(b"a", b"j")],
                      ("cl", 1): [(b"b", None), (b"c", "三".encode())]}  # fmt: skip
    assert list(groups) == [("cl", 0), ("jobs", 0), ("cl", 1)]  # first appearance


async def test_a_slow_produce_warning_says_what_the_sender_holds_back() -> None:
    from aiokafka import AIOKafkaProducer

    from streams.app.batch_produce import producer_state

    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")  # never started: metadata knows no leader
    fields = producer_state(producer, [("jobs", b"k", b"v", 1), ("jobs", b"k", b"v", 0)])
    assert fields["leaders"] == "jobs[0]=None,jobs[1]=None"
    assert fields["in_flight_nodes"] == "" and fields["muted"] == "" and fields["queued_batches"] == ""
    assert producer_state(object(), [("jobs", b"k", b"v", 0)]) == {}  # nothing of aiokafka's there: nothing said
