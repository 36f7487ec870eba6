"""The cluster's metadata cache in shared memory (shm/metadata_cache.py) and the one function
that picks the view a request is judged against (broker/cluster_view.py), without a broker."""

from __future__ import annotations

import multiprocessing
import uuid

import posix_ipc
import pytest

from appliance.broker.cluster_view import ClusterView
from appliance.errors import ErrorCode
from appliance.shm.metadata_cache import MetadataCache, MetadataTooLarge
from appliance.shm.partition_index import PartitionIndex
from appliance.shm.partition_table import PartitionTable


@pytest.fixture
def names():
    made: list[str] = []

    def name() -> str:
        made.append(f"/mdc-test-{uuid.uuid4().hex[:10]}")
        return made[-1]
    yield name
    for n in made:
        try:
            posix_ipc.unlink_shared_memory(n)
        except posix_ipc.ExistentialError:
            pass


def test_a_reader_sees_what_the_writer_published(names):
    name = names()
    writer = MetadataCache.create(name, 1 << 20)
    reader = MetadataCache.attach(name)
    assert reader.topics() == {} and not reader.published
    writer.publish({"orders": {0: (1, 4), 1: (2, 0), 2: (-1, 3)}, "ünïcode": {0: (0, 0)}})
    assert reader.published
    assert reader.topics() == {"orders": {0: (1, 4), 1: (2, 0), 2: (-1, 3)}, "ünïcode": {0: (0, 0)}}
    assert len(reader.topics()["orders"]) == 3 and "nope" not in reader.topics()
    assert reader.topics()["orders"][2] == (-1, 3) and 9 not in reader.topics()["orders"]
    writer.publish({"orders": {0: (1, 5)}})  # a deleted topic and partitions are gone
    assert reader.topics() == {"orders": {0: (1, 5)}}
    reader.close()
    writer.close()


def test_attach_refuses_another_object(names):
    name = names()
    posix_ipc.SharedMemory(name, posix_ipc.O_CREX, size=4096).close_fd()
    with pytest.raises(ValueError, match="not a metadata cache"):
        MetadataCache.attach(name)


def test_metadata_larger_than_the_object_is_refused_and_the_old_view_stays(names):
    name = names()
    writer = MetadataCache.create(name, 4096)
    writer.publish({"small": {0: (1, 1)}})
    with pytest.raises(MetadataTooLarge):
        writer.publish({f"t{i}": {p: (1, 1) for p in range(50)} for i in range(10)})
    assert MetadataCache.attach(name).topics() == {"small": {0: (1, 1)}}


def _publish_many(name: str, rounds: int) -> None:
    w = MetadataCache.attach(name)
    for g in range(1, rounds + 1):
        # every partition of one view carries the view's number: a torn read mixes numbers
        w.publish({f"t{t}": {p: (g, g) for p in range(g % 7 + 1)} for t in range(g % 5 + 1)})
    w.close()


def test_a_reader_in_another_process_never_sees_a_torn_view(names):
    name = names()
    MetadataCache.create(name, 1 << 20).close()
    reader = MetadataCache.attach(name)
    rounds = 3000
    writer = multiprocessing.get_context("fork").Process(target=_publish_many, args=(name, rounds))
    writer.start()
    seen = 0
    last = 0
    while writer.is_alive() or last < rounds:
        view = reader.topics()
        values = {v for parts in view.values() for v in parts.values()}
        assert len(values) <= 1, f"a torn view: {values}"
        if values:
            g = values.pop()[0]
            assert g >= last, "a view older than one already seen"
            assert set(view) == {f"t{t}" for t in range(g % 5 + 1)}
            assert all(len(parts) == g % 7 + 1 for parts in view.values())
            seen += g != last
            last = g
        if not writer.is_alive() and last < rounds:
            view = reader.topics()
            assert {v for parts in view.values() for v in parts.values()} == {(rounds, rounds)}
            break
    writer.join()
    assert writer.exitcode == 0 and seen > 0


def test_the_view_standalone_is_the_partition_table_and_in_a_cluster_the_cache(names):
    table = PartitionTable.create(f"/mdc-table-{uuid.uuid4().hex[:10]}", 16, broker_id=0, num_disks=1)
    try:
        table.allocate("local", 0, 2, 0, 2, bytes(16))
        index = PartitionIndex(table)
        standalone = ClusterView(index)
        assert standalone.has_partition("local", 0) and not standalone.has_partition("local", 1)
        assert standalone.not_served("local", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert standalone.not_served("elsewhere", 0) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        cache = MetadataCache.create(names(), 1 << 16)
        cache.publish({"elsewhere": {0: (2, 1), 1: (1, 1)}, "local": {0: (0, 1), 1: (2, 1)}})
        cluster = ClusterView(index, cache)
        # a partition this broker holds no replica of still exists in the cluster
        assert cluster.has_partition("elsewhere", 1) and cluster.has_partition("local", 1)
        assert cluster.not_served("elsewhere", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert cluster.not_served("elsewhere", 5) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert cluster.not_served("nope", 0) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert not cluster.has_partition("nope", 0) and not cluster.has_partition("elsewhere", 2)
        cache.close()
    finally:
        table.unlink()
        table.close()
