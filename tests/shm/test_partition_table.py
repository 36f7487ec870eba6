"""The shared partition table: allocation, seqlock publication, attach/version checks."""

import os
import uuid

import posix_ipc
import pytest

from appliance.shm.layout import SlotState
from appliance.shm.partition_table import PartitionTable, TableVersionError


@pytest.fixture
def table():
    t = PartitionTable.create(f"/appliance-test-{uuid.uuid4().hex[:12]}", 64, broker_id=7, num_disks=2)
    yield t
    t.unlink()
    t.close()


def test_allocate_publish_read(table):
    with table.locked():
        s0 = table.allocate("orders", 0, 2, disk=0)
        s1 = table.allocate("orders", 1, 2, disk=1)
    assert s0 != s1
    table.publish(s1, 100, 90, 5)
    other = PartitionTable.attach(table.name)
    info = other.read(s1)
    assert (info.topic, info.partition, info.num_partitions, info.disk) == ("orders", 1, 2, 1)
    assert (info.log_end_offset, info.high_watermark, info.log_start_offset) == (100, 90, 5)
    assert other.offsets(s1) == (100, 90, 5)
    assert other.stable_offsets(s1) == (100, 90, 5, 90)   # no LSO given: the high watermark
    table.publish(s1, 100, 90, 5, 42)
    assert other.stable_offsets(s1) == (100, 90, 5, 42) and other.read(s1).last_stable_offset == 42
    assert other.read(s1).topic == "orders"
    assert other.find("orders", 0) == s0 and other.find("orders", 9) == -1
    assert other.broker_id == 7
    assert table.partitions_per_disk() == [1, 1]
    g = other.generation
    with table.locked():
        table.release(s0)
    assert other.generation > g and other.state(s0) == SlotState.FREE
    other.close()


def test_full_table_and_bad_names(table):
    with table.locked():
        for i in range(64):
            table.allocate("t", i, 64, disk=0)
        with pytest.raises(MemoryError):
            table.allocate("t", 64, 65, disk=0)
        with pytest.raises(ValueError):
            table.allocate("x" * 250, 0, 1, disk=0)


def _take(t: PartitionTable) -> int | None:
    with t.locked():
        return t.take_producer_id()


def test_producer_ids_unique_across_processes(table):
    """Two processes taking ids from one block under the table lock never get the same one,
    and the block runs out at its last id."""
    assert _take(table) is None  # a new table has no block: the first taker fetches one
    with table.locked():
        table.end_producer_id_refill((5000, 5999))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        t = PartitionTable.attach(table.name)
        ids = [_take(t) for _ in range(500)]
        os.write(w, ",".join(map(str, ids)).encode())
        os._exit(0)
    os.close(w)
    mine = [_take(table) for _ in range(500)]
    os.waitpid(pid, 0)
    theirs = b""
    while chunk := os.read(r, 65536):
        theirs += chunk
    all_ids = mine + [int(x) for x in theirs.decode().split(",")]
    assert sorted(all_ids) == list(range(5000, 6000))
    assert _take(table) is None and table.producer_id_block() == (6000, 5999)


def test_one_refill_claim_at_a_time(table):
    """One worker fetches the next block; the others see its claim until it ends or lapses."""
    import time

    other = PartitionTable.attach(table.name)
    with table.locked():
        assert table.claim_producer_id_refill(time.monotonic() + 60)
    with other.locked():
        assert not other.claim_producer_id_refill(time.monotonic() + 60)
        other.end_producer_id_refill((0, 999))  # a fetch that started before: installed
        assert other.take_producer_id() == 0
    with table.locked():  # the claim ended with the install
        assert table.claim_producer_id_refill(time.monotonic() - 1)  # lapses at once
    with other.locked():  # a lapsed claim (its worker died mid-fetch) is taken over
        assert other.claim_producer_id_refill(time.monotonic() + 60)
        other.end_producer_id_refill(None)  # the fetch failed: the block stays as it was
        assert other.take_producer_id() == 1
    other.close()


def test_attach_refuses_other_layouts():
    name = f"/appliance-test-{uuid.uuid4().hex[:12]}"
    shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, size=4096)
    try:
        with pytest.raises(TableVersionError):
            PartitionTable.attach(name)
    finally:
        shm.unlink()
        shm.close_fd()


def test_creator_pid(table):
    assert PartitionTable.creator_pid(table.name) == os.getpid()
    assert PartitionTable.creator_pid("/appliance-test-none-here") is None


def test_bad_slot_indexes_never_touch_the_worker_slots(table):
    """Issue 14: a worker slot's heartbeat once read 0.0. Every slot write is bounds-checked:
    negative or out-of-range partition slots and worker slots raise IndexError and leave the
    header and the worker slots byte for byte as they were."""
    table.set_worker(0, pid=123, kind=0, state=2, incarnation=1)
    before = bytes(table._buf[:table._slot_base])
    for bad in (-1, -table.capacity, table.capacity, 2**31 - 1):
        for write in (lambda s: table.publish(s, 1, 1, 1), lambda s: table.set_state(s, SlotState.ONLINE),
                      table.release, table.read, table.state):
            with pytest.raises(IndexError):
                write(bad)
    for bad in (-1, 64, 10**6):
        with pytest.raises(IndexError):
            table.heartbeat(bad)
        with pytest.raises(IndexError):
            table.set_worker_state(bad, 2)
    assert bytes(table._buf[:table._slot_base]) == before


