"""The disk worker's table of message types fed ring messages in memory: real shared memory,
a real log dir, no process."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from appliance.broker.disk.ring_intake import DATA_BELL_BURST, DATA_BELL_INTERVAL_S, ROUND_LIMIT
from appliance.broker.disk.worker import DiskWorker
from appliance.errors import ErrorCode
from appliance.records.batch import build_batch
from appliance.shm.layout import COMPLETION, REQUEST, DataWanted, MsgType, SlotState
from appliance.shm.ring import Channel

_REQ = REQUEST.struct
_COMP = COMPLETION.struct


@pytest.fixture
def disk(config, plumbing):
    """Disk worker 0 attached and opened (not running its loop); closed cleanly afterwards."""
    p, _ = plumbing
    w = DiskWorker(0, config.log_dirs[0], config, p)
    w.attach()
    w.open()
    yield w
    w.close()
    w.rings.close()
    w.ipc.close()
    w.table.close()


class Sender:
    """Network worker ``n``'s end of the rings to disk 0."""

    def __init__(self, plumbing, n: int) -> None:
        self.channel = Channel.attach(plumbing.channel_names[(n, 0)])
        self.ids = iter(range(1, 1 << 30))

    def send(self, msg_type: int, slot: int, payload: bytes = b"", acks: int = 1) -> int:
        request_id = next(self.ids)
        assert self.channel.requests.put(msg_type, _REQ.pack(request_id, slot, acks, 0, 30000, 0), payload)
        return request_id

    def completions(self) -> list[tuple]:
        out = []
        ring = self.channel.completions
        while (msg := ring.peek()) is not None:
            msg_type, payload = msg
            assert msg_type == MsgType.COMPLETION
            out.append(_COMP.unpack_from(payload, 0) + (bytes(payload[COMPLETION.size:]),))
            del payload
            ring.release()
        return out


@pytest.fixture
def senders(plumbing):
    p, _ = plumbing
    made = [Sender(p, 0), Sender(p, 1)]
    yield made
    for s in made:
        s.channel.close()


def _create(disk, sender, topic="t", partition=0) -> int:
    with disk.table.locked():
        slot = disk.table.allocate(topic, partition, 1, 0)
    rid = sender.send(MsgType.CREATE_PARTITION, slot, json.dumps({"configs": {}}).encode())
    assert disk.round()
    (comp,) = sender.completions()
    assert (comp[0], comp[5]) == (rid, ErrorCode.NONE)
    assert disk.table.state(slot) == SlotState.ONLINE
    return slot


def test_the_table_names_every_request_type(disk):
    assert set(disk.requests.handlers) == {MsgType.PRODUCE, MsgType.CREATE_PARTITION,
                                           MsgType.DELETE_PARTITION, MsgType.ALTER_CONFIG,
                                           MsgType.GROUP, MsgType.DELETE_RECORDS,
                                           MsgType.ALTER_BROKER_CONFIG, MsgType.REPLICA_MOVE,
                                           MsgType.DESCRIBE_PRODUCERS, MsgType.TOPIC_ID,
                                           MsgType.WRITE_TXN_MARKER}


def test_topic_id_message_sets_the_slot_and_partition_metadata(disk, senders):
    slot = _create(disk, senders[0])
    part_dir = Path(disk.partitions.partitions[slot].log.path)
    assert disk.table.read(slot).topic_id == bytes(16)  # allocated without one
    assert not (part_dir / "partition.metadata").exists()
    tid = bytes(range(16))
    rid = senders[0].send(MsgType.TOPIC_ID, slot, tid)
    bad = senders[0].send(MsgType.TOPIC_ID, slot, tid[:8])  # not 16 bytes: refused, nothing set
    assert disk.round()
    assert [(c[0], c[5]) for c in senders[0].completions()] == [
        (rid, ErrorCode.NONE), (bad, ErrorCode.INVALID_REQUEST)]
    assert disk.table.read(slot).topic_id == tid
    assert (part_dir / "partition.metadata").read_text() == "version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw\n"


def test_describe_producers_lists_each_producer_state(disk, senders):
    from appliance.shm.layout import PRODUCER_ENTRY

    slot = _create(disk, senders[0])
    for pid, seqs in ((7, (0, 3)), (9, (0,))):
        for base_seq in seqs:
            batch = build_batch([(b"k", b"a"), (b"k", b"b"), (b"k", b"c")], producer_id=pid,
                                producer_epoch=2, base_sequence=base_seq)
            senders[0].send(MsgType.PRODUCE, slot, batch)
    rid = senders[0].send(MsgType.DESCRIBE_PRODUCERS, slot)
    missing = senders[0].send(MsgType.DESCRIBE_PRODUCERS, slot + 1)
    assert disk.round()
    comps = {c[0]: c for c in senders[0].completions()}
    assert comps[missing][5] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    body = comps[rid][6]
    entries = sorted(PRODUCER_ENTRY.struct.iter_unpack(body))
    # (producer id, offset of its last batch's last record, epoch, last sequence, open
    # transaction's first offset, coordinator epoch)
    assert entries == [(7, 5, 2, 5, -1, -1), (9, 8, 2, 2, -1, -1)]


