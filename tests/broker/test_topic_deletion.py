"""A topic being deleted leaves the metadata whole, as in Kafka: Metadata answers list it with
every partition until its deletion starts, then not at all (UNKNOWN_TOPIC_OR_PARTITION), never
with the partitions its disk workers have not removed yet."""

from __future__ import annotations

import threading
import time

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


def test_metadata_never_lists_part_of_a_topic_being_deleted(broker):
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