def test_allocation_reuses_freed_slots_after_the_hint_wraps(table):
    with table.locked():
        slots = [table.allocate("t", i, 64, disk=0) for i in range(64)]
        assert sorted(slots) == list(range(64))
        table.release(slots[5])
        table.release(slots[40])
        again = {table.allocate("u", 0, 2, disk=1), table.allocate("u", 1, 2, disk=1)}
    assert again == {5, 40}


def test_attach_refuses_a_capacity_that_does_not_fit(table):
    import struct

    from appliance.shm.layout import TABLE_HEADER
    struct.pack_into("=I", table._buf, TABLE_HEADER.offset("capacity"), 10**6)
    with pytest.raises(TableVersionError, match="do not fit"):
        PartitionTable.attach(table.name)


def test_locked_async_waits_for_the_lock_without_blocking_the_loop(table):
    """Issue 14: a network worker blocked in flock while a disk worker registered thousands of
    partitions stopped heartbeating. The async lock lets the loop run while it waits."""
    import asyncio

    other = PartitionTable.attach(table.name)  # its own descriptor: flock excludes it

    with table.locked():
        table.end_producer_id_refill((0, 999))

    async def take() -> int:
        async with other.locked_async():
            return other.take_producer_id()

    async def main() -> tuple[int, int, int]:
        ticks = 0
        with table.locked():
            task = asyncio.ensure_future(take())
            for _ in range(10):
                await asyncio.sleep(0.005)
                ticks += 1
            assert not task.done()
        first = _take(table)  # unlocked again: both get distinct ids
        return ticks, first, await asyncio.wait_for(task, 5)

    ticks, a, b = asyncio.run(main())
    other.close()
    assert ticks == 10 and a != b


def test_a_reader_never_sees_a_heartbeat_or_worker_state_pass_through_zero(table):
    """struct.pack_into zero-fills its target before writing the value (CPython's
    s_pack_internal memsets the destination), so a stamp written with it passes through 0.0 in
    shared memory: the supervisor once read a live worker's heartbeat as 0.0. The stamp and the
    state word are single aligned stores; a reader in another process never sees 0."""
    import multiprocessing
    import time

    from appliance.shm.layout import WorkerState

    table.set_worker(3, pid=os.getpid(), kind=0, state=WorkerState.READY, incarnation=1)
    table.heartbeat(3)
    stop = multiprocessing.Event()

    def stamp(name: str) -> None:
        t = PartitionTable.attach(name)
        while not stop.is_set():
            for _ in range(1000):
                t.heartbeat(3)
                t.set_worker_state(3, WorkerState.READY)
        t.close()

    child = multiprocessing.get_context("fork").Process(target=stamp, args=(table.name,))
    child.start()
    try:
        zero_beats = zero_states = reads = 0
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            for _ in range(1000):
                _, beat, state, _, _ = table.worker(3)
                zero_beats += beat == 0.0
                zero_states += state == 0
            reads += 1000
    finally:
        stop.set()
        child.join(10)
    assert reads > 10_000
    assert (zero_beats, zero_states) == (0, 0), f"{zero_beats} zero stamps, {zero_states} zero states in {reads} reads"


def test_topic_ids_in_slots_and_the_index(table):
    """A slot carries its topic's id (KIP-516): given at allocation or set later by the disk
    worker; the index maps ids to names, and a reused slot does not keep the old id."""
    from appliance.shm.partition_index import PartitionIndex
    from appliance.shm.partition_table import ZERO_TOPIC_ID

    a, b = bytes(range(16)), bytes(range(1, 17))
    with table.locked():
        s0 = table.allocate("orders", 0, 2, disk=0, topic_id=a)
        s1 = table.allocate("orders", 1, 2, disk=1, topic_id=a)
        s2 = table.allocate("legacy", 0, 1, disk=0)
    table.publish(s0, 10, 10, 0)  # offsets written around it leave it alone
    other = PartitionTable.attach(table.name)
    index = PartitionIndex(other)
    assert other.read(s0).topic_id == other.read(s1).topic_id == a
    assert other.read(s2).topic_id == ZERO_TOPIC_ID
    assert index.topic_id("orders") == a and index.topic_id("legacy") == ZERO_TOPIC_ID
    assert index.topic_name(a) == "orders" and index.topic_name(b) is None
    assert index.topic_name(ZERO_TOPIC_ID) is None
    table.set_topic_id(s2, b)
    assert index.topic_name(b) == "legacy" and other.read(s2).topic.startswith("legacy")
    with pytest.raises(ValueError):
        table.set_topic_id(s2, b[:8])
    with table.locked():
        table.release(s2)
        again = table.allocate("legacy", 0, 1, disk=0)
    assert other.read(again).topic_id == ZERO_TOPIC_ID and index.topic_name(b) is None
    other.close()


def test_slots_lists_exactly_the_used_slots_first_to_last(table):
    with table.locked():
        slots = [table.allocate("t", i, 64, disk=0) for i in range(64)]
        for s in slots[1:-1]:
            if s % 7:
                table.release(s)
    kept = [s for s in slots if s == slots[0] or s == slots[-1] or not s % 7]
    seen = list(table.slots())
    assert [i.slot for i in seen] == sorted(kept)
    assert all(i.state != SlotState.FREE and i.topic == "t" for i in seen)
    assert table.capacity - 1 in kept and 0 in kept  # both ends of the strided read
    other = PartitionTable.attach(table.name)
    with table.locked():
        table.release(slots[-1])
    assert [i.slot for i in other.slots()] == sorted(kept)[:-1]
    other.close()
