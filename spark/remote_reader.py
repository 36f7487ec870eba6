"""Read one partition's offset range [start, end) over the Kafka protocol into Arrow batches.

For tasks whose partition has no local log: Fetch requests (sessionless; isolation level
READ_COMMITTED by default, READ_UNCOMMITTED with kafka.isolation.level=read_uncommitted) to the
partition's leader from ``start`` on
(or, with the ``kafka.client.rack`` option, to the replica in that rack the leader names: a
follower serves up to its own high watermark, KIP-392),
never keeping a record at or above ``min(end, high watermark)`` (read_committed: the answer's
last stable offset, and the batches of the answer's aborted transactions are skipped:
:mod:`spark.aborted`); the fetched bytes go through
the same native scans (CRC32C for v2 batches, CRC32 for legacy magic 0/1 messages, which a
pre-0.11 topic's answer holds as stored) and decode kernels as the in-place path, so both give
identical rows. Control batches are skipped; a compressed batch that starts before ``start``
is trimmed.

Errors: BrokerUnreachableError naming the address once the bounded retries are spent;
UnknownTopicOrPartitionError naming topic and partition; OffsetOutOfRangeError for records
removed by retention (with failOnDataLoss); CorruptRecordError naming the partition and offset.

Thread-safety: a generator per task; it owns its client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from appliance.client.cluster import RETRIABLE, check_error
from appliance.client.connection import KafkaConnectionError
from appliance.client.errors import LeaderNotAvailableError
from appliance.client.fetching import fetch_body
from appliance.errors import (
    CorruptRecordError,
    KafkaError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from native.out_pool import OutputPool
from spark.aborted import OPEN_END, AbortedRanges
from spark.arrow_reader import decode_entries, to_record_batch
from spark.broker_catalog import BrokerUnreachableError, BrokerView
from spark.progress import ReadStats
from spark.schema import arrow_schema

__all__ = ["fetch_range"]

log = logging.getLogger(__name__)

FETCH = 1
# How long a connect to the leader Metadata named may be refused before the metadata is asked
# again: a leader that died refuses until the controller elects another (the ZooKeeper session
# timeout), and a connect retried for the whole request timeout (30 s) spent the read's retry
# budget on the dead broker (measured: 31 s to follow a SIGKILLed leader, ~8 s with this)
LEADER_CONNECT_S = 3.0
# After the replica the leader named for the reader's rack failed (unreachable, lagging), the
# leader serves the read for this long before the rack is named again
FOLLOWER_BACKOFF_S = 30.0


class ReadReplica:
    """Where a remote read fetches from: the leader (``broker`` -1), or the replica the leader
    named for the reader's rack (KIP-392's preferred read replica), until that replica fails."""

    def __init__(self, rack: str = "") -> None:
        self.rack = rack
        self.broker = -1
        self._leader_until = 0.0

    def asked_rack(self) -> str:
        """The rack a fetch names: none for a while after a preferred replica failed, so the
        leader serves the records itself instead of naming the failed replica again."""
        return self.rack if time.monotonic() >= self._leader_until else ""

    def failed(self) -> None:
        self.broker = -1
        self._leader_until = time.monotonic() + FOLLOWER_BACKOFF_S

    def connection(self, view: BrokerView, topic: str, partition: int):
        if self.broker >= 0:
            return view.cluster.node_connection(self.broker, "fetch", connect_timeout=LEADER_CONNECT_S)
        return view.cluster.leader_connection(topic, partition, "fetch", connect_timeout=LEADER_CONNECT_S)


def _fetch(view: BrokerView, topic: str, partition: int, offset: int, max_bytes: int,
           retry_s: float, replica: ReadReplica | None = None, read_committed: bool = False):
    """(records bytes, bound, aborted transactions) of one Fetch to the partition's current
    leader, or to the replica the leader named for ``replica.rack``; the bound is the high
    watermark, or with ``read_committed`` the last stable offset (isolation level 1).

    Retriable errors (NOT_LEADER_OR_FOLLOWER while leadership moves, a leader that died, no
    leader yet) drop the cached metadata and try again with backoff for up to ``retry_s``
    seconds, so a read follows the new leader; then the error names the address. A preferred
    replica that fails in any way (its offset out of range too: it lags) sends the read back to
    the leader, at once.
    """
    replica = replica or ReadReplica()
    delay = 0.1
    deadline = time.monotonic() + retry_s
    attempts = 0
    while True:
        attempts += 1
        last = time.monotonic() >= deadline
        follower = replica.broker >= 0
        try:
            conn = replica.connection(view, topic, partition)
            resp = conn.request(FETCH, fetch_body([(topic, partition, offset)], max_wait_ms=0,
                                                  min_bytes=0, max_bytes=max_bytes,
                                                  partition_max_bytes=max_bytes, rack_id=replica.asked_rack(),
                                                  isolation_level=int(read_committed)))
            check_error(getattr(resp, "error_code", 0), f"fetching {topic}-{partition}")
            for t in resp.responses:
                for p in t.partitions:
                    if p.partition_index == partition:
                        preferred = getattr(p, "preferred_read_replica", -1)
                        if preferred >= 0 and not follower:
                            log.info("%s-%d: reading from broker %d, in rack %s", topic, partition,
                                     preferred, replica.rack)
                            replica.broker = preferred
                            raise _Again()
                        if p.error_code and follower:
                            replica.failed()
                            raise _Again()
                        if p.error_code in RETRIABLE and not last:
                            raise _Retry()
                        check_error(p.error_code, f"fetching {topic}-{partition} at offset "
                                    f"{offset} from {view.bootstrap}")
                        if not read_committed:
                            return bytes(p.records or b""), p.high_watermark, None
                        lso = p.last_stable_offset
                        bound = p.high_watermark if lso < 0 else min(lso, p.high_watermark)
                        return bytes(p.records or b""), bound, AbortedRanges(
                            (t.producer_id, t.first_offset, OPEN_END)
                            for t in p.aborted_transactions or ())
            raise UnknownTopicOrPartitionError(
                f"{topic}-{partition}: the broker at {view.bootstrap} did not answer for it")
        except (KafkaConnectionError, LeaderNotAvailableError) as e:
            if follower:
                replica.failed()
                continue
            if last:
                raise BrokerUnreachableError(
                    f"kafka.bootstrap.servers={view.bootstrap}: cannot fetch {topic}-{partition} "
                    f"after {attempts} attempts in {retry_s:g} s ({e})") from None
        except _Again:
            continue
        except _Retry:
            pass
        view.cluster.invalidate(topic)
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 1.0)


class _Retry(Exception):
    pass


class _Again(Exception):
    """Fetch again at once, from the replica now chosen."""


def fetch_range(view: BrokerView, topic: str, partition: int, start: int, end: int, *,
                include_headers: bool = False, fail_on_data_loss: bool = True,
                chunk_bytes: int = 8 << 20, schema: pa.Schema | None = None,
                stats: ReadStats | None = None, rack: str = "",
                read_committed: bool = False) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches of the records with ``start <= offset < end`` fetched from the broker.

    ``end`` is the planned bound (at most the high watermark at planning); the high watermark
    of every Fetch answer bounds it again. A leader whose high watermark is still below
    ``end`` (just elected: its watermark catches up with the old leader's once the followers
    fetch) is asked again until it reaches ``end``, so a leadership move never shortens the
    read. Raises as described in the module docstring.
    """
    if schema is None:
        schema = arrow_schema(include_headers)
    retry_s = max(view.cluster.request_timeout, 1.0)
    offset = start
    where = f"{topic}-{partition} fetched from {view.bootstrap}"
    behind_since = None
    pool = OutputPool()  # decode outputs, reused once the batch made of them is gone
    replica = ReadReplica(rack)
    while offset < end:
        try:
            data, hw, aborted = _fetch(view, topic, partition, offset, chunk_bytes, retry_s,
                                       replica, read_committed)
        except OffsetOutOfRangeError:
            oldest = view.list_offsets([(topic, partition, -2)])[(topic, partition)]
            msg = (f"{topic}-{partition}: offset {offset} is no longer at the broker (the log "
                   f"starts at {oldest})")
            if fail_on_data_loss or oldest <= offset:
                raise OffsetOutOfRangeError(msg + "; set failOnDataLoss=false to skip the lost "
                                            "records") from None
            log.warning("%s; skipping the lost records (failOnDataLoss=false)", msg)
            offset = oldest
            continue
        hi = min(end, hw)
        if stats is not None:
            stats.bytes_fetched += len(data)
        if offset >= hi or not data:
            if hw < end:
                # The watermark is below what was planned: a new leader not caught up yet.
                now = time.monotonic()
                behind_since = behind_since or now
                if now - behind_since < retry_s:
                    view.cluster.invalidate(topic)
                    time.sleep(0.1)
                    continue
                msg = (f"{where}: the high watermark stayed at {hw}, below the planned end "
                       f"{end}, for {retry_s:g} s (records lost by an unclean leader election?)")
                if fail_on_data_loss:
                    raise OffsetOutOfRangeError(msg + "; set failOnDataLoss=false to read what "
                                                "is there")
                log.warning("%s; stopping at %d (failOnDataLoss=false)", msg, offset)
                return
            if offset < end:
                log.warning("%s: nothing at offset %d below the high watermark %d (planned end "
                            "%d)", where, offset, hw, end)
            return
        behind_since = None
        buf = np.frombuffer(data, np.uint8)
        # A partial last entry is the answer's byte limit cutting it: the next Fetch gets it.
        got = decode_entries(buf, 0, len(data), where, 0, offset, hi, include_headers, pool,
                             aborted)
        if (got.stop_why is not None and not got.partial) or got.count == 0:
            raise CorruptRecordError(f"{where}: corrupt batch at byte {got.stop_position} of "
                                     f"the answer for offset {offset}: {got.stop_why}")
        for out in got.outputs:
            rb = to_record_batch(out, topic, partition, schema, include_headers)
            if stats is not None:
                stats.add_rows(rb.num_rows)
            yield rb
        offset = max(got.next_offset, min(offset + 1, hi))
        if offset >= end:
            return


assert issubclass(BrokerUnreachableError, KafkaError)
