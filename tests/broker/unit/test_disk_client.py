"""DiskClient and a disk worker that is not running: requests are refused at once with a retriable
error instead of being queued where the starting worker would drop them unanswered; real shared
memory, in this process (the worker's states are written as the supervisor writes them)."""

from __future__ import annotations

import asyncio

from appliance.errors import ErrorCode
from appliance.process.disk_client import DiskClient
from appliance.shm.layout import COMPLETION, REQUEST, MsgType, WorkerState
from appliance.shm.ring import Channel
from appliance.supervisor import DISK

NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_requests_wait_for_a_ready_worker_and_a_new_incarnation_fails_the_old_ones(plumbing):
    p, table = plumbing
    channel = Channel.attach(p.channel_names[(0, 0)])
    ring = channel.requests  # what disk worker 0 would read

    def worker(state: int, incarnation: int) -> None:
        table.set_worker(p.disk_slot(0), pid=1, kind=DISK, state=state, incarnation=incarnation)

    async def main() -> None:
        worker(WorkerState.STARTING, 1)
        disks = DiskClient(0, p, table)
        # starting: refused at once, nothing queued
        assert (await asyncio.wait_for(disks.submit(0, MsgType.PRODUCE, 0, b"x"), 2)).error_code == NOT_LEADER
        answers: list = []
        disks.submit(0, MsgType.PRODUCE, 0, b"x", timeout_ms=1000,
                     on_done=lambda tok, c: answers.append((tok, c)), token="t")
        assert answers == []  # answered on the loop's next pass, not inside the call
        await asyncio.sleep(0)
        assert [(tok, c.error_code) for tok, c in answers] == [("t", NOT_LEADER)]
        assert ring.used() == 0 and disks.pending() == 0

        # ready: queued and pending
        worker(WorkerState.READY, 1)
        held = disks.submit(0, MsgType.PRODUCE, 0, b"x")
        assert ring.used() > 0 and disks.pending() == 1 and not held.done()

        # died and restarted (a new incarnation, starting): the new request is refused, and the
        # one the old worker held fails on the loop's next pass
        worker(WorkerState.STARTING, 2)
        assert (await asyncio.wait_for(disks.submit(0, MsgType.PRODUCE, 0, b"y"), 2)).error_code == NOT_LEADER
        assert (await asyncio.wait_for(held, 1)).error_code == NOT_LEADER
        assert disks.pending() == 0
        used = ring.used()
        worker(WorkerState.READY, 2)
        again = disks.submit(0, MsgType.PRODUCE, 0, b"z")
        assert ring.used() > used and disks.pending() == 1 and not again.done()
        disks.close()

    try:
        asyncio.run(main())
    finally:
        channel.close()


def test_an_answer_held_for_a_dead_network_worker_reaches_no_request_of_its_successor(plumbing):
    """A disk worker answers an acks=all produce when its high watermark passes it, which can
    be after the network worker that sent it died and its successor took the same rings: that
    late answer must not complete one of the successor's requests (it would acknowledge
    records that are not yet replicated, and lose the successor's own answer)."""
    p, table = plumbing
    table.set_worker(p.disk_slot(0), pid=1, kind=DISK, state=WorkerState.READY, incarnation=1)
    channel = Channel.attach(p.channel_names[(0, 0)])  # disk worker 0's view of the rings

    def taken_id() -> int:
        """The request id of the next request on the ring, read as the disk worker reads it."""
        _, payload = channel.requests.peek()
        request_id = REQUEST.struct.unpack_from(payload, 0)[0]
        del payload
        channel.requests.release()
        return request_id

    def answer(request_id: int, base_offset: int) -> None:
        channel.completions.put(MsgType.COMPLETION,
                                COMPLETION.struct.pack(request_id, base_offset, -1, 0, 0, 0))

    async def main() -> None:
        old = DiskClient(0, p, table)
        old.submit(0, MsgType.PRODUCE, 0, b"old", acks=-1)
        old_id = taken_id()  # held by the disk worker for its followers
        old.close()  # SIGKILLed: nothing more of it runs
        new = DiskClient(0, p, table)
        mine = new.submit(0, MsgType.PRODUCE, 0, b"new", acks=-1)
        new_id = taken_id()
        answer(old_id, 100)  # the high watermark passes the old request
        new.on_doorbell()
        assert not mine.done()
        answer(new_id, 7)
        new.on_doorbell()
        assert (await asyncio.wait_for(mine, 1)).base_offset == 7
        new.close()

    try:
        asyncio.run(main())
    finally:
        channel.close()
