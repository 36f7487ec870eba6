"""Producer ids for InitProducerId, from the broker's current block in the partition table.

Every network worker of a broker hands out ids from one block held in the table header
(``producer_id_next`` .. ``producer_id_last``), taking each under the table lock, so no two
workers hand out the same id. When the block is used up, the first worker to notice claims the
refill (:meth:`PartitionTable.claim_producer_id_refill`) and fetches the next block without the
lock held: from ZooKeeper through the cluster worker (:func:`link_blocks`) or from the first log
dir's ``producer-id-block`` file standalone (:func:`file_blocks`). The others poll the table
meanwhile; none blocks its event loop. The block is filled the same way when the broker starts
(:func:`take_first_block`: the cluster worker when it joins, the network workers standalone),
so a broker that served no producer yet still has ids to give while ZooKeeper is out of reach.

Every wait is bounded by :data:`WAIT_S` (and a fetch's grace): past it,
:class:`ProducerIdUnavailable`, which InitProducerId answers with a retriable error. A claim
lapses after the same time, so a worker that died mid-fetch holds up no one for longer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from appliance.process.cluster_link import ClusterLink
from appliance.shm.partition_table import PartitionTable
from appliance.storage.producer_id_block_file import allocate_block

__all__ = ["WAIT_S", "FetchBlock", "ProducerIdUnavailable", "new_producer_id", "fill_block",
           "take_first_block", "file_blocks", "link_blocks", "block_source"]

log = logging.getLogger(__name__)

# Well under a client's request timeout (30 s in Kafka's producer), so it sees our retriable
# error rather than its own timeout; far above a ZooKeeper round trip or an fsync.
WAIT_S = 5.0
_POLL_S = 0.005  # a waiting worker's look at the table: the fetching one takes milliseconds
# past a fetch's own timeout, for a fetch that keeps none (the file's fsync): the cluster link
# gives up first, closing its connection cleanly rather than being cancelled mid-read
_GRACE_S = 0.5

# (timeout in seconds) -> (first, last) of a newly allocated block, both inclusive
FetchBlock = Callable[[float], Awaitable[tuple[int, int]]]


class ProducerIdUnavailable(Exception):
    """No block of producer ids could be had in time (ZooKeeper or the cluster worker out of
    reach, the block file unwritable)."""


async def new_producer_id(table: PartitionTable, fetch: FetchBlock, wait_s: float = WAIT_S) -> int:
    """An id no producer had before. Raises ProducerIdUnavailable after ``wait_s`` at most."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        async with table.locked_async():
            pid = table.take_producer_id()
            claimed = pid is None and table.claim_producer_id_refill(time.monotonic() + wait_s + _GRACE_S)
        if pid is not None:
            return pid
        if claimed:
            pid = await _refill(table, fetch, deadline - loop.time(), take=True)
            if pid is not None:
                return pid
        elif loop.time() >= deadline:
            raise ProducerIdUnavailable(f"another worker's refill of the producer id block took over {wait_s} s")
        else:
            await asyncio.sleep(_POLL_S)


async def fill_block(table: PartitionTable, fetch: FetchBlock, wait_s: float = WAIT_S) -> bool:
    """Fetch a block now if the current one is used up and no one is fetching (the cluster
    worker's first block). True when a block was installed here. Raises ProducerIdUnavailable."""
    async with table.locked_async():
        first, last = table.producer_id_block()
        claimed = first > last and table.claim_producer_id_refill(time.monotonic() + wait_s + _GRACE_S)
    if claimed:
        await _refill(table, fetch, wait_s, take=False)
    return claimed


async def take_first_block(table: PartitionTable, fetch: FetchBlock) -> None:
    """:func:`fill_block` at a worker's start (Kafka's broker takes its first block at start):
    the first InitProducerId then waits on no fetch, and a cluster broker has ids while
    ZooKeeper is away. A failure is only logged: InitProducerId asks again when it needs one."""
    try:
        await fill_block(table, fetch)
    except ProducerIdUnavailable as e:
        log.warning("no first producer id block yet: %s", e)


async def _refill(table: PartitionTable, fetch: FetchBlock, timeout_s: float, take: bool) -> int | None:
    """Fetch a block under the claim and install it; with ``take``, the first id of it."""
    try:
        timeout_s = max(timeout_s, 0.0)
        first, last = await asyncio.wait_for(fetch(timeout_s), timeout_s + _GRACE_S)
        if not 0 <= first <= last:
            raise ValueError(f"not a block of producer ids: {first}..{last}")
    except Exception as e:  # a cancellation leaves the claim to lapse by itself
        async with table.locked_async():
            table.end_producer_id_refill(None)
        raise ProducerIdUnavailable(str(e) or type(e).__name__) from e
    async with table.locked_async():
        table.end_producer_id_refill((first, last))
        # the lock was held from the install on: the block's first id is ours
        return table.take_producer_id() if take else None


def file_blocks(log_dir: str, broker_id: int) -> FetchBlock:
    """Standalone: blocks from ``log_dir``'s ``producer-id-block`` (fsynced: off the loop)."""
    async def fetch(timeout_s: float) -> tuple[int, int]:
        block = await asyncio.get_running_loop().run_in_executor(None, allocate_block, log_dir, broker_id)
        return block.first, block.last
    return fetch


def link_blocks(link: ClusterLink) -> FetchBlock:
    """Cluster mode: blocks from ZooKeeper, through the cluster worker."""
    return link.producer_id_block


def block_source(link: ClusterLink | None, log_dir: str, broker_id: int) -> FetchBlock:
    """The broker's source of blocks: the cluster worker's, else the first log dir's file."""
    return link_blocks(link) if link is not None else file_blocks(log_dir, broker_id)
