"""``producer-id-block`` in the first log dir: the latest producer id block of a standalone
broker (no ZooKeeper), what ``/latest_producer_id_block`` is to a cluster.

The network workers allocate from it when the broker's current block is used up. A block is
written (temp file, fsync, rename, directory fsync) before any id of it is handed out, so a
restarted broker, even after a SIGKILL or a power cut, starts after the last block it recorded
and never hands out an id twice; it only skips the unused rest of the block it had. The JSON is
Kafka's znode record (:mod:`appliance.storage.producer_id_block`).

Thread-safety: :func:`allocate_block` blocks (flock, fsync): call it off the event loop. Writers
of the broker's processes are serialised by an flock on ``producer-id-block.lock`` beside it,
which the kernel drops if the holder dies.
"""

from __future__ import annotations

import fcntl
import os

from appliance.storage.checkpoint import fsync_dir
from appliance.storage.producer_id_block import (
    ProducerIdBlock,
    decode_block,
    encode_block,
    next_block,
)

__all__ = ["BLOCK_FILE", "allocate_block", "read_block"]

BLOCK_FILE = "producer-id-block"


def read_block(log_dir: str) -> ProducerIdBlock | None:
    """The latest block recorded in ``log_dir`` (None: none yet). Raises OSError,
    BlockFormatError."""
    path = os.path.join(log_dir, BLOCK_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    if not data:  # we never write an empty file: a torn one would be a reused block
        raise OSError(f"{path} is empty")
    return decode_block(data, path)


def allocate_block(log_dir: str, broker_id: int) -> ProducerIdBlock:
    """Record and return the block after the latest one in ``log_dir``. Raises OSError,
    BlockFormatError (the file is not ours: refuse rather than guess which ids were used),
    ProducerIdsExhausted."""
    path = os.path.join(log_dir, BLOCK_FILE)
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        block = next_block(read_block(log_dir), broker_id)
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, encode_block(block))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(log_dir)  # the rename itself must survive a crash before the ids go out
        return block
    finally:
        os.close(lock)  # releases the flock
