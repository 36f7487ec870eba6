"""Fetch: byte ranges of segment files, bounded by the high watermark, sent with sendfile.

Long poll: when less than min_bytes is available the request waits (without blocking anything)
until a disk worker reports an append or max_wait_ms passes. A wake-up re-reads the partitions
only when the offset the fetch reads up to (a follower: the log end offset; a consumer: the high
watermark) moved for one of them, or one left the ONLINE state or this broker's leadership
(Kafka's DelayedFetch cases): a follower's fetch is not re-read for every high watermark move.
Only the first partition with data may exceed the byte limits (KIP-74: at least one whole batch, so a consumer always progresses).
Fetch sessions (v7+) are answered sessionless (session id 0): clients then send full requests.

Transactions (v4+, KIP-98): every answer carries the partition's last stable offset; a
read_committed consumer (isolation_level 1) reads up to it, not to the high watermark, and gets
the aborted transactions overlapping what it may read (producer id, first offset), from the
segments' ``.txnindex`` files (``LogReader.aborted_transactions``); its long poll waits on the
LSO. The consumer drops the aborted producers' batches itself.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from appliance.broker.handlers.answer import unavailable_error
from appliance.broker.handlers.fetch_down_convert import FIRST_V2_FETCH_VERSION, down_convert
from appliance.broker.replica_selector import NO_REPLICA
from appliance.errors import ErrorCode, OffsetOutOfRangeError
from appliance.metrics.responses import remote_wait
from appliance.protocol.messages import Fetch
from appliance.protocol.types import FileSlice
from appliance.shm.layout import FOLLOWER_FETCH_BODY, DataWanted, MsgType, Role, SlotState

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle", "replica_id_of", "topic_names", "FIRST_TOPIC_ID_VERSION",
           "FIRST_REPLICA_STATE_VERSION"]

FIRST_TOPIC_ID_VERSION = 13  # topics named by id (KIP-516)
FIRST_REPLICA_STATE_VERSION = 15  # the replica id moves into ReplicaState (KIP-903)
FIRST_RACK_VERSION = 11  # the consumer's rack, and the preferred read replica (KIP-392)
FIRST_ISOLATION_VERSION = 4  # isolation_level, last_stable_offset, aborted_transactions (KIP-98)
READ_COMMITTED = 1
# the index of what a long poll waits on in PartitionTable.stable_offsets: a follower the log end
# offset, a read_uncommitted consumer the high watermark, a read_committed one the LSO
_LEO, _HW, _LSO = 0, 1, 3

# generated data classes, not dicts: the encoder's fast path, and a misspelled field fails here
_Response = Fetch.Response
_Topic = _Response.Responses
_Partition = _Topic.Partitions
_Aborted = _Partition.AbortedTransactions
_FF = FOLLOWER_FETCH_BODY.struct  # type: ignore[attr-defined]


def replica_id_of(request: Request) -> int:
    """The fetching replica's broker id (-1: a consumer); v15+ carry it in ReplicaState."""
    if request.api_version >= FIRST_REPLICA_STATE_VERSION:
        state = request.body.replica_state
        return state.replica_id if state is not None else -1
    return request.body.replica_id


def topic_names(ctx: BrokerContext, request: Request) -> list[str | None]:
    """The name of each requested topic; v13+ name them by id (KIP-516): None for an id no
    topic has (the zero UUID included)."""
    if request.api_version >= FIRST_TOPIC_ID_VERSION:
        return [ctx.index.topic_name(t.topic_id) for t in request.body.topics]
    return [t.topic for t in request.body.topics]


