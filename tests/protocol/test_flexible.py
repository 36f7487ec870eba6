"""Flexible versions (KIP-482): unsigned varints, compact encodings, tagged fields, headers v2/v1,
and golden frames — captured from librdkafka 2.16 or written out by hand from Kafka's
message JSON and the protocol guide."""

from __future__ import annotations

import struct

import pytest

from appliance.protocol import messages as M
from appliance.protocol import types as T
from appliance.protocol.connection import ClientConnection, Request, ServerConnection
from appliance.protocol.errors import ProtocolDecodeError, ProtocolEncodeError
from appliance.protocol.frames import encode_request_frame, encode_response_bytes
from appliance.protocol.schema import ApiMessage, Field, SchemaError, Struct

# --- unsigned varints -----------------------------------------------------------------------

@pytest.mark.parametrize("n,wire", [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"),
                                    (16383, "ff7f"), (16384, "808001"), (0xFFFFFFFF, "ffffffff0f")])
def test_uvarint_round_trip(n, wire):
    assert T.encode_uvarint(n).hex() == wire
    assert T.decode_uvarint(memoryview(bytes.fromhex(wire)), 0) == (n, len(wire) // 2)


@pytest.mark.parametrize("wire", ["ffffffffff01", "ffffffff1f", "80", "ff"])
def test_uvarint_too_long_overflowing_or_truncated_is_refused(wire):
    with pytest.raises(ProtocolDecodeError):
        T.decode_uvarint(memoryview(bytes.fromhex(wire)), 0)


def test_uvarint_out_of_range_is_not_encoded():
    with pytest.raises(ProtocolEncodeError):
        T.encode_uvarint(1 << 32)
    with pytest.raises(ProtocolEncodeError):
        T.encode_uvarint(-1)


# --- compact types --------------------------------------------------------------------------

@pytest.mark.parametrize("t,value,wire", [
    (T.CompactString, "", "01"), (T.CompactString, "abc", "04616263"),
    (T.CompactNullableString, None, "00"), (T.CompactNullableString, "é", "03c3a9"),
    (T.CompactBytes, b"\x00\x01", "030001"), (T.CompactNullableBytes, None, "00"),
    (T.CompactRecords, None, "00"), (T.CompactRecords, b"rec", "04726563"),
    (T.CompactArray(T.Int32), [1, -1], "0300000001ffffffff"),
    (T.CompactArray(T.Int32, nullable=True), None, "00"),
    (T.CompactArray(T.CompactString), ["a", ""], "03026101"),
])
def test_compact_round_trip(t, value, wire):
    assert t.encode(value).hex() == wire
    got, end = t.decode(memoryview(bytes.fromhex(wire)), 0)
    assert (got.tobytes() if isinstance(got, memoryview) else got) == value and end == len(wire) // 2


@pytest.mark.parametrize("t,wire", [
    (T.CompactString, "00"),  # null in a non-nullable string
    (T.CompactBytes, "00"),
    (T.CompactString, "0561"),  # length past the end
    (T.CompactBytes, "ffffffff0f"),  # 4 GiB claimed
    (T.CompactArray(T.Int32), "00"),  # null array where not nullable
    (T.CompactArray(T.Int64), "0a0000"),  # 9 elements cannot fit
    (T.CompactString, "03ff"),  # truncated and invalid
])
def test_compact_bad_input_is_refused(t, wire):
    with pytest.raises(ProtocolDecodeError):
        t.decode(memoryview(bytes.fromhex(wire)), 0)


def test_compact_is_derived_from_the_plain_type():
    assert T.compact(T.String) is T.CompactString and T.compact(T.NullableBytes) is T.CompactNullableBytes
    assert T.compact(T.Int32) is T.Int32 and T.compact(T.Uuid) is T.Uuid
    arr = T.compact(T.Array(T.String, nullable=True))
    assert isinstance(arr, T.CompactArray) and arr.nullable and arr.element is T.CompactString


# --- tagged fields --------------------------------------------------------------------------

class Tagged(ApiMessage):
    """A test message: flexible from v1, with tagged fields in v1+."""

    API_KEY, MIN_VERSION, MAX_VERSION = 30000, 0, 2
    FLEXIBLE = "1+"
    REQUEST = (
        Field("name", T.String),
        Field("items", T.Array(Struct(
            Field("n", T.Int32),
            Field("note", T.NullableString, versions="1+", tag=0),
        ))),
        Field("hint", T.NullableString, versions="1+", tag=3),
        Field("epoch", Struct(Field("e", T.Int32, default=-1), Field("o", T.Int64, default=-1)),
              versions="2+", tag=1),
    )
    RESPONSE = ()


def test_tagged_fields_are_written_only_when_not_default():
    body = {"name": "x", "items": [{"n": 7}]}
    # v0: plain; v1: compact, an empty tagged section after each struct
    assert Tagged.encode_request(0, body).hex() == "0001" "78" "00000001" "00000007"
    assert Tagged.encode_request(1, body).hex() == "0278" "02" "00000007" "00" "00"
    wire = Tagged.encode_request(2, {"name": "x", "items": [{"n": 7, "note": "hi"}], "hint": "h",
                                     "epoch": {"e": 5, "o": 9}})
    assert wire.hex() == ("0278" "02" "00000007" "01" "00" "03" "036869"  # item: tag 0, 3 bytes
                          "02"  # two tagged fields, in tag order
                          "01" "0d" "00000005" "0000000000000009" "00"  # tag 1: the struct
                          "03" "02" "0268")  # tag 3: "h"
    back = Tagged.decode_request(2, wire)
    assert back.items[0].note == "hi" and back.hint == "h" and (back.epoch.e, back.epoch.o) == (5, 9)
    absent = Tagged.decode_request(2, Tagged.encode_request(2, body))
    assert absent.hint is None and absent.epoch is None and absent.items[0].note is None


def test_unknown_tags_are_skipped():
    # tag 9 (4 bytes) and tag 200 (0 bytes) are unknown; tag 3 is known
    wire = bytes.fromhex("0278" "01" "03" "09" "04" "deadbeef" "c801" "00" "03" "02" "0268")
    v = Tagged.decode_request(1, wire)
    assert v.name == "x" and v.items == [] and v.hint == "h"


@pytest.mark.parametrize("tail", [
    "05",  # 5 tagged fields announced, none there
    "01" "09" "05" "aabb",  # a tagged field longer than what remains
    "01" "03" "05" "0268",  # a known tag whose size disagrees with its value
    "01" "03" "ffffffffff0f",  # an overlong varint size
])
def test_bad_tagged_sections_are_refused(tail):
    with pytest.raises(ProtocolDecodeError):
        Tagged.decode_request(1, bytes.fromhex("0278" "01") + bytes.fromhex(tail))


def test_tagged_fields_must_be_flexible():
    with pytest.raises(SchemaError, match="non-flexible"):
        class Bad(ApiMessage):
            API_KEY, MIN_VERSION, MAX_VERSION = 30001, 0, 3
            FLEXIBLE = "2+"
            REQUEST = (Field("x", T.Int32, versions="1+", tag=0),)
    with pytest.raises(SchemaError, match="duplicate tag"):
        class Bad2(ApiMessage):
            API_KEY, MIN_VERSION, MAX_VERSION = 30002, 0, 3
            FLEXIBLE = "0+"
            REQUEST = (Field("x", T.Int32, tag=0), Field("y", T.Int32, tag=0))


# --- golden frames --------------------------------------------------------------------------

# librdkafka 2.16 (confluent-kafka 2.16.1) on connect: ApiVersions v3, request header v2
LIBRDKAFKA_API_VERSIONS_V3 = bytes.fromhex(
    "00000040" "0012" "0003" "00000001" "0007" "72646b61666b61" "00"
    "17" "636f6e666c75656e742d6b61666b612d707974686f6e"  # "confluent-kafka-python"
    "16" "322e31362e312d72646b61666b612d322e31362e30"  # "2.16.1-rdkafka-2.16.0"
    "00")
# then Metadata v12 for the brokers only (an empty topic array)
LIBRDKAFKA_METADATA_V12 = bytes.fromhex(
    "00000016" "0003" "000c" "00000002" "0007" "72646b61666b61" "00" "01" "00" "00" "00")
# and Metadata v12 for every topic, as it sends it: 3 bytes after the body, which Kafka's parser
# (and ours, in flexible versions) ignores
LIBRDKAFKA_METADATA_V12_ALL = bytes.fromhex(
    "00000019" "0003" "000c" "00000003" "0007" "72646b61666b61" "00" "00" "00" "00" "00" "010000")


def test_librdkafka_frames_decode_and_reencode_byte_for_byte():
    conn = ServerConnection()
    conn.receive_data(LIBRDKAFKA_API_VERSIONS_V3 + LIBRDKAFKA_METADATA_V12 + LIBRDKAFKA_METADATA_V12_ALL)
    av, md, md_all = conn.next_event(), conn.next_event(), conn.next_event()
    assert isinstance(av, Request) and (av.api_key, av.api_version, av.client_id) == (18, 3, "rdkafka")
    assert av.body.client_software_name == "confluent-kafka-python"
    assert av.body.client_software_version == "2.16.1-rdkafka-2.16.0"
    assert encode_request_frame(18, 3, 1, "rdkafka", av.body) == LIBRDKAFKA_API_VERSIONS_V3
    assert md.body.topics == [] and not md.body.allow_auto_topic_creation
    assert encode_request_frame(3, 12, 2, "rdkafka", md.body) == LIBRDKAFKA_METADATA_V12
    assert md_all.body.topics is None and md_all.correlation_id == 3


def test_api_versions_v3_response_keeps_header_v0():
    req = Request(18, 3, 7, "c", None, 0)
    wire = encode_response_bytes(req, {"error_code": 0, "throttle_time_ms": 0, "api_keys": [
        {"api_key": 0, "min_version": 0, "max_version": 9}]})
    # size, correlation id (no tagged fields: header v0), error, compact array of 1,
    # key/min/max + its tags, throttle, top-level tags
    assert wire.hex() == ("00000013" "00000007" "0000" "02" "0000" "0000" "0009" "00"
                          "00000000" "00")


def test_metadata_v12_response_golden():
    # MetadataResponse v12, from MetadataResponse.json: header v1 (correlation id + tags), throttle,
    # brokers [node, host, port, rack], cluster id, controller, topics [error, name, topic id,
    # internal, partitions [...], authorized ops], tags
    req = Request(3, 12, 2, "c", None, 0)
    wire = encode_response_bytes(req, {
        "throttle_time_ms": 0, "cluster_id": "cid", "controller_id": 1,
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "topics": [{"error_code": 0, "name": "t", "is_internal": False, "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 4,
             "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}]}]})
    body = ("00000000"  # throttle
            "02" "00000001" "0268" "00002384" "00" "00"  # 1 broker: id, "h", 9092, rack null, tags
            "04636964" "00000001"  # cluster id "cid", controller 1
            "02" "0000" "0274" + "00" * 16 + "00"  # 1 topic: error, "t", zero topic id, internal
            "02" "0000" "00000000" "00000001" "00000004" "0200000001" "0200000001" "01" "00"  # partition
            "80000000" "00"  # topic authorized operations (unknown), tags
            "00")  # top-level tags
    head = "00000002" "00"
    assert wire.hex() == f"{(len(head + body) // 2):08x}" + head + body


def test_fetch_v12_response_with_tagged_diverging_epoch_golden():
    req = Request(1, 12, 9, "c", None, 0)
    wire = encode_response_bytes(req, {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "partitions": [{
            "partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
            "log_start_offset": 0, "diverging_epoch": {"epoch": 2, "end_offset": 8},
            "aborted_transactions": None, "preferred_read_replica": -1, "records": b"R"}]}]})
    body = ("00000000" "0000" "00000000"  # throttle, error, session
            "02" "0274" "02"  # 1 topic "t", 1 partition
            "00000000" "0000" "000000000000000a" "000000000000000a" "0000000000000000"
            "00" "ffffffff" "0252"  # aborted null, preferred replica -1, records "R"
            "01" "00" "0d" "00000002" "0000000000000008" "00"  # tag 0: diverging epoch + its tags
            "00" "00")  # topic tags, top-level tags
    head = "00000009" "00"
    assert wire.hex() == f"{(len(head + body) // 2):08x}" + head + body
    back = M.Fetch.decode_response(12, wire, 9)
    p = back.responses[0].partitions[0]
    assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (2, 8) and p.current_leader is None


def test_client_connection_speaks_flexible_headers_both_ways():
    client = ClientConnection("me")
    cid, frame = client.send_request(3, 12, {"topics": None, "allow_auto_topic_creation": False})
    server = ServerConnection()
    server.receive_data(frame)
    ev = server.next_event()
    assert ev.api_version == 12 and ev.body.topics is None and ev.client_id == "me"
    # request header v2: a 00 tagged-field byte after the client id
    assert frame[14:16] == b"me" and frame[16] == 0
    client.receive_data(encode_response_bytes(ev, {"cluster_id": "c", "brokers": [], "topics": []}))
    resp = client.next_event()
    assert resp.correlation_id == cid and resp.body.cluster_id == "c"


def test_flexible_requests_may_carry_trailing_bytes_non_flexible_may_not():
    flex = encode_request_frame(12, 4, 1, "c", {"group_id": "g", "generation_id": 1, "member_id": "m"})
    old = encode_request_frame(12, 3, 2, "c", {"group_id": "g", "generation_id": 1, "member_id": "m"})
    server = ServerConnection()
    server.receive_data(struct.pack(">i", len(flex) - 4 + 2) + flex[4:] + b"xy")
    assert server.next_event().body.group_id == "g"
    server.receive_data(struct.pack(">i", len(old) - 4 + 2) + old[4:] + b"xy")
    with pytest.raises(Exception, match="trailing"):
        server.next_event()
