"""Framing and the server/client connection state machines (h11-style feeding)."""

from __future__ import annotations

import struct
import time

import pytest

from appliance.errors import ErrorCode
from appliance.protocol import messages as M
from appliance.protocol.connection import (
    NEED_DATA,
    PEER_CLOSED,
    ClientConnection,
    ConnectionState,
    Request,
    Response,
    ServerConnection,
    UnknownApiKey,
    UnsupportedVersion,
)
from appliance.protocol.errors import LocalProtocolError, ProtocolEncodeError, RemoteProtocolError
from appliance.protocol.frames import (
    FileSlice,
    api_versions_fallback_response,
    encode_request_frame,
    encode_response,
    encode_response_bytes,
    frame_length,
)
from appliance.protocol.registry import SUPPORTED_VERSIONS

HEARTBEAT = {"group_id": "grp", "generation_id": 3, "member_id": "m-1"}


def heartbeat_frame(corr: int = 1, version: int = 1) -> bytes:
    return encode_request_frame(12, version, corr, "cli", HEARTBEAT)


def drain(conn) -> list:
    events = []
    while True:
        ev = conn.next_event()
        if ev is NEED_DATA or ev is PEER_CLOSED:
            return events
        events.append(ev)


def test_heartbeat_frame_bytes_by_hand():
    body = b"\x00\x03grp" + b"\x00\x00\x00\x03" + b"\x00\x03m-1"
    header = b"\x00\x0c\x00\x01\x00\x00\x00\x01\x00\x03cli"
    assert heartbeat_frame() == struct.pack(">i", len(header + body)) + header + body


@pytest.mark.parametrize("chunk", [None, 1, 2, 3, 7, 1000])
def test_pipelined_frames_in_any_chunking(chunk):
    frames = [heartbeat_frame(c) for c in range(5)]
    stream = b"".join(frames) + heartbeat_frame(99)[:6]  # trailing partial frame
    conn = ServerConnection()
    events = []
    pieces = [stream] if chunk is None else [stream[i:i + chunk] for i in range(0, len(stream), chunk)]
    for p in pieces:
        conn.receive_data(p)
        events += drain(conn)
    assert [e.correlation_id for e in events] == [0, 1, 2, 3, 4]
    for e in events:
        assert isinstance(e, Request) and e.api_key == 12 and e.api_version == 1 and e.client_id == "cli"
        assert e.body == M.Heartbeat.Request(**HEARTBEAT) and e.size == len(frames[0]) - 4
    assert conn.next_event() is NEED_DATA
    conn.receive_data(heartbeat_frame(99)[6:])
    assert conn.next_event().correlation_id == 99


def test_clean_eof_and_eof_inside_a_frame():
    conn = ServerConnection()
    conn.receive_data(heartbeat_frame())
    conn.receive_data(b"")
    assert isinstance(conn.next_event(), Request)
    assert conn.next_event() is PEER_CLOSED and conn.state is ConnectionState.CLOSED
    with pytest.raises(LocalProtocolError):
        conn.next_event()
    for cut in (2, 4, 10):
        conn = ServerConnection()
        conn.receive_data(heartbeat_frame()[:cut])
        conn.receive_data(b"")
        with pytest.raises(RemoteProtocolError, match="closed inside"):
            conn.next_event()
        assert conn.state is ConnectionState.ERROR


@pytest.mark.parametrize("size", [0, -1, -(2**31), 1025])
def test_bad_size_prefix_is_refused_as_soon_as_it_arrives(size):
    conn = ServerConnection(max_request_size=1024)
    conn.receive_data(struct.pack(">i", size))  # no payload needed to judge the size
    with pytest.raises(RemoteProtocolError) as ei:
        conn.next_event()
    assert ei.value.code == ErrorCode.INVALID_REQUEST and ei.value.close_connection
    assert conn.state is ConnectionState.ERROR
    with pytest.raises(LocalProtocolError):
        conn.next_event()
    with pytest.raises(LocalProtocolError):
        conn.receive_data(b"more")


def test_default_max_request_size_is_kafkas():
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", 104857600 + 1))
    with pytest.raises(RemoteProtocolError):
        conn.next_event()
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", 104857600))
    assert conn.next_event() is NEED_DATA


def test_frame_shorter_than_header():
    conn = ServerConnection()
    conn.receive_data(b"\x00\x00\x00\x03\x00\x0c\x00")
    with pytest.raises(RemoteProtocolError, match="shorter"):
        conn.next_event()


