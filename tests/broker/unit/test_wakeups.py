"""A network worker's asks for data bells, per kind of long poll, in the completion rings the
disk workers read; real shared memory, in this process."""

from __future__ import annotations

import asyncio
import time

from appliance.process.disk_client import DiskClient
from appliance.process.wakeups import _PRUNE_WAITERS, DATA_INTEREST_S, Wakeups
from appliance.shm.layout import DataWanted
from appliance.shm.ring import Channel


def test_asks_per_kind_of_long_poll_and_timed_out_waits_do_not_pile_up(plumbing):
    p, table = plumbing
    seen = Channel.attach(p.channel_names[(0, 0)])  # what disk worker 0 reads

    async def main() -> None:
        w = Wakeups(DiskClient(0, p, table))
        await w.wait_for_data(0.001, DataWanted.ANY)  # a consumer's fetch waited
        assert seen.completions.data_wanted == DataWanted.ANY
        # no data bell ever comes: the timed-out waits are dropped, not kept forever
        for _ in range(2 * _PRUNE_WAITERS):
            await w.wait_for_data(0.0001, DataWanted.ANY)
        assert len(w._data_waiters) <= _PRUNE_WAITERS
        async def follow() -> None:  # a follower's long poll, as the fetch handler loops
            t0 = time.monotonic()
            await w.wait_for_data(30, DataWanted.LOG_END)
            assert time.monotonic() - t0 < 1  # the first wait after raising the ask is short
            await w.wait_for_data(30, DataWanted.LOG_END)

        follower = asyncio.ensure_future(follow())
        await asyncio.sleep(0.05)  # past its short first wait: waiting for a bell now
        assert seen.completions.data_wanted == DataWanted.LOG_END | DataWanted.ANY
        # later: the consumers' ask drops, the waiting follower's stays
        w.expire_data_interest(time.monotonic() + 2 * DATA_INTEREST_S)
        assert seen.completions.data_wanted == DataWanted.LOG_END
        assert not follower.done()
        w.on_doorbell()  # a bell wakes it at once
        await asyncio.wait_for(follower, 1)
        w.expire_data_interest(time.monotonic() + 2 * DATA_INTEREST_S)
        assert seen.completions.data_wanted == 0

    try:
        asyncio.run(main())
    finally:
        seen.close()
