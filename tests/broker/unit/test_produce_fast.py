"""The produce fast path inside the real connection (fake transport and disk client, as in
test_connection.py): what it takes, what it leaves to the generic path, and that its answers
are the generic path's bytes."""

from __future__ import annotations

import asyncio
import types

import pytest

from appliance.broker.handlers.produce_fast import FastProduce
from appliance.errors import ErrorCode
from appliance.metrics.recorder import SAMPLE
from appliance.process.disk_client import Completion
from appliance.protocol.messages import ApiVersions, Produce
from appliance.records.batch import build_batch
from appliance.records.legacy import build_message_set
from appliance.shm.layout import Role, SlotState
from tests.broker.unit.test_connection import TOPIC, Client, FakeDisks, _connection, _ctx
from tests.broker.wire import produce_body


class CountingDisks(FakeDisks):
    """FakeDisks that tells which way each request came in, and can fail appends."""

    def __init__(self) -> None:
        super().__init__()
        self.ways: list[str] = []
        self.error = 0

    def submit(self, *args, ring_now=False, **kwargs) -> None:
        # the fast path rings the disk's doorbell at once; the generic one coalesces
        self.ways.append("fast" if ring_now else "generic")
        super().submit(*args, **kwargs)

    def on_doorbell(self) -> None:
        answered, self.submitted = self.submitted, []
        for on_done, token in answered:
            if self.error:
                on_done(token, Completion(self.error, -1, -1, -1))
            else:
                on_done(token, Completion(0, self.next_offset, -1, 0))
                self.next_offset += 1


def _fast_ctx(fast: bool = True, **changes):
    ctx = _ctx()
    ctx.disks = CountingDisks()
    ctx.wakeups = type(ctx.wakeups)(ctx.disks)
    for k, v in changes.items():
        setattr(ctx, k, v)
    ctx.fast_produce = FastProduce(ctx) if fast else None
    return ctx


def _answers(ctx, client: Client, requests: list[bytes],
             one_read: bool = False) -> tuple[list[bytes], list]:
    """Feed ``requests`` (``client``'s: one socket read each, or all in one), answer every
    submission; the bytes written and the decoded answers."""
    async def main():
        conn, transport = _connection(ctx)
        if one_read:
            conn.data_received(b"".join(requests))
        else:
            for r in requests:
                conn.data_received(r)
        for _ in range(10):
            await asyncio.sleep(0)
        ctx.wakeups.on_doorbell()
        for _ in range(10):
            await asyncio.sleep(0)
        return transport.writes
    writes = asyncio.run(main())
    return writes, client.answers(writes)


def _produce(client: Client, version: int, records: bytes, acks: int = 1) -> bytes:
    return client.conn.send_request(Produce.API_KEY, version,
                                    produce_body(TOPIC, 0, records, acks=acks))[1]


def _one(ctx, version: int, records: bytes, acks: int = 1) -> tuple[list[bytes], list]:
    client = Client()
    return _answers(ctx, client, [_produce(client, version, records, acks)])


RECORDS = build_batch([(b"k", b"v")])


@pytest.mark.parametrize("version", range(3, 10))
def test_fast_answers_are_the_generic_answers(version):
    fast_ctx, generic_ctx = _fast_ctx(), _fast_ctx(fast=False)
    fast, _ = _one(fast_ctx, version, RECORDS)
    generic, _ = _one(generic_ctx, version, RECORDS)
    assert fast_ctx.disks.ways == ["fast"] and generic_ctx.disks.ways == ["generic"]
    assert fast == generic


@pytest.mark.parametrize("version", [3, 7, 9])
def test_a_failed_append_gets_the_generic_error_answer(version):
    fast_ctx, generic_ctx = _fast_ctx(), _fast_ctx(fast=False)
    for ctx in (fast_ctx, generic_ctx):
        ctx.disks.error = ErrorCode.CORRUPT_MESSAGE
    fast, answers = _one(fast_ctx, version, RECORDS)
    generic, _ = _one(generic_ctx, version, RECORDS)
    assert fast_ctx.disks.ways == ["fast"]
    assert fast == generic
    p = answers[0].body.responses[0].partition_responses[0]
    assert (p.error_code, p.base_offset) == (ErrorCode.CORRUPT_MESSAGE, -1)


