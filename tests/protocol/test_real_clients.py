"""Real client libraries talk to a tiny loopback server built on our ServerConnection.

librdkafka (confluent-kafka) opens with ApiVersions v3, which we speak (flexible, KIP-482/511),
and then uses flexible Metadata; kafka-python negotiates too; all read our Metadata answer.
The server here is test scaffolding only (sockets live in tests, never in the package).
"""

from __future__ import annotations

import socket
import threading

import pytest

from appliance.protocol import messages as M
from appliance.protocol.connection import NEED_DATA, PEER_CLOSED, Request, ServerConnection
from appliance.protocol.errors import RemoteProtocolError
from appliance.protocol.frames import encode_response_bytes
from appliance.protocol.registry import api_versions_entries

pytestmark = pytest.mark.timeout(60)


class MiniServer:
    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.seen: list[tuple[int, int]] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _answer(self, ev: Request) -> bytes:
        if ev.api_key == 18:
            return encode_response_bytes(ev, {"api_keys": api_versions_entries()})
        if ev.api_key == 3:
            return encode_response_bytes(ev, {
                "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": self.port}],
                "cluster_id": "appliance-test", "controller_id": 1,
                "topics": [{"name": "t", "partitions": [
                    {"partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}]}]})
        raise LookupError(ev.api_key)

    def _serve(self, conn: socket.socket) -> None:
        proto = ServerConnection()
        conn.settimeout(30)
        with conn:
            while not self._stop:
                try:
                    data = conn.recv(65536)
                    proto.receive_data(data)
                    while True:
                        ev = proto.next_event()
                        if ev is NEED_DATA:
                            break
                        if ev is PEER_CLOSED:
                            return
                        self.seen.append((ev.api_key, ev.api_version))
                        if not isinstance(ev, Request):
                            if ev.response is not None:
                                conn.sendall(ev.response)
                            if ev.close_connection:
                                return
                            continue
                        conn.sendall(self._answer(ev))
                except (OSError, RemoteProtocolError, LookupError):
                    return

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def server():
    s = MiniServer()
    yield s
    s.close()


def test_librdkafka_negotiates_flexible_versions_and_reads_metadata(server):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.port}", "log_level": 0})
    md = admin.list_topics(timeout=10)
    assert "t" in md.topics and md.cluster_id == "appliance-test"
    assert list(md.topics["t"].partitions) == [0] and md.brokers[1].port == server.port
    # ApiVersions v3 (flexible request, v0 response header) is answered at once, and Metadata
    # runs at the newest version both sides know
    assert {v for k, v in server.seen if k == 18} == {3}
    assert max(v for k, v in server.seen if k == 3) == M.Metadata.MAX_VERSION


def test_kafka_python_negotiates_down_and_reads_metadata(server):
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.port}", request_timeout_ms=10000,
                             )
    try:
        assert consumer.topics() == {"t"}
        assert consumer.partitions_for_topic("t") == {0}
    finally:
        consumer.close()
    versions = [v for k, v in server.seen if k == 18]
    assert versions and max(versions) >= 2


def test_aiokafka_reads_metadata(server):
    import asyncio

    from aiokafka import AIOKafkaConsumer

    async def run() -> set[str]:
        consumer = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.port}", request_timeout_ms=10000)
        await asyncio.wait_for(consumer.start(), 20)
        try:
            return await asyncio.wait_for(consumer.topics(), 20)
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == {"t"}
    assert {k for k, _ in server.seen} >= {18, 3}
