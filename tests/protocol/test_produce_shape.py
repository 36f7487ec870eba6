"""The produce fast path's reader and answer templates against the generic codec: the same
fields read from every accepted request, byte-identical answers for every version, None (never
an exception) for anything else."""

from __future__ import annotations

import random
import struct

import pytest

import appliance.protocol as proto
from appliance.protocol.frames import parse_request_header
from appliance.protocol.messages import Produce
from appliance.protocol.produce_shape import (
    FLEXIBLE_FROM,
    MAX_VERSION,
    MIN_VERSION,
    answer_template,
    parse_produce,
)
from appliance.records.batch import build_batch

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)


def _body(topic="t", index=0, records=b"", acks=1, tid=None, timeout_ms=30000, topics=1,
          partitions=1) -> dict:
    return {"transactional_id": tid, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": index + i, "records": records} for i in range(partitions)]}
                for _ in range(topics)]}


def _frame(version: int, body: dict, correlation_id: int = 7, client_id: str | None = "c") -> bytes:
    """The request's payload (size prefix cut off, as the fast path gets it)."""
    return proto.encode_request_frame(0, version, correlation_id, client_id, body)[4:]


def test_the_versions_match_the_schema():
    assert MAX_VERSION == Produce.MAX_VERSION
    assert Produce.is_flexible(FLEXIBLE_FROM) and not Produce.is_flexible(FLEXIBLE_FROM - 1)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id,tid,topic,values", [
    ("c", None, "t", 1),
    (None, "tx-1", "tópic.with-ü", 3),
    ("a" * 300, "", "x" * 249, 40),  # a long client id; records > 127 bytes (2-byte varint)
])
def test_reads_what_the_generic_decoder_reads(version, client_id, tid, topic, values):
    records = build_batch([(b"k%d" % i, b"v" * i) for i in range(values)])
    for acks, index, corr in [(1, 0, 0), (-1, 7, 2**31 - 1), (0, 2**31 - 1, -5)]:
        frame = _frame(version, _body(topic, index, records, acks, tid, 1234), corr, client_id)
        got = parse_produce(frame)
        body = Produce.decode_request(version, frame, _body_offset(frame, version),
                                      trailing_ok=False)
        p = body.topic_data[0].partition_data[0]
        assert got is not None
        assert (got.api_version, got.correlation_id, got.acks, got.timeout_ms) == \
            (version, corr, body.acks, body.timeout_ms)
        assert (got.topic.decode(), got.partition) == (body.topic_data[0].name, p.index)
        assert bytes(got.records) == bytes(p.records) == records


def _body_offset(frame: bytes, version: int) -> int:
    _, _, _, _, pos = parse_request_header(frame)
    return pos + 1 if version >= FLEXIBLE_FROM else pos  # header v2: an empty tag section


@pytest.mark.parametrize("version", VERSIONS)
def test_answers_are_the_generic_encoders_bytes(version):
    class Request:
        api_key, api_version = 0, version
    rng = random.Random(version)
    for topic, partition in [("t", 0), ("tópic", 2**31 - 1), ("y" * 249, 5)]:
        template = answer_template(version, topic.encode(), partition)
        for _ in range(20):
            corr = rng.randrange(-2**31, 2**31)
            base, lat, log_start = (rng.choice([-1, 0, rng.randrange(2**63)]) for _ in range(3))
            Request.correlation_id = corr
            generic = b"".join(proto.encode_response(Request, {
                "throttle_time_ms": 0, "responses": [{"name": topic, "partition_responses": [{
                    "index": partition, "error_code": 0, "base_offset": base,
                    "log_append_time_ms": lat, "log_start_offset": log_start,
                    "record_errors": [], "error_message": None}]}]}))
            assert template.encode(corr, base, lat, log_start) == generic


def test_no_template_outside_its_versions():
    for version in (MIN_VERSION - 1, MAX_VERSION + 1):
        with pytest.raises(ValueError):
            answer_template(version, b"t", 0)


RECORDS = build_batch([(None, b"x" * 100)])


@pytest.mark.parametrize("frame,why", [
    (_frame(2, _body(records=RECORDS)), "v2: no transactional id"),
    (_frame(0, _body(records=RECORDS)), "v0"),
    (proto.encode_request_frame(3, 4, 7, "c", {"topics": None, "allow_auto_topic_creation": True,
                                                "include_cluster_authorized_operations": False,
                                                "include_topic_authorized_operations": False})[4:],
     "another API"),
    (_frame(7, _body(records=RECORDS, topics=2)), "two topics"),
    (_frame(7, _body(records=RECORDS, partitions=2)), "two partitions"),
    (_frame(9, _body(records=RECORDS, topics=2)), "two topics, flexible"),
    (_frame(9, _body(records=RECORDS, partitions=2)), "two partitions, flexible"),
    (_frame(7, _body(records=None)), "null records"),
    (_frame(9, _body(records=None)), "null records, flexible"),
    (_frame(7, _body(records=b"")), "empty records"),
    (_frame(9, _body(records=b"")), "empty records, flexible"),
    (_frame(7, _body(topic="", records=RECORDS)), "empty topic name"),
    (_frame(7, _body(records=RECORDS)) + b"\x00", "a trailing byte"),
    (_frame(9, _body(records=RECORDS)) + b"\x00", "a trailing byte, flexible"),
])
def test_other_shapes_are_left_to_the_generic_path(frame, why):
    assert parse_produce(frame) is None, why


def test_tagged_fields_are_left_to_the_generic_path():
    frame = bytearray(_frame(9, _body(records=RECORDS)))
    assert parse_produce(bytes(frame)) is not None
    _, _, _, _, pos = parse_request_header(frame)
    header_tagged = bytes(frame[:pos]) + b"\x01\x00\x00" + bytes(frame[pos + 1:])  # one empty tag
    assert parse_produce(header_tagged) is None
    body_tagged = bytes(frame[:-1]) + b"\x01\x00\x00"
    assert parse_produce(body_tagged) is None


@pytest.mark.parametrize("version", [3, 7, 8, 9])
def test_every_truncation_is_none(version):
    frame = _frame(version, _body(topic="topic", index=3, records=RECORDS, tid="tx"))
    for cut in range(len(frame)):
        assert parse_produce(frame[:cut]) is None


@pytest.mark.parametrize("version", [7, 9])
def test_damaged_requests_never_raise(version):
    """Random byte damage: the reader says None or reads a shape whose records lie inside the
    frame; never an exception (the generic path then gives the error)."""
    frame = _frame(version, _body(topic="topic", index=3, records=RECORDS, tid="tx"))
    rng = random.Random(version)
    for _ in range(3000):
        damaged = bytearray(frame)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(damaged))
            damaged[at] = rng.choice([0, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        got = parse_produce(bytes(damaged))
        if got is not None:
            assert 0 < len(got.records) < len(damaged)
            assert struct.unpack_from(">h", damaged, 0)[0] == 0
