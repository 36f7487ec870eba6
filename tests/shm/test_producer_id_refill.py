"""The broker's producer id block in the partition table (process/producer_ids.py): workers
take ids under the table lock, one of them refills the block while the others wait, and every
wait is bounded."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
import uuid

import pytest

from appliance.process.producer_ids import (
    ProducerIdUnavailable,
    file_blocks,
    fill_block,
    new_producer_id,
)
from appliance.shm.partition_table import PartitionTable
from appliance.storage.producer_id_block_file import read_block


@pytest.fixture
def table():
    t = PartitionTable.create(f"/appliance-test-{uuid.uuid4().hex[:12]}", 8, broker_id=3, num_disks=1)
    yield t
    t.unlink()
    t.close()


def _take_many(name: str, log_dir: str, n: int, out) -> None:
    t = PartitionTable.attach(name)  # a process of its own, as a network worker

    async def main() -> list[int]:
        fetch = file_blocks(log_dir, 3)
        return [await new_producer_id(t, fetch) for _ in range(n)]
    out.put(asyncio.run(main()))
    t.close()


def test_workers_share_one_block_and_refill_it_once(table, tmp_path):
    """Three processes take 1,000 ids each: every id once, and exactly three blocks were
    allocated (no worker fetched a block another was already fetching)."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_take_many, args=(table.name, str(tmp_path), 1000, out)) for _ in range(3)]
    for p in procs:
        p.start()
    ids = [i for _ in procs for i in out.get(timeout=120)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert sorted(ids) == list(range(3000))
    assert read_block(str(tmp_path)).last == 2999
    assert table.producer_id_block() == (3000, 2999)  # used up: the next taker refills


def test_a_failed_fetch_answers_at_once_and_the_next_one_tries_again(table):
    calls = []

    async def broken(timeout_s: float) -> tuple[int, int]:
        calls.append(timeout_s)
        raise OSError("disk gone")

    async def fine(timeout_s: float) -> tuple[int, int]:
        return 7000, 7999

    async def main() -> int:
        started = time.monotonic()
        with pytest.raises(ProducerIdUnavailable, match="disk gone"):
            await new_producer_id(table, broken, wait_s=5)
        assert time.monotonic() - started < 1
        return await new_producer_id(table, fine, wait_s=5)  # the claim was dropped
    assert asyncio.run(main()) == 7000 and len(calls) == 1
    assert table.producer_id_block() == (7001, 7999)


def test_a_fetch_that_hangs_holds_no_one_past_the_bound(table):
    """The fetching worker gives up at the bound, and so does one waiting for its block."""
    async def hangs(timeout_s: float) -> tuple[int, int]:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def main() -> tuple[float, list]:
        started = time.monotonic()
        got = await asyncio.gather(new_producer_id(table, hangs, wait_s=0.5),
                                   new_producer_id(table, hangs, wait_s=0.5), return_exceptions=True)
        return time.monotonic() - started, got
    took, got = asyncio.run(main())
    assert took < 2 and all(isinstance(g, ProducerIdUnavailable) for g in got)


def test_fill_block_fills_only_a_used_up_block(table):
    async def fetch(timeout_s: float) -> tuple[int, int]:
        return 0, 999

    async def main() -> tuple[bool, bool]:
        return await fill_block(table, fetch), await fill_block(table, fetch)
    assert asyncio.run(main()) == (True, False)
    assert table.producer_id_block() == (0, 999)
