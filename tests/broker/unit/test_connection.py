"""The asyncio connection with a fake transport and a fake disk client: the real protocol
module and the real handlers (Produce without a task, ApiVersions as a task), no sockets."""

from __future__ import annotations

import asyncio
import types

import appliance.protocol as proto
from appliance.broker.cluster_view import ClusterView
from appliance.broker.door import ANONYMOUS, ConnectionContext, Door
from appliance.broker.network_worker import MAX_IN_FLIGHT, KafkaConnection
from appliance.errors import ErrorCode
from appliance.process.disk_client import Completion
from appliance.process.wakeups import Wakeups
from appliance.protocol.messages import ApiVersions, Produce
from appliance.records.batch import build_batch
from appliance.shm.layout import SlotState
from tests.broker.wire import produce_body

TOPIC = "t"
LISTENER = ConnectionContext("PLAINTEXT", "PLAINTEXT", ANONYMOUS, "", ("localhost", 9092))


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.reading = True

    def write(self, data) -> None:
        assert not self.closed
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 40000) if name == "peername" else None

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass


class FakeDisks:
    """Holds every submitted request until :meth:`on_doorbell` answers them all, in order."""

    def __init__(self) -> None:
        self.submitted: list[tuple] = []
        self.next_offset = 0

    def begin_batch(self) -> None:
        pass

    def end_batch(self) -> None:
        pass

    def max_payload(self) -> int:
        return 1 << 20

    def submit(self, disk, msg_type, slot, *payload, acks=1, timeout_ms=30000, on_done=None,
               token=None, stamp_us=0, ring_now=False, slot_online=False) -> None:
        if acks != 0:
            self.submitted.append((on_done, token))

    def on_doorbell(self) -> None:
        answered, self.submitted = self.submitted, []
        for on_done, token in answered:
            on_done(token, Completion(0, self.next_offset, -1, 0))
            self.next_offset += 1


def _ctx(lookup=None):
    disks = FakeDisks()
    partition = types.SimpleNamespace(slot=0, disk=0)
    index = types.SimpleNamespace(lookup=lookup or (lambda t, p: partition if t == TOPIC else None))
    return types.SimpleNamespace(
        config={"socket.request.max.bytes": str(100 << 20)}, connections=set(), disks=disks,
        wakeups=Wakeups(disks), index=index, view=ClusterView(index), leads=lambda slot: True,
        table=types.SimpleNamespace(state=lambda slot: SlotState.ONLINE), readers=None,
        metrics=None,  # metrics off (BrokerContext.metrics)
        limits=None, acceptors=[], request_memory=None, request_queue=None,  # no connection limits
        leaders=None, extra_apis=None, cluster_link=None,  # standalone (BrokerContext's defaults)
        fast_produce=None,  # the generic path (the fast path's tests: test_produce_fast.py)
        authorizer=None,  # no authorizer.class.name: no ACL checks (BrokerContext's default)
        door=Door(), listeners=[LISTENER])  # BrokerContext's: the door lets every request in


class Client:
    """Builds request frames and decodes what the connection wrote."""

    def __init__(self) -> None:
        self.conn = proto.ClientConnection("unit")

    def produce(self, acks: int = 1) -> bytes:
        return self.conn.send_request(Produce.API_KEY, 7, produce_body(TOPIC, 0, build_batch([(b"k", b"v")]),
                                                                        acks=acks))[1]

    def api_versions(self) -> bytes:
        return self.conn.send_request(ApiVersions.API_KEY, 2, {})[1]

    def answers(self, written: list[bytes]) -> list:
        self.conn.receive_data(b"".join(written))
        out = []
        while isinstance(event := self.conn.next_event(), proto.Response):
            out.append(event)
        return out


async def _settle() -> None:
    for _ in range(10):  # let handler tasks run
        await asyncio.sleep(0)


def _connection(ctx) -> tuple[KafkaConnection, FakeTransport]:
    conn = KafkaConnection(ctx)
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


def test_pipelined_answers_go_out_in_request_order_and_together():
    async def main():
        ctx = _ctx()
        conn, transport = _connection(ctx)
        client = Client()
        conn.data_received(client.produce() + client.api_versions() + client.produce())
        await _settle()
        assert transport.writes == []  # ApiVersions is done, but the produce before it is not
        ctx.wakeups.on_doorbell()
        assert len(transport.writes) == 1  # every answer of the doorbell in one write
        got = client.answers(transport.writes)
        assert [a.correlation_id for a in got] == [0, 1, 2]
        assert [a.api_key for a in got] == [Produce.API_KEY, ApiVersions.API_KEY, Produce.API_KEY]
        offsets = [a.body.responses[0].partition_responses[0].base_offset for a in (got[0], got[2])]
        assert offsets == [0, 1]
        assert not transport.closed
    asyncio.run(main())


def test_acks_0_produce_gets_no_answer_and_does_not_hold_the_next():
    async def main():
        ctx = _ctx()
        conn, transport = _connection(ctx)
        client = Client()
        conn.data_received(client.produce(acks=0) + client.api_versions())
        await _settle()
        got = client.answers(transport.writes)
        assert [(a.correlation_id, a.api_key) for a in got] == [(1, ApiVersions.API_KEY)]
    asyncio.run(main())


def test_unknown_partition_is_answered_at_once_without_the_disk():
    async def main():
        ctx = _ctx(lookup=lambda t, p: None)
        conn, transport = _connection(ctx)
        client = Client()
        conn.data_received(client.produce())
        (got,) = client.answers(transport.writes)
        assert got.body.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert ctx.disks.submitted == []
    asyncio.run(main())


def test_a_bad_frame_closes_after_the_answers_already_owed():
    async def main():
        ctx = _ctx()
        conn, transport = _connection(ctx)
        client = Client()
        conn.data_received(client.produce() + b"\xff\xff\xff\xff" + client.api_versions())
        await _settle()
        assert not transport.closed and not transport.reading
        ctx.wakeups.on_doorbell()
        got = client.answers(transport.writes)
        assert [a.correlation_id for a in got] == [0]  # the request after the bad frame: never
        assert transport.closed
    asyncio.run(main())


def test_a_failing_handler_closes_the_connection():
    def broken(topic, partition):
        raise RuntimeError("a bug in a handler")

    async def main():
        conn, transport = _connection(_ctx(lookup=broken))
        conn.data_received(Client().produce())
        await _settle()
        assert transport.closed and transport.writes == []
    asyncio.run(main())


def test_too_many_unanswered_requests_pause_reading_until_answered():
    async def main():
        ctx = _ctx()
        conn, transport = _connection(ctx)
        client = Client()
        conn.data_received(b"".join(client.produce() for _ in range(MAX_IN_FLIGHT)))
        assert not transport.reading
        ctx.wakeups.on_doorbell()
        assert transport.reading
        assert len(client.answers(transport.writes)) == MAX_IN_FLIGHT
    asyncio.run(main())
