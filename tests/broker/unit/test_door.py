"""The door (broker/door.py): every request, the produce fast path's included, passes it once
with its listener, principal, address and header, and a refusal closes the connection after the
answers owed. The real connection, protocol and handlers with the unit fakes; no processes."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from appliance.broker.door import ANONYMOUS, GO, ConnectionContext, Door, Refusal, RequestContext
from appliance.broker.handlers.produce_fast import FastProduce
from appliance.broker.network_worker import KafkaConnection
from appliance.errors import ErrorCode
from appliance.metrics.recorder import AnswerTiming
from appliance.protocol.messages import ApiVersions, Produce
from tests.broker.unit.test_connection import Client, FakeTransport, _ctx, _settle
from tests.broker.unit.test_produce_fast import RECORDS, CountingDisks, _produce

EXTERNAL = ConnectionContext("EXTERNAL", "PLAINTEXT", ANONYMOUS, "", ("kafka.example", 19092))


class Recording:
    """A door check that lets in (or refuses, from the ``refuse_from``-th on) and keeps what it
    was shown."""

    def __init__(self, refuse_from: int | None = None) -> None:
        self.seen: list[RequestContext] = []
        self.refuse_from = refuse_from

    def __call__(self, rc: RequestContext) -> Refusal | None:
        self.seen.append(dataclasses.replace(rc))
        if self.refuse_from is not None and len(self.seen) > self.refuse_from:
            return Refusal(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not on this listener")
        return None


def _ctx_with(check: Recording, fast: bool = False):
    ctx = _ctx()
    ctx.door = Door(checks=[check])
    if fast:
        ctx.disks = CountingDisks()
        ctx.wakeups = type(ctx.wakeups)(ctx.disks)
        ctx.fast_produce = FastProduce(ctx)
    return ctx


def _connection(ctx, listener: ConnectionContext = EXTERNAL):
    conn = KafkaConnection(ctx, listener)
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


def test_every_request_shows_its_listener_principal_address_and_header():
    check = Recording()

    async def main():
        ctx = _ctx_with(check)
        conn, transport = _connection(ctx)
        client = Client()
        conn.data_received(client.api_versions() + client.produce())
        await _settle()
        ctx.wakeups.on_doorbell()
        await _settle()
        return client.answers(transport.writes)

    got = asyncio.run(main())
    assert [a.api_key for a in got] == [ApiVersions.API_KEY, Produce.API_KEY]
    assert [(rc.api_key, rc.api_version, rc.correlation_id, rc.client_id) for rc in check.seen] == [
        (ApiVersions.API_KEY, 2, 0, "unit"), (Produce.API_KEY, 7, 1, "unit")]
    rc = check.seen[0]
    assert (rc.listener, rc.connection.security_protocol, rc.principal) == ("EXTERNAL", "PLAINTEXT", ANONYMOUS)
    assert rc.connection.client_address == "127.0.0.1" and rc.client_host == "/127.0.0.1"
    assert rc.advertised == ("kafka.example", 19092)


@pytest.mark.parametrize("pipelined", [False, True])
def test_the_fast_path_passes_the_door_once(pipelined):
    check = Recording()

    async def main():
        ctx = _ctx_with(check, fast=True)
        conn, transport = _connection(ctx)
        client = Client()
        frames = [_produce(client, 8, RECORDS), _produce(client, 9, RECORDS)]
        if pipelined:
            conn.data_received(b"".join(frames))
        else:
            for f in frames:
                conn.data_received(f)
        ctx.wakeups.on_doorbell()
        await _settle()
        return ctx, client.answers(transport.writes)

    ctx, got = asyncio.run(main())
    assert ctx.disks.ways == ["fast", "fast"]
    assert [a.correlation_id for a in got] == [0, 1]
    assert [(rc.api_key, rc.api_version, rc.correlation_id, rc.client_id, rc.listener)
            for rc in check.seen] == [(0, 8, 0, "unit", "EXTERNAL"), (0, 9, 1, "unit", "EXTERNAL")]


def test_a_refused_request_is_not_served_and_closes_after_the_answers_owed():
    check = Recording(refuse_from=1)  # the first request goes in, the second is refused

    async def main():
        ctx = _ctx_with(check)
        conn, transport = _connection(ctx)
        client = Client()
        conn.data_received(client.api_versions() + client.produce() + client.api_versions())
        await _settle()
        ctx.wakeups.on_doorbell()
        await _settle()
        return ctx, transport, client.answers(transport.writes)

    ctx, transport, got = asyncio.run(main())
    assert [a.correlation_id for a in got] == [0]  # the refused produce and what followed: nothing
    assert ctx.disks.submitted == [] and ctx.disks.next_offset == 0  # never reached a disk
    assert transport.closed


def test_a_refused_fast_produce_never_reaches_the_disk():
    check = Recording(refuse_from=0)

    async def main():
        ctx = _ctx_with(check, fast=True)
        conn, transport = _connection(ctx)
        client = Client()
        conn.data_received(_produce(client, 9, RECORDS))
        await _settle()
        return ctx, transport

    ctx, transport = asyncio.run(main())
    assert len(check.seen) == 1 and check.seen[0].api_key == Produce.API_KEY
    assert ctx.disks.ways == [] and transport.writes == [] and transport.closed


def test_the_door_times_what_the_metrics_time():
    rc = RequestContext(EXTERNAL, ApiVersions.API_KEY, 3, 7, None)
    assert Door().enter(rc) is GO  # metrics off: nothing to time, nothing made
    entry = Door(metrics=object()).enter(rc)
    assert isinstance(entry.timing, AnswerTiming) and entry.timing.api_key == ApiVersions.API_KEY
    assert Door(metrics=object()).enter(rc, timed=False) is GO  # produce samples for itself
    refusal = Refusal(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "no")
    first = Door(checks=[lambda rc: refusal, lambda rc: pytest.fail("after a refusal")])
    assert first.enter(rc) is refusal


def test_only_a_door_without_checks_is_open():
    """An open door lets every untimed request in: the fast path does not build a context for
    it. A door with a check is not open, so the fast path shows it every request."""
    assert Door().open and Door(metrics=object()).open
    assert not Door(checks=[lambda rc: None]).open