def test_unknown_api_key_tells_caller_to_close():
    conn = ServerConnection()
    conn.receive_data(struct.pack(">ihhi", 10, 999, 0, 42) + b"\x00\x00")
    ev = conn.next_event()
    assert isinstance(ev, UnknownApiKey)
    assert (ev.api_key, ev.correlation_id, ev.client_id, ev.close_connection, ev.response) == (
        999, 42, "", True, None)
    assert conn.state is ConnectionState.MUST_CLOSE
    with pytest.raises(LocalProtocolError):
        conn.next_event()


@pytest.mark.parametrize("api_key,version", [(2, 9), (0, 10), (1, 16), (8, 9), (3, 13), (12, -1)])
def test_unsupported_version_of_other_apis_closes(api_key, version):
    conn = ServerConnection()
    conn.receive_data(struct.pack(">ihhi", 8, api_key, version, 5))  # no client id even
    ev = conn.next_event()
    assert isinstance(ev, UnsupportedVersion)
    assert ev.close_connection and ev.response is None and ev.error == ErrorCode.UNSUPPORTED_VERSION
    assert ev.client_id is None


def expected_fallback(corr: int) -> bytes:
    body = struct.pack(">hi", 35, len(SUPPORTED_VERSIONS))
    for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items()):
        body += struct.pack(">hhh", key, lo, hi)
    return struct.pack(">ii", 4 + len(body), corr) + body


def test_api_versions_v3_is_decoded_flexible():
    # ApiVersions v3: request header v2 (client id as int16 string + empty tagged fields),
    # compact body: client_software_name "kcat", client_software_version "1.7", no tags.
    header = struct.pack(">hhi", 18, 3, 0x01020304) + b"\x00\x04kcat" + b"\x00"
    body = b"\x05kcat" + b"\x041.7" + b"\x00"
    frame = struct.pack(">i", len(header + body)) + header + body
    conn = ServerConnection()
    conn.receive_data(frame + heartbeat_frame(7))
    ev = conn.next_event()
    assert isinstance(ev, Request) and ev.client_id == "kcat" and ev.api_version == 3
    assert (ev.body.client_software_name, ev.body.client_software_version) == ("kcat", "1.7")
    assert conn.next_event().correlation_id == 7


def test_api_versions_v4_gets_the_v0_layout_fallback_and_stays_open():
    # a version above ours (Kafka 3.9's v4, same layout as v3): the v0-layout fallback
    header = struct.pack(">hhi", 18, 4, 0x01020304) + b"\x00\x04kcat" + b"\x00"
    body = b"\x05kcat" + b"\x041.7" + b"\x00"
    frame = struct.pack(">i", len(header + body)) + header + body
    conn = ServerConnection()
    conn.receive_data(frame + heartbeat_frame(7))
    ev = conn.next_event()
    assert isinstance(ev, UnsupportedVersion) and not ev.close_connection
    assert ev.client_id == "kcat" and ev.api_version == 4
    assert ev.response == expected_fallback(0x01020304) == api_versions_fallback_response(0x01020304)
    # exact bytes, spelled out for the first entries: size, corr id, error 35, count, Produce 0-9
    n = len(SUPPORTED_VERSIONS)  # grows with every API added; 6 bytes per entry
    assert ev.response[:24] == struct.pack(">ii", 10 + 6 * n, 0x01020304) + bytes.fromhex(
        "0023") + struct.pack(">i", n) + bytes.fromhex("0000" "0000" "0009" "0001" "0000")
    assert conn.state is ConnectionState.OPEN
    assert conn.next_event().correlation_id == 7  # the connection carries on


def test_api_versions_garbage_body_at_high_version_is_not_decoded():
    conn = ServerConnection()
    conn.receive_data(struct.pack(">ihhi", 8 + 5, 18, 77, 9) + b"\xff\xff\xff\xff\xff")
    ev = conn.next_event()
    assert isinstance(ev, UnsupportedVersion) and ev.response == expected_fallback(9)


def test_api_versions_supported_versions_decode():
    for v in (0, 1, 2):
        conn = ServerConnection()
        conn.receive_data(encode_request_frame(18, v, 1, "c", {}))
        ev = conn.next_event()
        assert isinstance(ev, Request) and ev.api_version == v