def _read_all(ctx: BrokerContext, body: Any, names: list[str | None], replica_id: int,
              watch: list, version: int = 0) -> tuple[list, int, bool]:
    """The response's topics, the bytes they hold, and whether to answer at once (a partition
    has an error, or a preferred read replica). ``watch`` gets (slot, offset read up to, whether
    this broker leads it) of each partition read: what a long poll waits on."""
    total = 0
    committed = (replica_id < 0 and version >= FIRST_ISOLATION_VERSION
                 and body.isolation_level == READ_COMMITTED)
    # the broker's fetch.max.bytes bounds what any request may ask for (Kafka's KIP-541)
    max_bytes = min(body.max_bytes if body.max_bytes > 0 else 2**31 - 1, ctx.fetch_max_bytes)
    any_error = False
    responses = []
    leaders = ctx.leaders  # cluster mode: only the leader serves, followers read up to the LEO
    replica = leaders is not None and replica_id >= 0
    # KIP-392: a consumer's v11+ fetch names its rack and may be served by a follower
    follower_ok = leaders is not None and not replica and version >= FIRST_RACK_VERSION
    client_rack = body.rack_id if follower_ok else ""
    selector = ctx.replica_selector if client_rack else None
    for t, name in zip(body.topics, names, strict=True):
        parts = []
        for p in t.partitions:
            r = _Partition(partition_index=p.partition, high_watermark=-1, aborted_transactions=None,
                           records=b"")
            parts.append(r)
            if name is None:
                r.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                any_error = True
                continue
            info = ctx.index.lookup(name, p.partition)
            if info is None:
                r.error_code = ctx.view.not_served(name, p.partition)
                any_error = True
                continue
            state = ctx.table.state(info.slot)
            if state != SlotState.ONLINE:  # a failed dir's page-cached data is not served
                r.error_code = unavailable_error(state)
                if state == SlotState.STORAGE_ERROR:
                    ctx.readers.forget_partition(info.disk, name, p.partition)
                any_error = True
                continue
            leading = ctx.leads(info.slot)
            if not leading and not (follower_ok and leaders.role(info.slot) == Role.FOLLOWER):
                r.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                any_error = True
                continue
            throttle = 0
            if replica:
                lead = leaders.read(info.slot)
                if replica_id not in lead.replicas:
                    r.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER  # Kafka: not an assigned replica
                    any_error = True
                    continue
                throttle = ctx.leader_quota.throttled(info.slot, replica_id, lead.isr)
            leo, hw, log_start, lso = ctx.table.stable_offsets(info.slot)
            r.high_watermark = hw
            r.last_stable_offset = lso
            r.log_start_offset = log_start
            offset = p.fetch_offset
            if offset < log_start or offset > leo:
                r.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                any_error = True
                continue
            if leading and selector is not None:
                preferred = selector.preferred(client_rack, leaders.read(info.slot),
                                               leaders.positions(info.slot), offset)
                if preferred != NO_REPLICA:  # no records: the consumer goes there at once
                    r.preferred_read_replica = preferred
                    any_error = True
                    continue
            end = leo if replica else lso if committed else hw
            watch.append((info.slot, end, leading))
            if offset >= end:
                continue
            if throttle and ctx.leader_quota.exceeded(throttle):
                continue  # KIP-73: a throttled follower out of the ISR gets no records this time
            limit = min(p.partition_max_bytes, max_bytes - total)
            if throttle:
                limit = min(limit, throttle)  # one second's worth: the rate holds fetch by fetch
            if limit <= 0 and total > 0:
                continue
            reader = ctx.readers.reader(info.disk, name, p.partition)
            try:
                sl = reader.read(offset, max(limit, 1), max_offset=end, min_one_batch=(total == 0))
            except OffsetOutOfRangeError:  # retention moved the start since we read the table
                r.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                any_error = True
                continue
            if sl is None or sl.length == 0:
                continue
            if committed:
                try:
                    aborted = reader.aborted_transactions(offset, end)
                except OSError:  # an unreadable .txnindex: no records rather than aborted ones
                    r.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                    any_error = True
                    continue
                r.aborted_transactions = [_Aborted(producer_id=a.producer_id, first_offset=a.first_offset)
                                          for a in aborted]
            # the reader's descriptor, not the path: positions refer to this very inode even if
            # the cleaner swaps a new file in under the same name before we send
            r.records = FileSlice(sl.fd if sl.fd is not None else sl.path, sl.position, sl.length)
            total += sl.length
            if throttle:
                ctx.leader_quota.record(sl.length)
        responses.append(_Topic(topic=name or "", topic_id=t.topic_id, partitions=parts))
    return responses, total, any_error


def _record_follower(ctx: BrokerContext, body: Any, names: list[str | None], replica_id: int) -> None:
    """Cluster mode: tell each partition's disk worker where this follower is (its LEO, so the
    high watermark can move, and its log start offset, so a held DeleteRecords can); acks=0: no completion comes back (it woke this worker for nothing)."""
    for t, name in zip(body.topics, names, strict=True):
        if name is None:
            continue
        for p in t.partitions:
            info = ctx.index.lookup(name, p.partition)
            if info is not None:
                ctx.disks.submit(info.disk, MsgType.FOLLOWER_FETCH, info.slot,
                                 _FF.pack(p.fetch_offset, replica_id, p.log_start_offset), acks=0)


def _moved(ctx: BrokerContext, watch: list, which: int) -> bool:
    """Whether a watched partition's end (``which`` of PartitionTable.stable_offsets: the log
    end offset for a follower, the high watermark or the LSO for a consumer) moved since it was
    read, or it left the ONLINE state or this broker's leadership."""
    table = ctx.table
    for slot, end, leading in watch:
        if table.stable_offsets(slot)[which] != end or table.state(slot) != SlotState.ONLINE:
            return True
        if ctx.leads(slot) != leading:  # became or stopped being the leader
            return True
    return False


async def handle(ctx: BrokerContext, request: Request) -> Any:
    body = request.body
    replica_id = replica_id_of(request)
    names = topic_names(ctx, request)
    replica = ctx.leaders is not None and replica_id >= 0
    if replica:
        _record_follower(ctx, body, names, replica_id)
    kind = DataWanted.LOG_END if replica else DataWanted.ANY
    which = _LEO if replica else (
        _LSO if request.api_version >= FIRST_ISOLATION_VERSION
        and body.isolation_level == READ_COMMITTED else _HW)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(body.max_wait_ms, 0) / 1000
    waited = 0.0
    while True:
        watch: list = []
        responses, total, any_error = _read_all(ctx, body, names, replica_id, watch, request.api_version)
        remaining = deadline - loop.time()
        if total >= max(body.min_bytes, 1) or any_error or remaining <= 0:
            if waited and ctx.metrics is not None:
                remote_wait.set(waited)  # the metrics' remote time (Kafka: fetch purgatory)
            resp = _Response(throttle_time_ms=0, error_code=0, session_id=0, responses=responses)
            if request.api_version < FIRST_V2_FETCH_VERSION:  # old clients only: off the sendfile path
                return down_convert(ctx, resp, request.api_version)
            return resp
        # the offsets were read before the data: whatever moved after that shows in _moved
        while remaining > 0:
            before = loop.time()
            await ctx.wakeups.wait_for_data(remaining, kind)
            now = loop.time()
            waited += now - before
            remaining = deadline - now
            if _moved(ctx, watch, which):
                break
