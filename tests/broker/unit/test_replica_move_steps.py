"""The source side of a replica move in a real disk worker fed ring messages in memory: after
the handoff the partition refuses appends (retriable), and a move whose driver goes silent is
taken back by the source, intact."""

from __future__ import annotations

import json
import time

from appliance.broker.disk import replica_move
from appliance.errors import ErrorCode
from appliance.records.batch import build_batch
from appliance.shm.layout import HANDOFF_RESULT, MsgType, SlotState
from tests.broker.unit.test_disk_worker import _create, disk, senders  # noqa: F401 (fixtures)


def _step(worker, sender, slot: int, op: str, **fields) -> tuple:
    rid = sender.send(MsgType.REPLICA_MOVE, slot, json.dumps({"op": op, "topic": "t", "partition": 0, **fields}).encode())
    worker.round()
    (comp,) = sender.completions()
    assert comp[0] == rid
    return comp


def test_a_stalled_handoff_is_taken_back(disk, senders, monkeypatch):  # noqa: F811 (the fixtures)
    s = senders[0]
    slot = _create(disk, s)
    s.send(MsgType.PRODUCE, slot, build_batch([(b"k", b"v%d" % i) for i in range(5)]))
    disk.round()
    s.completions()

    comp = _step(disk, s, slot, "handoff")
    assert comp[5] == ErrorCode.NONE
    assert HANDOFF_RESULT.struct.unpack_from(comp[6], 0) == (5, 0)  # the offsets handed over
    assert disk.table.state(slot) == SlotState.OFFLINE
    rid = s.send(MsgType.PRODUCE, slot, build_batch([(b"k", b"late")]))
    disk.round()
    assert [(c[0], c[5]) for c in s.completions()] == [(rid, ErrorCode.NOT_LEADER_OR_FOLLOWER)]

    disk.mover.expire(time.monotonic())  # not yet
    assert disk.table.state(slot) == SlotState.OFFLINE
    monkeypatch.setattr(replica_move, "HANDOFF_TIMEOUT_S", 0.0)
    disk.mover.expire(time.monotonic() + 1)
    assert disk.table.state(slot) == SlotState.ONLINE
    rid = s.send(MsgType.PRODUCE, slot, build_batch([(b"k", b"again")]))
    disk.round()
    assert [(c[0], c[1], c[5]) for c in s.completions()] == [(rid, 5, ErrorCode.NONE)]
    # a step of the dead driver arriving now finds nothing to retire
    assert _step(disk, s, slot, "retire", dest=1)[5] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert disk.table.read(slot).disk == 0