@pytest.mark.parametrize("body", [
    b"",  # truncated
    b"\x00\x03grp\x00\x00\x00\x03\x00\x05m-1",  # string past the end
    b"\x00\x02\xff\xfe\x00\x00\x00\x03\x00\x03m-1",  # invalid UTF-8
    b"\x00\x03grp\x00\x00\x00\x03\x00\x03m-1\x00",  # trailing byte
])
def test_undecodable_body_is_invalid_request_and_closes(body):
    header = struct.pack(">hhi", 12, 1, 3) + b"\xff\xff"
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", len(header + body)) + header + body)
    with pytest.raises(RemoteProtocolError) as ei:
        conn.next_event()
    assert ei.value.code == ErrorCode.INVALID_REQUEST and conn.state is ConnectionState.ERROR


@pytest.mark.parametrize("count", [-2, 2**31 - 1, 1000])
def test_hostile_array_counts_in_a_request(count):
    # Metadata v1: topics array count, then nothing
    header = struct.pack(">hhi", 3, 1, 3) + b"\x00\x00"
    body = struct.pack(">i", count)
    conn = ServerConnection()
    conn.receive_data(struct.pack(">i", len(header + body)) + header + body)
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


def test_bad_client_id_is_invalid_request():
    conn = ServerConnection()
    conn.receive_data(struct.pack(">ihhi", 10, 12, 1, 3) + b"\x00\x09")
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


def test_produce_acks_zero_expects_no_response():
    conn = ServerConnection()
    for acks, expected in ((0, False), (1, True), (-1, True)):
        conn.receive_data(encode_request_frame(0, 7, acks + 5, None, {"acks": acks, "timeout_ms": 1}))
        ev = conn.next_event()
        assert ev.expects_response is expected and ev.client_id is None
    client = ClientConnection()
    client.send_request(0, 7, {"acks": 0, "timeout_ms": 1})
    assert client.in_flight == 0
    client.send_request(0, 7, {"acks": 1, "timeout_ms": 1})
    assert client.in_flight == 1


def test_large_frame_buffering_is_linear():
    records = bytes(8 << 20)
    frame = encode_request_frame(0, 7, 1, "c", {"acks": 1, "timeout_ms": 1, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": records}]}]})
    conn = ServerConnection()
    t0 = time.perf_counter()
    for i in range(0, len(frame), 4096):
        conn.receive_data(frame[i:i + 4096])
        ev = conn.next_event()
    elapsed = time.perf_counter() - t0
    assert isinstance(ev, Request) and ev.body.topic_data[0].partition_data[0].records == records
    assert elapsed < 2.0, elapsed  # quadratic re-copying would take minutes


def test_many_small_frames_in_one_buffer_are_linear():
    frame = heartbeat_frame()
    conn = ServerConnection()
    conn.receive_data(frame * 20000)
    t0 = time.perf_counter()
    assert len(drain(conn)) == 20000
    assert time.perf_counter() - t0 < 3.0


# --- responses --------------------------------------------------------------------------

FETCH_BODY = {"responses": [{"topic": "t", "partitions": [
    {"partition_index": 0, "high_watermark": 10, "records": FileSlice("/seg", 100, 50)},
    {"partition_index": 1, "high_watermark": 10, "records": b"inline"},
    {"partition_index": 2, "high_watermark": 10, "records": FileSlice(7, 0, 3)},
    {"partition_index": 3, "high_watermark": 10, "records": None}]}]}


def test_fetch_response_with_file_slices():
    req = Request(1, 11, 77, "c", None, 0)
    chunks = encode_response(req, FETCH_BODY)
    assert [type(c) for c in chunks] == [bytes, FileSlice, bytes, FileSlice, bytes]
    (size,) = struct.unpack_from(">i", chunks[0])
    assert size == frame_length(chunks) - 4
    # replacing each slice by its bytes gives exactly the all-bytes encoding
    content = {"/seg": b"S" * 50, 7: b"abc"}
    joined = b"".join(content[c.fd_or_path] if isinstance(c, FileSlice) else c for c in chunks)
    inline = {"responses": [{"topic": "t", "partitions": [
        dict(p, records=content[p["records"].fd_or_path] if isinstance(p["records"], FileSlice) else p["records"])
        for p in FETCH_BODY["responses"][0]["partitions"]]}]}
    assert joined == encode_response_bytes(req, inline)
    client = ClientConnection()
    client._pending[77] = (1, 11)
    client.receive_data(joined)
    got = client.next_event()
    assert isinstance(got, Response) and got.correlation_id == 77
    parts = got.body.responses[0].partitions
    assert [None if p.records is None else bytes(p.records) for p in parts] == [
        b"S" * 50, b"inline", b"abc", None]
    with pytest.raises(ProtocolEncodeError):
        encode_response_bytes(req, FETCH_BODY)


def test_file_slice_in_a_request_is_refused():
    with pytest.raises(ProtocolEncodeError):
        encode_request_frame(0, 7, 1, "c", {"topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": FileSlice("/x", 0, 1)}]}]})


