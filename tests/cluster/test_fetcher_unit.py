"""The replica fetcher without a cluster: Kafka's spread of partitions over fetchers, and a
fetch round against a leader that never answers (the request's min_bytes and max_wait_ms, then
replica.socket.timeout.ms)."""

from __future__ import annotations

import asyncio
import time
import types

import pytest

import appliance.protocol as proto
from appliance.cluster.fetcher import ReplicaFetcher, fetcher_id
from appliance.cluster.zk_paths import TopicPartition
from appliance.coordinator.routing import java_string_hash
from appliance.protocol.messages.cluster import INTER_BROKER_APIS


def _java_int(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


@pytest.mark.parametrize("topic", ["topic", "events", "__consumer_offsets", "a" * 40])
def test_fetcher_id_is_kafkas(topic):
    for n in (1, 2, 3, 7):
        for p in range(20):
            h = _java_int(31 * java_string_hash(topic) + p)
            want = (0 if h == -(1 << 31) else abs(h)) % n  # 0.8.2's Utils.abs (KAFKA-1469)
            assert fetcher_id(TopicPartition(topic, p), n) == want
    ids = {fetcher_id(TopicPartition(topic, p), 3) for p in range(30)}
    assert ids == {0, 1, 2}  # 30 partitions use every fetcher


class _Writer:
    def __init__(self) -> None:
        self.sent = b""

    def write(self, data: bytes) -> None:
        self.sent += data


def test_fetch_round_asks_min_bytes_and_gives_up_after_the_socket_timeout():
    config = {"replica.fetch.wait.max.ms": 100, "replica.fetch.max.bytes": 1 << 20,
              "replica.fetch.min.bytes": 4096, "num.replica.fetchers": 2,
              "replica.socket.timeout.ms": 300, "replica.socket.receive.buffer.bytes": -1}
    ctx = types.SimpleNamespace(config=config, table=types.SimpleNamespace(offsets=lambda slot: (5, 5, 0)))
    fetcher = ReplicaFetcher(ctx, store=None, broker_id=7)
    tp = TopicPartition("t", 0)
    source = (1, fetcher_id(tp, 2))
    fetcher.followed[source] = {tp: (0, 0)}

    async def round_trip() -> float:
        reader = asyncio.StreamReader()  # the leader never answers
        writer = _Writer()
        conn = proto.ClientConnection("test")
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            await fetcher._fetch_once(source, conn, reader, writer)
        took = time.monotonic() - start
        server = proto.ServerConnection(extra_apis=dict(INTER_BROKER_APIS))
        server.receive_data(writer.sent)
        req = server.next_event()
        assert req.body.replica_id == 7 and req.body.min_bytes == 4096 and req.body.max_wait_ms == 100
        return took

    took = asyncio.run(round_trip())
    assert 0.25 <= took < 2.0


@pytest.mark.parametrize("tls", [False, True])
def test_connector_sets_the_receive_buffer_before_connecting(tmp_path, tls):
    """replica.socket.receive.buffer.bytes through BrokerConnector.open, plain and over TLS (the
    kernel reports twice the size asked for)."""
    import socket
    import ssl

    from appliance.cluster.broker_connection import BrokerAddress, BrokerConnector
    from tests.security.certs import Authority, name

    server_ctx = client_ctx = None
    if tls:
        ca = Authority()
        _, cert, key = ca.issue(name(CN="broker"), hosts=("127.0.0.1",)).write(tmp_path, "broker")
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ctx.load_cert_chain(cert, key)
        client_ctx = ssl.create_default_context(cafile=str(ca.write(tmp_path / "ca.pem")))

    async def main() -> int:
        async def echo(reader, writer):
            writer.write(await reader.readexactly(4))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        connector = BrokerConnector("INTERNAL", tls=client_ctx)
        addr = BrokerAddress(1, "INTERNAL", "127.0.0.1", port, "SSL" if tls else "PLAINTEXT")
        reader, writer = await connector.open(addr, rcvbuf=70_000)
        rcvbuf = writer.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        assert (writer.get_extra_info("ssl_object") is not None) == tls
        writer.close()
        server.close()
        return rcvbuf

    assert asyncio.run(main()) == 140_000