def test_an_idle_round_handles_nothing(disk, senders):
    assert not disk.round()
    assert senders[0].completions() == []


def test_create_then_produce_answers_each_sender_in_its_order(disk, senders):
    slot = _create(disk, senders[0])
    a = [senders[0].send(MsgType.PRODUCE, slot, build_batch([(b"k", b"a%d" % i)])) for i in range(2)]
    b = senders[1].send(MsgType.PRODUCE, slot, build_batch([(b"k", b"b"), (b"k", b"c")]))
    assert disk.round()
    got0, got1 = senders[0].completions(), senders[1].completions()
    assert [(c[0], c[1], c[5]) for c in got0] == [(a[0], 0, 0), (a[1], 1, 0)]
    assert [(c[0], c[1], c[5]) for c in got1] == [(b, 2, 0)]
    assert disk.table.offsets(slot)[:2] == (4, 4)  # log end offset, high watermark


def test_a_round_cut_at_the_limit_says_requests_are_left(disk, senders):
    # the loop sleeps after a busy round unless this says otherwise: every other request comes
    # with a doorbell, these would wait for the next one
    slot = _create(disk, senders[0])
    assert not disk.requests_left
    batch = build_batch([(None, b"v")])
    ids = [senders[0].send(MsgType.PRODUCE, slot, batch) for _ in range(ROUND_LIMIT + 1)]
    assert disk.round() and disk.requests_left
    assert len(senders[0].completions()) == ROUND_LIMIT
    assert disk.round() and not disk.requests_left
    (last,) = senders[0].completions()
    assert (last[0], last[1], last[5]) == (ids[-1], ROUND_LIMIT, 0)
    assert not disk.round() and not disk.requests_left


def test_acks_0_produce_is_appended_without_a_completion(disk, senders):
    slot = _create(disk, senders[0])
    senders[0].send(MsgType.PRODUCE, slot, build_batch([(b"k", b"v")]), acks=0)
    assert disk.round()
    assert senders[0].completions() == []
    assert disk.table.offsets(slot)[0] == 1


def test_a_slot_of_another_disk_is_not_here(disk, senders):
    with disk.table.locked():
        other = disk.table.allocate("elsewhere", 0, 1, 1)
    rid = senders[0].send(MsgType.PRODUCE, other, build_batch([(b"k", b"v")]))
    disk.round()
    assert [(c[0], c[5]) for c in senders[0].completions()] == [(rid, ErrorCode.NOT_LEADER_OR_FOLLOWER)]


def test_unknown_type_and_corrupt_batch_get_error_codes(disk, senders):
    slot = _create(disk, senders[0])
    bad = bytearray(build_batch([(b"k", b"v")]))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    r1 = senders[0].send(99, slot)  # no handler for it
    r2 = senders[0].send(MsgType.PRODUCE, slot, bytes(bad))
    r3 = senders[0].send(MsgType.PRODUCE, slot, build_batch([(b"k", b"ok")]))
    r4 = senders[0].send(MsgType.DELETE_RECORDS, slot)  # its offset missing
    disk.round()
    got = [(c[0], c[1], c[5]) for c in senders[0].completions()]
    assert got == [(r1, -1, ErrorCode.INVALID_REQUEST), (r2, -1, ErrorCode.CORRUPT_MESSAGE),
                   (r3, 0, ErrorCode.NONE), (r4, -1, ErrorCode.INVALID_REQUEST)]


def test_alter_then_delete_releases_the_slot(disk, senders):
    slot = _create(disk, senders[0])
    r1 = senders[0].send(MsgType.ALTER_CONFIG, slot, json.dumps({"configs": {"retention.ms": "1000"}}).encode())
    r2 = senders[0].send(MsgType.DELETE_PARTITION, slot)
    disk.round()
    assert [(c[0], c[5]) for c in senders[0].completions()] == [(r1, 0), (r2, 0)]
    assert disk.table.state(slot) == SlotState.FREE
    assert slot not in disk.partitions.partitions