def test_large_records_round_trip_through_frames():
    rec = memoryview(bytes(range(256)) * 1024)
    frame = encode_request_frame(0, 7, 2, "c", {"acks": 1, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": rec}, {"index": 1, "records": b"x"}]}]})
    conn = ServerConnection()
    conn.receive_data(frame)
    parts = conn.next_event().body.topic_data[0].partition_data
    assert bytes(parts[0].records) == bytes(rec) and bytes(parts[1].records) == b"x"


# --- client --------------------------------------------------------------------------------

def test_client_server_conversation():
    client, server = ClientConnection(client_id="me"), ServerConnection()
    c1, f1 = client.send_request(3, 4, {"topics": None, "allow_auto_topic_creation": False})
    c2, f2 = client.send_request(12, 1, HEARTBEAT)
    assert (c1, c2) == (0, 1) and client.in_flight == 2
    server.receive_data(f1 + f2)
    r1, r2 = drain(server)
    assert r1.body.topics is None and r1.client_id == "me"
    out = encode_response_bytes(r1, {"brokers": [{"node_id": 1, "host": "h", "port": 1}]})
    out += encode_response_bytes(r2, {"error_code": 27})
    for b in out:
        client.receive_data(bytes([b]))
    e1, e2 = drain(client)
    assert e1.body.brokers[0].host == "h" and e1.api_key == 3 and e1.api_version == 4
    assert e2.body.error_code == 27 and client.in_flight == 0


def test_client_refuses_unexpected_correlation_id():
    client = ClientConnection()
    client.send_request(12, 1, HEARTBEAT)
    client.receive_data(struct.pack(">iih", 6, 5, 0))
    with pytest.raises(RemoteProtocolError, match="correlation"):
        client.next_event()
    assert client.state is ConnectionState.ERROR


def test_client_falls_back_to_v0_for_unsupported_api_versions():
    client, server = ClientConnection(), ServerConnection()
    cid, frame = client.send_request(18, 2, {})
    # pretend the server only knew v0-1: it would answer with the v0-layout fallback
    client.receive_data(api_versions_fallback_response(cid))
    ev = client.next_event()
    assert ev.body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {(k.api_key, k.min_version, k.max_version) for k in ev.body.api_keys} == {
        (k, lo, hi) for k, (lo, hi) in SUPPORTED_VERSIONS.items()}
    server.receive_data(frame)
    assert isinstance(server.next_event(), Request)


def test_client_undecodable_response():
    client = ClientConnection()
    client.send_request(12, 1, HEARTBEAT)
    client.receive_data(struct.pack(">ii", 5, 0) + b"\x00")
    with pytest.raises(RemoteProtocolError):
        client.next_event()


def test_client_rejects_unknown_api_and_version():
    from appliance.errors import UnsupportedVersionError

    client = ClientConnection()
    with pytest.raises(UnsupportedVersionError):
        client.send_request(999, 0, {})
    with pytest.raises(UnsupportedVersionError):
        client.send_request(1, 16, {})
    assert client.in_flight == 0


def _produce_frame(corr: int, payload: bytes) -> bytes:
    return encode_request_frame(0, 7, corr, "c", {"acks": 1, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": payload}]}]})


def test_records_views_stay_valid_while_the_buffer_is_reused():
    conn = ServerConnection()
    held = []
    # frames arriving exactly (buffer handed over), several per chunk (copied out), and
    # big enough that the buffer gets compacted in between
    payloads = [bytes([i]) * (40_000 + i) for i in range(12)]
    frames = [_produce_frame(i, p) for i, p in enumerate(payloads)]
    conn.receive_data(frames[0])
    held.append(conn.next_event())
    stream = b"".join(frames[1:])
    for i in range(0, len(stream), 50_000):
        conn.receive_data(stream[i:i + 50_000])
        held += drain(conn)
    assert [e.correlation_id for e in held] == list(range(12))
    for e, p in zip(held, payloads, strict=True):
        rec = e.body.topic_data[0].partition_data[0].records
        assert isinstance(rec, memoryview) and rec.readonly and rec == p
