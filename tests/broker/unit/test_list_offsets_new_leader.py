"""KIP-207 on a real partition table and leadership area (POSIX shared memory): a new leader
whose high watermark, learnt as a follower, is below the offset its leadership began at
answers a client's ListOffsets OFFSET_NOT_AVAILABLE (clients retry it) instead of an end of
log below the one the last leader exposed; a replica's request is answered as before."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from appliance.broker.handlers import list_offsets
from appliance.errors import ErrorCode
from appliance.shm.layout import Role, SlotState
from appliance.shm.leadership_area import LeadershipArea
from appliance.shm.mapping import unlink_mapped
from appliance.shm.partition_index import PartitionIndex
from appliance.shm.partition_table import PartitionTable


@pytest.fixture
def ctx():
    name = f"/appliance-test-{uuid.uuid4().hex[:12]}"
    table = PartitionTable.create(name, 8, broker_id=2, num_disks=1)
    area = LeadershipArea.create(name + "-leaders", 8)
    with table.locked():
        slot = table.allocate("orders", 0, 1, disk=0, state=SlotState.ONLINE)
    index = PartitionIndex(table)
    index.refresh()
    c = SimpleNamespace(table=table, leaders=area, index=index, slot=slot,
                        leads=lambda s: area.role(s) == Role.LEADER)
    yield c
    table.unlink()
    table.close()
    unlink_mapped(area._shm)
    area.close()


def _ask(ctx, timestamp: int = -1, version: int = 5, replica_id: int = -1) -> tuple[int, int]:
    part = SimpleNamespace(partition_index=0, timestamp=timestamp, max_num_offsets=1)
    body = SimpleNamespace(replica_id=replica_id, isolation_level=0, topics=[SimpleNamespace(name="orders", partitions=[part])])
    resp = asyncio.run(list_offsets.handle(ctx, SimpleNamespace(api_version=version, body=body)))
    (p,) = resp["topics"][0]["partitions"]
    return p["error_code"], p.get("offset", p.get("old_style_offsets"))


def _lead(ctx, epoch: int, leo: int, hw: int) -> None:
    ctx.leaders.write(ctx.slot, Role.LEADER, 2, epoch, (1, 2, 3), (2, 3))
    ctx.table.publish(ctx.slot, leo, hw, 0)


def test_a_new_leader_answers_offset_not_available_until_its_hw_reaches_its_epoch_start(ctx):
    _lead(ctx, epoch=5, leo=18, hw=9)             # follower's HW 9; the last leader's was 18
    assert _ask(ctx)[0] == ErrorCode.OFFSET_NOT_AVAILABLE  # not stamped yet: not known either
    ctx.leaders.set_epoch_start(ctx.slot, 5, 18)  # the disk worker stamped epoch 5 at 18
    for ts in (-1, -2, 0):                        # latest, earliest, by time: all wait, as Kafka's
        assert _ask(ctx, ts)[0] == ErrorCode.OFFSET_NOT_AVAILABLE
    ctx.table.publish(ctx.slot, 18, 18, 0)        # the ISR's follower fetched: HW reached 18
    assert _ask(ctx) == (0, 18)
    assert _ask(ctx, -2) == (0, 0)


def test_an_older_leaderships_epoch_start_is_not_trusted(ctx):
    _lead(ctx, epoch=5, leo=18, hw=18)
    ctx.leaders.set_epoch_start(ctx.slot, 5, 18)
    assert _ask(ctx) == (0, 18)
    _lead(ctx, epoch=6, leo=30, hw=18)            # re-elected with a new epoch, not stamped yet
    assert _ask(ctx)[0] == ErrorCode.OFFSET_NOT_AVAILABLE
    ctx.leaders.set_epoch_start(ctx.slot, 6, 30)
    ctx.table.publish(ctx.slot, 30, 30, 0)
    assert _ask(ctx) == (0, 30)


def test_a_replicas_request_is_answered_as_before(ctx):
    _lead(ctx, epoch=5, leo=18, hw=9)
    ctx.leaders.set_epoch_start(ctx.slot, 5, 18)
    assert _ask(ctx, replica_id=3) == (0, 9)      # not a client's: the HW as it is
