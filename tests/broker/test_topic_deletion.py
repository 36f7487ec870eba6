"""A topic being deleted leaves the metadata whole, as in Kafka: Metadata answers list it with
every partition until its deletion starts, then not at all (UNKNOWN_TOPIC_OR_PARTITION), never
with the partitions its disk workers have not removed yet."""

from __future__ import annotations

import os
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.errors import ErrorCode
from tests.broker.wire import RawConnection

TOPIC = "doomed"
PARTITIONS = 300


def _watch(port: int, stop: threading.Event, seen: list[tuple[str, int, int]]) -> None:
    """Ask for the topic by name and for every topic, in turn, until ``stop``; record what each
    answer said of it: (how asked, error code, partitions listed), (..., -1, 0) when absent."""
    with RawConnection(port) as c:
        while not stop.is_set():
            for how, topics in (("named", [{"name": TOPIC}]), ("all", None)):
                body = c.request(3, 4, {"topics": topics, "allow_auto_topic_creation": False})
                mine = [t for t in body.topics if t.name == TOPIC]
                seen.append((how, mine[0].error_code, len(mine[0].partitions)) if mine
                            else (how, -1, 0))


def test_metadata_never_lists_part_of_a_topic_being_deleted(module_broker):
    broker = module_broker  # the two tests delete topics of different names
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(120)
    stop = threading.Event()
    seen: list[tuple[str, int, int]] = []
    watcher = threading.Thread(target=_watch, args=(broker.port, stop, seen))
    watcher.start()

    def answers(n: int) -> None:
        deadline = time.monotonic() + 60
        while len(seen) < n:
            assert watcher.is_alive(), "the Metadata watcher stopped"
            assert time.monotonic() < deadline, f"{len(seen)} Metadata answers in 60 s"
            stop.wait(0.01)

    try:
        answers(20)  # from before the deletion
        admin.delete_topics([TOPIC])[TOPIC].result(120)
        answers(len(seen) + 20)
    finally:
        stop.set()
        watcher.join(30)
    whole = ("named", 0, PARTITIONS), ("all", 0, PARTITIONS)
    gone = ("named", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0), ("all", -1, 0)
    partial = [s for s in seen if s not in whole + gone]
    assert not partial, f"{len(partial)} of {len(seen)} answers listed part of the topic: {partial[:5]}"
    assert seen[0] in whole and seen[-1] in gone, (seen[0], seen[-1])


def test_deleted_topics_files_go_after_the_answer_and_its_name_is_free_at_once(module_broker):
    """The disk worker renames the partition's dir and answers; its remover thread removes the
    files (storage/file_remover.py). A topic made again under the name starts empty."""
    broker = module_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("gone", 2, 1)])["gone"].result(60)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(20_000):
        p.produce("gone", b"v" * 200, partition=i % 2)
    assert p.flush(60) == 0
    disk = broker.log_dirs[0]
    assert {"gone-0", "gone-1"} <= set(os.listdir(disk))
    admin.delete_topics(["gone"])["gone"].result(60)
    assert not {"gone-0", "gone-1"} & set(os.listdir(disk))  # renamed before the answer
    deadline = time.monotonic() + 10
    while [n for n in os.listdir(disk) if n.startswith("gone-")]:
        assert time.monotonic() < deadline, os.listdir(disk)
        time.sleep(0.05)
    admin.create_topics([NewTopic("gone", 1, 1)])["gone"].result(60)
    p.produce("gone", b"again", partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "gone-check", "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition("gone", 0, 0)])
        msg = None
        deadline = time.monotonic() + 30
        while msg is None and time.monotonic() < deadline:
            msg = c.poll(0.5)
        assert msg is not None and msg.error() is None
        assert (msg.offset(), msg.value()) == (0, b"again")
    finally:
        c.close()
    assert "no such file" not in broker.log().lower() and "cannot remove" not in broker.log()
