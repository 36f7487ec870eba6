"""A block of producer ids, and the JSON that records the latest one handed out.

InitProducerId gives every idempotent producer an id that no other producer of the cluster
(standalone: of this broker, across restarts) ever had. Ids are taken from blocks of
:data:`BLOCK_SIZE`; whoever allocates a block records it (ZooKeeper's
``/latest_producer_id_block`` in cluster mode, ``producer-id-block`` in the first log dir
standalone) before an id of it goes out, and the next block starts after the recorded one, so
no id is handed out twice, whichever broker or restart takes the next block.

The record is Kafka's (ZooKeeper era, ``ProducerIdBlockZNode``), so Kafka's tools read ours and
a cluster of appliances continues the blocks of a Kafka cluster it replaces:
``{"version":1,"broker":<id>,"block_start":"<first>","block_end":"<last>"}`` with both ends
inclusive and written as decimal strings. Pure functions, no I/O.
"""

from __future__ import annotations

import json
from typing import NamedTuple

__all__ = ["BLOCK_SIZE", "ProducerIdBlock", "BlockFormatError", "ProducerIdsExhausted",
           "next_block", "encode_block", "decode_block"]

BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
_VERSION = 1
_MAX_ID = (1 << 63) - 1  # producer ids are int64 on the wire


class ProducerIdBlock(NamedTuple):
    """Ids ``first`` to ``last``, both inclusive, allocated by broker ``broker``."""

    broker: int
    first: int
    last: int


class BlockFormatError(ValueError):
    """The record is not the JSON Kafka writes (names where it was read from)."""


class ProducerIdsExhausted(Exception):
    """The next block would pass the largest int64 (Kafka treats it as fatal too)."""


def next_block(latest: ProducerIdBlock | None, broker: int) -> ProducerIdBlock:
    """The block after ``latest`` (None: no block yet, so the first, from 0), for ``broker``.
    Raises ProducerIdsExhausted."""
    first = 0 if latest is None else latest.last + 1
    if first > _MAX_ID - BLOCK_SIZE + 1:
        raise ProducerIdsExhausted(f"no producer ids left after {latest}")
    return ProducerIdBlock(broker, first, first + BLOCK_SIZE - 1)


def encode_block(block: ProducerIdBlock) -> bytes:
    return json.dumps({"version": _VERSION, "broker": block.broker, "block_start": str(block.first),
                       "block_end": str(block.last)}, separators=(",", ":")).encode()


def decode_block(data: bytes | None, where: str) -> ProducerIdBlock | None:
    """The recorded block; None for no data (Kafka's brokers create the znode empty at start).
    Raises BlockFormatError naming ``where``."""
    if not data:
        return None
    try:
        obj = json.loads(data.decode())
        broker, first, last = obj["broker"], obj["block_start"], obj["block_end"]
    except (UnicodeDecodeError, ValueError, TypeError, KeyError) as e:
        raise BlockFormatError(f"{where}: not a producer id block ({e!r})") from None
    # Kafka writes the ends as strings (block_start, block_end) and the broker as a number
    if not (type(broker) is int and isinstance(first, str) and isinstance(last, str)
            and first.isdigit() and last.isdigit()):
        raise BlockFormatError(f"{where}: not a producer id block: {data[:200]!r}")
    block = ProducerIdBlock(broker, int(first), int(last))
    if block.last < block.first or block.last > _MAX_ID:
        raise BlockFormatError(f"{where}: producer id block {block.first}..{block.last} is not a range")
    return block