@pytest.mark.parametrize("why,changes,request_args", [
    ("unknown partition", {"index": types.SimpleNamespace(lookup=lambda t, p: None)}, {}),
    ("slot offline", {"table": types.SimpleNamespace(state=lambda s: SlotState.OFFLINE)}, {}),
    ("slot on a failed dir", {"table": types.SimpleNamespace(state=lambda s: SlotState.STORAGE_ERROR)}, {}),
    ("not the leader", {"leaders": types.SimpleNamespace(role=lambda s: Role.FOLLOWER)}, {}),
    ("acks=2", {}, {"acks": 2}),
    ("legacy message set", {}, {"records": build_message_set([(b"k", b"v")], magic=1)}),
    ("an old version", {}, {"version": 2}),
])
def test_what_the_fast_path_leaves_to_the_generic_path(why, changes, request_args):
    args = {"version": 7, "records": RECORDS, **request_args}
    fast_ctx, generic_ctx = _fast_ctx(**changes), _fast_ctx(fast=False, **changes)
    fast, _ = _one(fast_ctx, **args)
    generic, _ = _one(generic_ctx, **args)
    assert "fast" not in fast_ctx.disks.ways, why
    assert fast == generic, why


def test_pipelined_requests_in_one_read_are_taken_in_order_until_one_is_not_for_it():
    ctx = _fast_ctx()
    client = Client()
    _, answers = _answers(ctx, client, [_produce(client, 7, RECORDS), _produce(client, 9, RECORDS),
                                        client.api_versions(), _produce(client, 7, RECORDS)],
                          one_read=True)
    assert ctx.disks.ways == ["fast", "fast", "generic"]  # the generic path reads the rest
    assert [(a.correlation_id, a.api_key) for a in answers] == \
        [(0, Produce.API_KEY), (1, Produce.API_KEY), (2, ApiVersions.API_KEY), (3, Produce.API_KEY)]
    offsets = [a.body.responses[0].partition_responses[0].base_offset
               for a in answers if a.api_key == Produce.API_KEY]
    assert offsets == [0, 1, 2]


def test_a_request_cut_across_reads_goes_the_generic_way():
    ctx = _fast_ctx()
    # reads: [whole, whole, first half of the third], [second half of the third]
    client = Client()
    frames = [_produce(client, 7, RECORDS) for _ in range(3)]
    cut = len(frames[2]) // 2
    writes, answers = _answers(ctx, client, [frames[0] + frames[1] + frames[2][:cut],
                                             frames[2][cut:]])
    assert ctx.disks.ways == ["fast", "fast", "generic"]
    assert [a.correlation_id for a in answers] == [0, 1, 2]
    assert [a.body.responses[0].partition_responses[0].base_offset for a in answers] == [0, 1, 2]


def test_fast_and_generic_requests_are_answered_in_request_order():
    ctx = _fast_ctx()
    client = Client()
    requests = [_produce(client, 7, RECORDS), client.api_versions(),
                _produce(client, 7, RECORDS), _produce(client, 7, RECORDS, acks=0),
                _produce(client, 7, RECORDS)]
    writes, answers = _answers(ctx, client, requests)
    assert ctx.disks.ways == ["fast", "fast", "generic", "fast"]
    assert len(writes) == 1  # every answer of the doorbell in one write
    assert [a.correlation_id for a in answers] == [0, 1, 2, 4]  # acks=0: no answer
    offsets = [a.body.responses[0].partition_responses[0].base_offset
               for a in answers if a.api_key == Produce.API_KEY]
    assert offsets == [0, 1, 2]


def test_metrics_timed_requests_go_the_generic_way_and_every_request_counts():
    recorder = types.SimpleNamespace(produce_count=0, w={}, error=lambda *a: None,
                                     failed_produce=lambda: None)
    ctx = _fast_ctx(metrics=recorder)

    async def main():
        conn, transport = _connection(ctx)
        conn.timed = {}
        client = Client()
        for _ in range(2 * SAMPLE):
            conn.data_received(_produce(client, 7, RECORDS))
    asyncio.run(main())
    assert recorder.produce_count == 2 * SAMPLE
    assert ctx.disks.ways.count("generic") == 2  # the timed ones: one in SAMPLE
    assert ctx.disks.ways.count("fast") == 2 * SAMPLE - 2


def test_a_bug_in_the_fast_path_closes_the_connection():
    def broken(topic, partition):
        raise RuntimeError("a bug")

    ctx = _fast_ctx(index=types.SimpleNamespace(lookup=broken))

    async def main():
        conn, transport = _connection(ctx)
        conn.data_received(_produce(Client(), 7, RECORDS))
        for _ in range(10):
            await asyncio.sleep(0)
        return transport
    transport = asyncio.run(main())
    assert transport.closed and transport.writes == []
