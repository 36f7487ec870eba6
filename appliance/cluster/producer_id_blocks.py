"""Blocks of producer ids allocated through ZooKeeper's ``/latest_producer_id_block`` (Kafka's
ZooKeeper-era ``ZkProducerIdManager``), so no two brokers of a cluster hand out the same id.

Allocation: read the znode and its version; the next block starts after the one it records
(the first block, 0-999, when it is missing or empty); write it conditionally on that version
(create it when missing). Another broker's write in between fails the condition: read and try
again. A block is recorded before any id of it is handed out, so a broker that dies with a block
half used costs the cluster the rest of that block, never a duplicate. The JSON is Kafka's
(:mod:`appliance.storage.producer_id_block`).

Bounded: each ZooKeeper call waits at most until ``timeout_s`` after the start, and nothing is
tried while the session has no connection (kazoo would queue the call until it reconnects). A
call that timed out may still reach ZooKeeper later; it then records a block nobody uses, which
only skips ids.

Thread-safety: :func:`allocate_block` blocks on ZooKeeper; call it from an executor thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from appliance.cluster.zk_paths import PRODUCER_ID_BLOCK
from appliance.errors import ErrorCode
from appliance.storage.producer_id_block import (
    BlockFormatError,
    ProducerIdBlock,
    ProducerIdsExhausted,
    decode_block,
    encode_block,
    next_block,
)

__all__ = ["BlockNotAllocated", "BlockAllocator", "allocate_block"]

log = logging.getLogger(__name__)

_ANSWER_SHARE = 0.8  # of the asker's wait: the rest carries the answer back


class BlockNotAllocated(Exception):
    """No block within the time given: ZooKeeper out of reach, or the znode is not Kafka's."""


def allocate_block(client: KazooClient, broker_id: int, timeout_s: float) -> ProducerIdBlock:
    """The next block, recorded in ZooKeeper for ``broker_id``. Raises BlockNotAllocated."""
    deadline = time.monotonic() + timeout_s

    def wait(result):  # an IAsyncResult's value, or its error, or a timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise BlockNotAllocated(f"no producer id block within {timeout_s} s")
        try:
            return result.get(timeout=left)
        except client.handler.timeout_exception:
            raise BlockNotAllocated(f"ZooKeeper did not answer within {timeout_s} s") from None

    while True:
        if not client.connected:
            raise BlockNotAllocated("no connection to ZooKeeper")
        try:
            try:
                data, stat = wait(client.get_async(PRODUCER_ID_BLOCK))
            except NoNodeError:
                data, stat = None, None
            block = next_block(decode_block(data, PRODUCER_ID_BLOCK), broker_id)
            if stat is None:
                wait(client.create_async(PRODUCER_ID_BLOCK, encode_block(block)))
            else:
                wait(client.set_async(PRODUCER_ID_BLOCK, encode_block(block), version=stat.version))
            return block
        except (BadVersionError, NodeExistsError):
            continue  # another broker took a block since our read: read theirs, take the next
        except (KazooException, BlockFormatError, ProducerIdsExhausted) as e:
            raise BlockNotAllocated(f"{type(e).__name__}: {e}") from e


class BlockAllocator:
    """The cluster worker's side: one allocation at a time (its executor threads serve the rest
    of the worker too, and a queue of calls to an unreachable ZooKeeper would hold them all),
    each bounded as a whole, waiting for the one before included.

    Only for the cluster worker's event loop."""

    def __init__(self, client: KazooClient, broker_id: int) -> None:
        self.client = client
        self.broker_id = broker_id
        self._one_at_a_time = asyncio.Lock()

    async def allocate(self, timeout_s: float) -> tuple[int, int]:
        """(first, last) of a new block, both inclusive. Raises BlockNotAllocated."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            await asyncio.wait_for(self._one_at_a_time.acquire(), timeout_s)
        except TimeoutError:
            raise BlockNotAllocated(f"another producer id block allocation took over {timeout_s} s") from None
        try:
            block = await loop.run_in_executor(None, allocate_block, self.client, self.broker_id,
                                               deadline - loop.time())
        finally:
            self._one_at_a_time.release()
        log.info("broker %d took producer ids %d-%d", self.broker_id, block.first, block.last)
        return block.first, block.last

    async def answer(self, request: bytes) -> bytes:
        """The cluster link's answer to PRODUCER_ID_BLOCK_REQUEST (process/cluster_link.py)."""
        # a little less than the asker waits, so it reads our error rather than its timeout
        timeout_s = _ANSWER_SHARE * int(json.loads(request)["timeout_ms"]) / 1000
        try:
            first, last = await self.allocate(timeout_s)
        except BlockNotAllocated as e:
            log.warning("no producer id block for broker %d: %s", self.broker_id, e)
            return json.dumps({"error_code": int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                               "error_message": str(e)}).encode()
        return json.dumps({"error_code": 0, "block_start": first, "block_end": last}).encode()
