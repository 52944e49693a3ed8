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


class _Cluster:
    """What aiokafka's accumulator asks the metadata: every partition's leader is node 0."""

    def leader_for_partition(self, tp: object) -> int:
        return 0


class _Producer:
    """``create_batch``/``send_batch`` of an aiokafka producer over a real accumulator, without a broker."""

    def __init__(self, linger_ms: int) -> None:
        from aiokafka.producer.message_accumulator import MessageAccumulator

        self.accumulator = MessageAccumulator(_Cluster(), 16384, 0, 30.0, linger_ms=linger_ms)

    def create_batch(self) -> object:
        return self.accumulator.create_builder()

    async def send_batch(self, batch: object, topic: str, *, partition: int) -> object:
        from aiokafka.structs import TopicPartition

        return await self.accumulator.add_batch(batch, TopicPartition(topic, partition), 30.0)


async def test_queued_batches_are_sent_at_once_not_after_the_linger() -> None:
    """A call's batches are ready for the sender as soon as they are queued: no linger timer, no
    second wake-up of the event loop per fetch cycle (the producer's linger is for lone ``send`` s)."""
    from streams.app.batch_produce import send_in_batches

    producer = _Producer(linger_ms=60_000)
    sent = await send_in_batches(producer, [("cl", b"a", b"1", 0), ("jobs", b"a", b"j", 0), ("cl", b"b", b"2", 1)])
    ready, _ = producer.accumulator.drain_by_nodes(ignore_nodes=set())
    assert sorted((tp.topic, tp.partition, b.record_count) for tp, b in ready[0].items()) == [
        ("cl", 0, 1), ("cl", 1, 1), ("jobs", 0, 1)]  # fmt: skip
    assert [(b.topic, b.partition, b.records) for b in sent] == [("cl", 0, 1), ("jobs", 0, 1), ("cl", 1, 1)]
    for batch in ready[0].values():  # no pending futures left behind
        batch.done_noack()