def test_reload_files_reads_hand_edited_configs_and_keeps_them_on_a_bad_file(disk, senders):
    """What SIGHUP makes the loop run: dynamic-broker-configs.json and topic.properties re-read."""
    slot = _create(disk, senders[0])
    plog = disk.partitions.partitions[slot].log
    assert plog.config["retention.bytes"] == -1
    (Path(plog.path) / "topic.properties").write_text("retention.ms=1234\n")
    dyn = Path(disk.config.log_dirs[0]) / "dynamic-broker-configs.json"
    dyn.write_text('{"broker": {"log.retention.bytes": "99"}, "default": {}}\n')
    disk.admin.reload_files()
    plog = disk.partitions.partitions[slot].log
    assert (plog.config["retention.ms"], plog.config["retention.bytes"]) == (1234, 99)
    dyn.write_text("{not json")
    disk.admin.reload_files()  # logged; the configs in force stay
    assert disk.partitions.partitions[slot].log.config["retention.bytes"] == 99


def _rung(bell: int) -> bool:
    try:
        os.eventfd_read(bell)
        return True
    except BlockingIOError:
        return False


def test_data_bells_ring_only_the_workers_waiting_for_what_moved(disk, senders, plumbing):
    # network worker 0 holds a follower's long poll (it reads up to the log end offset), 1 a
    # consumer's (up to the high watermark): an append rings both; a move of the high
    # watermark alone (a follower's fetch position under acks=all) only the consumer's
    p, _ = plumbing
    slot = _create(disk, senders[0])
    senders[0].channel.completions.want_data(DataWanted.LOG_END)
    senders[1].channel.completions.want_data(DataWanted.ANY)
    time.sleep(DATA_BELL_INTERVAL_S * 2)  # past the coalescing of data bells
    for bell in p.net_bells:
        _rung(bell)
    senders[1].send(MsgType.PRODUCE, slot, build_batch([(b"k", b"v")]), acks=0)  # no completion
    assert disk.round()
    assert [_rung(b) for b in p.net_bells] == [True, True]
    time.sleep(DATA_BELL_INTERVAL_S * 2)
    disk.partitions.publish(slot, disk.partitions.partitions[slot].log, DataWanted.ANY)
    disk.round()
    assert [_rung(b) for b in p.net_bells] == [False, True]
    senders[1].channel.completions.want_data(0)  # nobody waits for the high watermark now
    time.sleep(DATA_BELL_INTERVAL_S * 2)
    disk.partitions.publish(slot, disk.partitions.partitions[slot].log, DataWanted.ANY)
    disk.round()
    assert [_rung(b) for b in p.net_bells] == [False, False]
    assert not disk.rings.data_bell_pending  # dropped: no later round rings for it


def test_data_bells_ring_at_once_for_a_burst_and_one_per_interval_after(disk, senders, plumbing):
    """A consumer's long poll on another network worker than its producer: after a quiet
    spell, each of DATA_BELL_BURST appends in a row rings its worker at once (a strict one per
    interval made an append arriving a little early wait for the next; see DATA_BELL_BURST);
    the bucket then lets one through per interval."""
    p, _ = plumbing
    slot = _create(disk, senders[0])
    senders[1].channel.completions.want_data(DataWanted.ANY)
    time.sleep(DATA_BELL_INTERVAL_S * DATA_BELL_BURST * 2)  # the bucket refills
    for bell in p.net_bells:
        _rung(bell)
    first = time.monotonic()
    for _ in range(DATA_BELL_BURST):
        senders[0].send(MsgType.PRODUCE, slot, build_batch([(b"k", b"v")]), acks=0)
        assert disk.round()
        assert _rung(p.net_bells[1])
    assert not disk.rings.data_bell_pending
    # the bucket is empty: the next bell is due no sooner than an interval after the burst began
    assert disk.rings.data_bell_due() >= first + DATA_BELL_INTERVAL_S


def test_held_answers_released_in_one_round_ring_their_worker_once(disk, senders, plumbing):
    # acks=all: the answers a high watermark move releases (one follower fetch covers every
    # partition it follows) go on the completion ring at once, and their network worker's
    # doorbell is written once, at the end of the round, not once per answer
    p, _ = plumbing
    for bell in p.net_bells:
        _rung(bell)
    disk.rings.complete_held(0, _COMP.pack(7, 0, -1, 0, 3, 0))
    disk.rings.complete_held(0, _COMP.pack(8, 1, -1, 0, 4, 0))
    assert [_rung(b) for b in p.net_bells] == [False, False]  # not yet: the round is not over
    assert disk.round() is False  # nothing on the request rings; the round rings all the same
    assert os.eventfd_read(p.net_bells[0]) == 1  # one write for both answers
    assert not _rung(p.net_bells[1])
    assert [c[0] for c in senders[0].completions()] == [7, 8]
    disk.round()
    assert not _rung(p.net_bells[0])  # owed once, rung once
