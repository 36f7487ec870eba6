"""Producer id blocks: Kafka's JSON record, the next block after it, and a standalone broker's
``producer-id-block`` file (atomic, serialised between processes, refused when not ours)."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest

from appliance.storage.producer_id_block import (
    BLOCK_SIZE,
    BlockFormatError,
    ProducerIdBlock,
    ProducerIdsExhausted,
    decode_block,
    encode_block,
    next_block,
)
from appliance.storage.producer_id_block_file import BLOCK_FILE, allocate_block, read_block


def test_the_record_is_kafkas_json():
    """Kafka's ProducerIdBlockZNode: version 1 as a number, the broker as a number, both ends
    inclusive and written as decimal strings."""
    data = encode_block(ProducerIdBlock(3, 1000, 1999))
    assert json.loads(data) == {"version": 1, "broker": 3, "block_start": "1000", "block_end": "1999"}
    assert data == b'{"version":1,"broker":3,"block_start":"1000","block_end":"1999"}'
    assert decode_block(data, "x") == ProducerIdBlock(3, 1000, 1999)
    # as a Kafka broker writes it (spaces and all)
    kafka = b'{"version": 1, "broker": 1001, "block_start": "5000", "block_end": "5999"}'
    assert decode_block(kafka, "x") == ProducerIdBlock(1001, 5000, 5999)


def test_next_block_starts_after_the_latest():
    assert next_block(None, 7) == ProducerIdBlock(7, 0, BLOCK_SIZE - 1)
    assert next_block(ProducerIdBlock(1001, 5000, 5999), 2) == ProducerIdBlock(2, 6000, 6999)
    top = (1 << 63) - 1
    assert next_block(ProducerIdBlock(0, 0, top - BLOCK_SIZE), 0).last == top
    with pytest.raises(ProducerIdsExhausted):
        next_block(ProducerIdBlock(0, 0, top - BLOCK_SIZE + 1), 0)


@pytest.mark.parametrize("data", [
    b"not json", b"[]", b'{"version":1}', b'{"version":1,"broker":1,"block_start":0,"block_end":999}',
    b'{"version":1,"broker":"1","block_start":"0","block_end":"999"}',
    b'{"version":1,"broker":1,"block_start":"-5","block_end":"999"}',
    b'{"version":1,"broker":1,"block_start":"10","block_end":"9"}',
    b'{"version":1,"broker":1,"block_start":"0","block_end":"99999999999999999999"}',
    b"\xff\xfe",
])
def test_what_is_not_a_block_is_refused_by_name(data):
    with pytest.raises(BlockFormatError, match="where-it-was"):
        decode_block(data, "where-it-was")


def test_no_data_is_no_block_yet():
    """Kafka's brokers create the znode empty at start (createTopLevelPaths)."""
    assert decode_block(b"", "x") is None and decode_block(None, "x") is None


def test_the_file_records_each_block_before_it_is_used(tmp_path):
    d = str(tmp_path)
    assert read_block(d) is None
    assert allocate_block(d, 4) == ProducerIdBlock(4, 0, 999)
    assert allocate_block(d, 4) == ProducerIdBlock(4, 1000, 1999)
    assert read_block(d) == ProducerIdBlock(4, 1000, 1999)
    assert (tmp_path / BLOCK_FILE).read_bytes() == encode_block(ProducerIdBlock(4, 1000, 1999))
    # a crash between the temp file and the rename leaves the temp file: the record stands
    (tmp_path / (BLOCK_FILE + ".tmp")).write_bytes(b'{"torn')
    assert allocate_block(d, 4) == ProducerIdBlock(4, 2000, 2999)


def _allocate_many(d: str, n: int, out) -> None:
    out.put([tuple(allocate_block(d, os.getpid())[1:]) for _ in range(n)])


def test_processes_allocating_at_once_get_disjoint_blocks(tmp_path):
    """The network workers of a broker are processes: the flock serialises them."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_allocate_many, args=(str(tmp_path), 25, out)) for _ in range(4)]
    for p in procs:
        p.start()
    blocks = [b for _ in procs for b in out.get(timeout=60)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert sorted(blocks) == [(i * BLOCK_SIZE, i * BLOCK_SIZE + BLOCK_SIZE - 1) for i in range(100)]


@pytest.mark.parametrize("content", [b"", b"garbage", b'{"version":1,"broker":0,"block_start":"x"}'])
def test_a_file_that_is_not_ours_is_refused_not_guessed(tmp_path, content):
    """Which ids went out is unknown then: starting again from 0 could reuse them."""
    (tmp_path / BLOCK_FILE).write_bytes(content)
    with pytest.raises((OSError, BlockFormatError)):
        allocate_block(str(tmp_path), 0)
    assert (tmp_path / BLOCK_FILE).read_bytes() == content
