"""The replica fetcher: ``num.replica.fetchers`` asyncio tasks per leader broker in the cluster
worker, each with its own connection, fetching its share of the partitions this broker follows
from that leader (Fetch with replica_id = broker.id, from the follower's log end offset) and
handing the batches to the owning disk worker as REPLICA_APPEND ring messages (offsets kept; the
leader's high watermark rides along). A partition's share is Kafka's: the hash of its topic and
number modulo the fetcher count (:func:`fetcher_id`), so it keeps its fetcher across restarts.

Each fetch asks the leader for at least ``replica.fetch.min.bytes`` (waiting at most
``replica.fetch.wait.max.ms``); an answer not complete within ``replica.socket.timeout.ms``
drops the connection (reopened after a backoff); ``replica.socket.receive.buffer.bytes`` sets
SO_RCVBUF of the fetchers' sockets (BrokerConnector.open).

It lives in the cluster worker rather than its own process: it needs the leadership the
cluster worker holds, and its work is waiting on sockets; the bytes cost the disk worker, not
this loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from appliance.client.java_hash import java_abs, java_string_hash
from appliance.cluster.broker_connection import BrokerAddress, BrokerConnector
from appliance.cluster.replication_throttle import ThrottleSettings
from appliance.cluster.wire_channel import encode_request
from appliance.cluster.zk_paths import TopicPartition
from appliance.cluster.zk_store import ZkStore
from appliance.errors import ErrorCode
from appliance.process.disk_client import epoch_result
from appliance.process.rate_limiter import RateLimiter
from appliance.protocol import NEED_DATA, PEER_CLOSED, ClientConnection
from appliance.protocol.frames import RESPONSE_HEADER, SIZE
from appliance.protocol.messages import Fetch
from appliance.protocol.messages.cluster import OffsetsForLeaderEpoch
from appliance.shm.layout import REPLICA_APPEND_HEADER, TRUNCATE_BODY, TRUNCATE_FULLY_BODY, MsgType
from appliance.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

__all__ = ["ReplicaFetcher", "fetcher_id"]

log = logging.getLogger("appliance.cluster.fetcher")

FETCH_VERSION = 5  # v5: the leader's log start offset in every answer, out-of-range ones too
_HEAD = REPLICA_APPEND_HEADER.struct  # type: ignore[attr-defined]
_BACKOFF_S = 0.5
_TRUNCATE = TRUNCATE_BODY.struct  # type: ignore[attr-defined]
_TRUNCATE_FULLY = TRUNCATE_FULLY_BODY.struct  # type: ignore[attr-defined]
EPOCH_VERSION = 3
_THROTTLED_IDLE_S = 0.1  # every followed partition held back by the throttle: wait this long
Source = tuple[int, int]  # (leader broker id, fetcher id): one task and connection each


def fetcher_id(tp: TopicPartition, num_fetchers: int) -> int:
    """Which of a leader's ``num_fetchers`` fetchers follows ``tp``: Kafka's spread,
    abs(31 * topic.hashCode() + partition) % num_fetchers in Java's int arithmetic, with 0.8.2's
    Utils.abs (client/java_hash.py)."""
    h = (31 * java_string_hash(tp.topic) + tp.partition) & 0xFFFFFFFF
    return java_abs(h - (1 << 32) if h & 0x80000000 else h) % num_fetchers


class ReplicaFetcher:
    def __init__(self, ctx: Any, store: ZkStore, broker_id: int,
                 throttle: ThrottleSettings | None = None,
                 connector: BrokerConnector | None = None) -> None:
        self.ctx = ctx
        self.connector = connector or BrokerConnector()  # the leaders' inter-broker listener
        self.store = store
        self.broker_id = broker_id
        self.max_wait_ms = int(ctx.config["replica.fetch.wait.max.ms"])
        self.max_bytes = int(ctx.config["replica.fetch.max.bytes"])
        self.min_bytes = int(ctx.config["replica.fetch.min.bytes"])
        self.num_fetchers = int(ctx.config["num.replica.fetchers"])
        self.timeout_s = int(ctx.config["replica.socket.timeout.ms"]) / 1000
        self.rcvbuf = int(ctx.config["replica.socket.receive.buffer.bytes"])
        self.followed: dict[Source, dict[TopicPartition, tuple[int, int]]] = {}  # -> tp -> (slot, disk)
        self.tasks: dict[Source, asyncio.Task] = {}
        self.truncating: set[TopicPartition] = set()  # new followers: truncate before fetching
        # reassignment throttle (replication_throttle.py): one rate for all leaders, as Kafka's
        self.throttle = throttle
        self.limiter = RateLimiter()
        self.lagging: set[TopicPartition] = set()  # below the leader's high watermark last time

    def add(self, tp: TopicPartition, slot: int, disk: int, leader: int) -> None:
        self.remove(tp)
        source = (leader, fetcher_id(tp, self.num_fetchers))
        self.followed.setdefault(source, {})[tp] = (slot, disk)
        self.truncating.add(tp)
        self.lagging.add(tp)
        if self.throttle is not None:
            self.throttle.watch_topic(tp.topic)
        task = self.tasks.get(source)
        if task is None or task.done():
            self.tasks[source] = asyncio.ensure_future(self._run(source))

    def remove(self, tp: TopicPartition) -> None:
        for parts in self.followed.values():
            parts.pop(tp, None)
        self.truncating.discard(tp)
        self.lagging.discard(tp)

    def stop(self) -> None:
        for t in self.tasks.values():
            t.cancel()

    async def _endpoint(self, leader: int) -> BrokerAddress | None:
        """The leader's inter-broker endpoint (None while it is not registered). Raises
        NoEndpoint."""
        brokers = await asyncio.get_running_loop().run_in_executor(None, self.store.brokers)
        b = brokers.get(leader)
        return self.connector.address(b) if b is not None else None

    async def _open(self, ep: BrokerAddress) -> tuple[Any, Any]:
        """A fetcher's connection to ``ep`` (within replica.socket.timeout.ms, with its
        receive buffer). Raises OSError, TimeoutError."""
        async with asyncio.timeout(self.timeout_s):
            return await self.connector.open(ep, rcvbuf=self.rcvbuf)

    async def _run(self, source: Source) -> None:
        leader = source[0]
        while self.followed.get(source):
            writer = None
            try:
                ep = await self._endpoint(leader)
                if ep is None:
                    await asyncio.sleep(_BACKOFF_S)
                    continue
                reader, writer = await self._open(ep)
                log.info("fetcher %d fetching from %s", source[1], ep)
                conn = ClientConnection(client_id=f"replica-fetcher-{self.broker_id}-{source[1]}")
                while self.followed.get(source):
                    if any(tp in self.truncating for tp in self.followed.get(source, {})):
                        await self._truncate(source, ep)
                    await self._fetch_once(source, conn, reader, writer)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the leader went away or answered nonsense: reconnect
                log.info("fetching from broker %d: %s; retrying", leader, e)
                await asyncio.sleep(_BACKOFF_S)
            finally:
                if writer is not None:
                    writer.close()

    async def _truncate(self, source: Source, ep: BrokerAddress) -> None:
        """KIP-101: ask the leader where our latest leader epoch ends in its log, and have the
        disk worker cut ours where that answer and its own epochs say (the high watermark when
        we know no epoch: ``Partition.truncation_offset``); a partition the leader does not
        answer for yet stays truncating and is not fetched. The epochs are the disk worker's:
        asked of it (LATEST_EPOCH), never read from its files here."""
        parts = {tp: w for tp, w in self.followed.get(source, {}).items() if tp in self.truncating}
        ask: dict[TopicPartition, int] = {}
        for tp, (slot, disk) in parts.items():
            comp = await self.ctx.disks.submit(disk, MsgType.LATEST_EPOCH, slot, b"")
            if not comp.error_code:
                ask[tp] = epoch_result(comp).leader_epoch
        answers: dict[TopicPartition, tuple[int, int, int]] = {}
        if any(e != UNDEFINED_EPOCH for e in ask.values()):
            answers = await self._ask_epochs(ep, {tp: e for tp, e in ask.items() if e != UNDEFINED_EPOCH})
        for tp, asked in ask.items():
            slot, disk = parts[tp]
            epoch, end = UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if asked != UNDEFINED_EPOCH:
                error, epoch, end = answers.get(tp, (int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1, -1))
                if error:
                    continue  # asked again before the next fetch
            comp = await self.ctx.disks.submit(disk, MsgType.TRUNCATE, slot, _TRUNCATE.pack(asked, epoch, end))
            if not comp.error_code:
                self.truncating.discard(tp)
        if any(tp in self.truncating for tp in parts):
            await asyncio.sleep(_BACKOFF_S)

    async def _below_log_start(self, tp: TopicPartition, slot: int, disk: int, leader_start: int) -> bool:
        """Out of range below the leader's log start (retention or DeleteRecords there while we
        were away): what lies between can never be fetched, so the log is emptied and starts at
        the leader's log start offset (Kafka's truncateFullyAndStartAt). False when the cause
        is the other end (our log end past the leader's: truncation by leader epoch)."""
        leo = self.ctx.table.offsets(slot)[0]
        if leader_start < 0 or leo >= leader_start:
            return False
        comp = await self.ctx.disks.submit(disk, MsgType.TRUNCATE_FULLY, slot, _TRUNCATE_FULLY.pack(leader_start))
        if comp.error_code:
            log.warning("%s: truncating fully failed: %s", tp, ErrorCode(comp.error_code).name)
            return False
        log.info("%s: log end %d below the leader's log start %d: emptied, fetching from %d",
                 tp, leo, leader_start, leader_start)
        return True

    async def _ask_epochs(self, ep: BrokerAddress,
                          ask: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int, int]]:
        by_topic: dict[str, list[dict]] = {}
        for tp, e in ask.items():
            by_topic.setdefault(tp.topic, []).append(
                {"partition": tp.partition, "current_leader_epoch": -1, "leader_epoch": e})
        body = {"replica_id": self.broker_id,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
        reader, writer = await self._open(ep)
        try:
            writer.write(encode_request(OffsetsForLeaderEpoch.API_KEY, EPOCH_VERSION, 1,
                                        f"replica-fetcher-{self.broker_id}", body))
            async with asyncio.timeout(self.timeout_s):  # replica.socket.timeout.ms
                (size,) = SIZE.unpack(await reader.readexactly(SIZE.size))
                frame = await reader.readexactly(size)
        finally:
            writer.close()
        resp = OffsetsForLeaderEpoch.decode_response(EPOCH_VERSION, frame, RESPONSE_HEADER.size)
        return {TopicPartition(t.topic, p.partition): (p.error_code, p.leader_epoch, p.end_offset)
                for t in resp.topics for p in t.partitions}

    async def _fetch_once(self, source: Source, conn: ClientConnection, reader: Any, writer: Any) -> None:
        leader = source[0]
        parts = dict(self.followed.get(source, {}))
        table = self.ctx.table
        # one read of the rate per round: the watch may change it meanwhile
        rate = self.throttle.follower_rate if self.throttle is not None else None
        throttled = {tp for tp in parts if self.throttle.throttled(tp)} if rate is not None else set()
        held = throttled & self.lagging if throttled and self.limiter.exceeded(rate) else set()
        # a throttled replica catching up asks for at most one second's worth per fetch, so
        # the rate holds fetch by fetch (the leader still sends at least one whole batch)
        capped = min(self.max_bytes, max(rate or 0, 1))
        by_topic: dict[str, list[dict]] = {}
        for tp, (slot, _disk) in parts.items():
            if tp in self.truncating or tp in held:
                continue
            leo, _, start = table.offsets(slot)
            limit = capped if tp in throttled and tp in self.lagging else self.max_bytes
            # our log start: the leader holds a DeleteRecords until the ISR's has reached it
            by_topic.setdefault(tp.topic, []).append(
                {"partition": tp.partition, "fetch_offset": leo, "log_start_offset": start,
                 "partition_max_bytes": limit})
        if not by_topic and held:
            await asyncio.sleep(_THROTTLED_IDLE_S)  # all held back: nothing to ask for yet
            return
        body = {"replica_id": self.broker_id, "max_wait_ms": self.max_wait_ms, "min_bytes": self.min_bytes,
                "max_bytes": 64 << 20, "isolation_level": 0,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
        _, frame = conn.send_request(Fetch.API_KEY, FETCH_VERSION, body)
        writer.write(frame)
        resp = None
        # the whole answer within replica.socket.timeout.ms (at least the long poll's wait, a
        # config check makes sure); asyncio.timeout, not wait_for: no task per fetch round
        async with asyncio.timeout(self.timeout_s):
            while resp is None:
                ev = conn.next_event()
                if ev is NEED_DATA:
                    data = await reader.read(1 << 20)
                    if not data:
                        raise ConnectionError("leader closed the connection")
                    conn.receive_data(data)
                    continue
                if ev is PEER_CLOSED:
                    raise ConnectionError("leader closed the connection")
                resp = ev.body
        backoff = False
        appends = []  # (tp, completion future): one round of the disk worker takes them all
        for t in resp.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition_index)
                where = self.followed.get(source, {}).get(tp)
                if where is None:
                    continue  # stopped following it meanwhile
                slot, disk = where
                if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    if await self._below_log_start(tp, slot, disk, p.log_start_offset):
                        continue  # fetched again from the leader's log start next round
                    self.truncating.add(tp)  # our log end is past the leader's: truncate again
                if p.error_code:
                    log.debug("fetch of %s from %d: %s", tp, leader, ErrorCode(p.error_code).name)
                    backoff = True
                    continue
                records = bytes(p.records or b"")
                if tp in throttled:
                    self.limiter.record(len(records))
                if not records and _nothing_new(table.offsets(slot), p.high_watermark, p.log_start_offset):
                    continue
                # one round of the disk worker takes them all; no task per append
                fut = self.ctx.disks.submit(disk, MsgType.REPLICA_APPEND, slot,
                                            _HEAD.pack(p.high_watermark, p.log_start_offset), records)
                appends.append((tp, slot, p.high_watermark, fut))
        for tp, slot, hw, fut in appends:
            comp = await fut
            if comp.error_code:
                log.warning("replica append of %s failed: %s", tp, ErrorCode(comp.error_code).name)
                backoff = True
            elif table.offsets(slot)[0] >= hw:
                self.lagging.discard(tp)
            else:
                self.lagging.add(tp)
        if backoff:
            await asyncio.sleep(_BACKOFF_S)


def _nothing_new(own: tuple[int, int, int], leader_hw: int, leader_start: int) -> bool:
    """An empty answer changes nothing here: our HW is already min(leader's, our LEO) and our
    log start already min(leader's, our HW) (Kafka's follower takes both on every fetch)."""
    leo, hw, start = own
    return hw >= min(leader_hw, leo) and start >= min(leader_start, hw)
