"""Schema declaration checks and round trips of every message of every version."""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.errors import UnsupportedVersionError
from appliance.protocol import messages as M
from appliance.protocol.errors import ProtocolDecodeError, ProtocolEncodeError
from appliance.protocol.registry import API_BY_KEY, SUPPORTED_VERSIONS, api_versions_entries
from appliance.protocol.schema import ApiMessage, Field, SchemaError, Struct, parse_versions
from appliance.protocol.types import Array, Int16, Int32, Records, String
from tests.protocol.schema_values import message_strategy, normalize, project, walk_versions

# up to what Kafka 3.x serves where our model holds the fields (flexible versions included)
ADVERTISED = {
    0: (0, 9), 1: (0, 15), 2: (0, 8), 3: (0, 12), 8: (0, 8), 9: (0, 8), 10: (0, 4), 11: (0, 9),
    12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 4), 18: (0, 3), 19: (0, 7), 20: (0, 6),
    22: (0, 4), 32: (0, 4), 33: (0, 2), 35: (0, 4), 37: (0, 3), 42: (0, 2), 44: (0, 1),
    47: (0, 0),
    21: (0, 2), 34: (0, 2),
    43: (0, 1), 45: (0, 1), 46: (0, 0),
    60: (0, 1), 61: (0, 0),
    17: (0, 1), 36: (0, 2), 50: (0, 0), 51: (0, 0), 29: (0, 3), 30: (0, 3), 31: (0, 3),
    24: (0, 3), 25: (0, 3), 26: (0, 3), 28: (0, 3),  # transactions (before KIP-890)
    27: (0, 1),
    65: (0, 0), 66: (0, 1),  # KIP-664's DescribeTransactions, ListTransactions (v1: KIP-994)
}
# Kafka's flexibleVersions of each (None: none)
FLEXIBLE_FROM = {0: 9, 1: 12, 2: 6, 3: 9, 8: 8, 9: 6, 10: 3, 11: 6, 12: 4, 13: 4, 14: 4, 15: 5,
                 16: 3, 18: 3, 19: 5, 20: 4, 21: 2, 22: 2, 32: 4, 33: 2, 34: 2, 35: 2, 37: 2,
                 42: 2, 43: 2, 44: 1, 45: 0, 46: 0, 47: None, 60: 0, 61: 0,
                 17: None, 36: 2, 50: 0, 51: 0, 29: 2, 30: 2, 31: 2, 24: 3, 25: 3, 26: 3, 28: 3, 27: 1,
                 65: 0, 66: 0}


def test_registry_advertises_exactly_the_agreed_ranges():
    assert SUPPORTED_VERSIONS == dict(sorted(ADVERTISED.items()))
    assert all(API_BY_KEY[k].API_KEY == k for k in ADVERTISED)
    entries = api_versions_entries()
    assert [(e.api_key, e.min_version, e.max_version) for e in entries] == [
        (k, lo, hi) for k, (lo, hi) in sorted(ADVERTISED.items())]


@pytest.mark.parametrize("spec,expected", [("0+", (0, 0x7FFF)), ("3", (3, 3)), ("2-7", (2, 7))])
def test_parse_versions(spec, expected):
    assert parse_versions(spec) == expected


@pytest.mark.parametrize("spec", ["", "x", "3-1", "-1", "1+2"])
def test_parse_versions_rejects(spec):
    with pytest.raises(SchemaError):
        parse_versions(spec)


def test_duplicate_field_name_is_rejected():
    with pytest.raises(SchemaError, match="duplicate"):
        class Bad(ApiMessage):
            API_KEY, MIN_VERSION, MAX_VERSION = 999, 0, 1
            REQUEST = (Field("a", Int32), Field("a", Int16))


def test_duplicate_nested_field_name_is_rejected():
    with pytest.raises(SchemaError, match="duplicate"):
        Struct(Field("x", String), Field("x", String))


def test_field_versions_outside_message_range_are_rejected():
    with pytest.raises(SchemaError, match="outside"):
        class Bad(ApiMessage):
            API_KEY, MIN_VERSION, MAX_VERSION = 999, 0, 3
            REQUEST = (Field("a", Int32, versions="4+"),)
    with pytest.raises(SchemaError, match="outside"):
        class Bad2(ApiMessage):
            API_KEY, MIN_VERSION, MAX_VERSION = 999, 3, 5
            RESPONSE = (Field("t", Array(Struct(Field("b", Int32, versions="0-2")))),)


def test_nullable_versions_must_lie_inside_field_versions():
    with pytest.raises(SchemaError, match="nullable"):
        Field("a", String, versions="2+", nullable="1+")


def test_bad_message_range_is_rejected():
    with pytest.raises(SchemaError):
        class Bad(ApiMessage):
            API_KEY, MIN_VERSION, MAX_VERSION = 999, 3, 2


def test_flexible_versions_are_kafkas():
    for key, api in API_BY_KEY.items():
        lo = FLEXIBLE_FROM[key]
        assert api.FLEX_LO == (0x8000 if lo is None else lo), api.__name__


def _every_message() -> list[type[ApiMessage]]:
    """Every ApiMessage declared in appliance.protocol.messages, inter-broker ones included."""
    found: dict[str, type[ApiMessage]] = {}
    for mod in pkgutil.iter_modules(M.__path__, M.__name__ + "."):
        for obj in vars(importlib.import_module(mod.name)).values():
            if isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage:
                found[obj.__qualname__] = obj
    return sorted(found.values(), key=lambda c: (c.API_KEY, c.__name__))


@pytest.mark.parametrize("api", _every_message(), ids=lambda c: c.__name__)
def test_every_codec_of_every_message_compiles(api):
    # codecs compile on first use: a declaration the compiler cannot handle fails here, not
    # first in a broker the day a client speaks that version
    api.compile_codecs()
    for s in (api._request_struct, api._response_struct):
        assert sorted(s._decoders) == sorted(s._encoders) == list(range(api.MIN_VERSION, api.MAX_VERSION + 1))


def test_importing_the_messages_compiles_no_codec():
    code = ("import appliance.protocol.messages.cluster, appliance.protocol.registry\n"
            "from appliance.protocol.schema import ApiMessage\n"
            "def subs(c):\n"
            "    for s in c.__subclasses__():\n"
            "        yield s\n"
            "        yield from subs(s)\n"
            "print(sum(len(x._decoders) + len(x._encoders) for a in subs(ApiMessage)\n"
            "          for x in (a._request_struct, a._response_struct)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "0"


def test_a_codec_compiles_once_on_first_use_and_is_reused():
    class Lazy(ApiMessage):
        API_KEY, MIN_VERSION, MAX_VERSION = 999, 0, 3
        REQUEST = (Field("a", Int32), Field("b", String, versions="2+"))

    s = Lazy._request_struct
    assert s._decoders == {} and s._encoders == {}
    wire = Lazy.encode_request(2, {"a": 1, "b": "x"})
    assert list(s._encoders) == [2] and s._decoders == {}
    enc = s.encoder(2)
    assert Lazy.decode_request(2, wire) == Lazy.Request(a=1, b="x")
    assert list(s._decoders) == [2] and s.encoder(2) is enc
    with pytest.raises(KeyError):
        s.decoder(4)  # outside the declared range: nothing is compiled for it
    assert list(s._decoders) == [2]


def test_threads_racing_to_a_cold_codec_all_decode_correctly():
    class Raced(ApiMessage):
        API_KEY, MIN_VERSION, MAX_VERSION = 999, 0, 0
        REQUEST = (Field("a", Int32), Field("b", Array(Struct(Field("c", String)))))

    wire = b"\x00\x00\x00\x07\x00\x00\x00\x01\x00\x01z"
    start = threading.Barrier(8)

    def work() -> object:
        start.wait()
        return Raced.decode_request(0, wire)

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: work(), range(8)))
    assert all(g == got[0] for g in got) and got[0].a == 7 and got[0].b[0].c == "z"


def test_declaration_slips_a_codec_would_meet_are_refused_at_import():
    with pytest.raises(SchemaError, match="nullable variant"):
        Field("a", Int32, nullable=True)
    with pytest.raises(SchemaError, match="nullable variant"):
        Field("a", Int16, versions="1+", nullable="2+")
    with pytest.raises(SchemaError, match="neither a wire type nor a Struct"):
        class Bad(ApiMessage):
            API_KEY, MIN_VERSION, MAX_VERSION = 999, 0, 1
            REQUEST = (Field("a", Array(int), default=()),)
    with pytest.raises(SchemaError, match="tagged in non-flexible"):
        class Bad2(ApiMessage):
            API_KEY, MIN_VERSION, MAX_VERSION, FLEXIBLE = 999, 0, 3, "2+"
            REQUEST = (Field("a", Int32, versions="1+", tag=0),)


def test_unsupported_version_raises():
    with pytest.raises(UnsupportedVersionError):
        M.Produce.decode_request(10, b"")
    with pytest.raises(UnsupportedVersionError):
        M.Fetch.encode_response(16, {})


def test_decoded_objects_hold_every_field_with_defaults():
    wire = M.Fetch.encode_request(4, {"max_wait_ms": 500, "min_bytes": 1, "topics": [
        {"topic": "t", "partitions": [{"partition": 3, "fetch_offset": 42, "partition_max_bytes": 9}]}]})
    req = M.Fetch.decode_request(4, wire)
    assert req.replica_id == -1 and req.max_bytes == 0x7FFFFFFF  # declared defaults
    assert req.session_epoch == -1 and req.forgotten_topics_data == [] and req.rack_id == ""
    p = req.topics[0].partitions[0]
    assert (p.partition, p.fetch_offset, p.log_start_offset, p.current_leader_epoch) == (3, 42, -1, -1)
    assert type(p) is M.Fetch.Request.Topics.Partitions
    # fresh mutable defaults per instance
    a, b = M.Fetch.Request(), M.Fetch.Request()
    a.topics.append(1)
    assert b.topics == []


def test_objects_and_dicts_encode_identically():
    obj = M.Produce.Request(acks=1, timeout_ms=100, topic_data=[
        M.Produce.Request.TopicData(name="t", partition_data=[
            M.Produce.Request.TopicData.PartitionData(index=2, records=b"xyz")])])
    as_dict = {"acks": 1, "timeout_ms": 100, "topic_data": [
        {"name": "t", "partition_data": [{"index": 2, "records": b"xyz"}]}]}
    for v in range(3, 8):
        assert M.Produce.encode_request(v, obj) == M.Produce.encode_request(v, as_dict)
        assert M.Produce.decode_request(v, M.Produce.encode_request(v, obj)) == obj


def test_encoding_drops_fields_the_version_lacks():
    body = {"throttle_time_ms": 7, "error_code": 0, "api_keys": []}
    assert M.ApiVersions.encode_response(0, body) == b"\x00\x00\x00\x00\x00\x00"
    assert M.ApiVersions.encode_response(1, body) == b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x07"


def test_version_dependent_nullability():
    # OffsetFetch topics: null allowed from v2 (= all partitions), not in v1
    assert M.OffsetFetch.encode_request(2, {"group_id": "g", "topics": None}).endswith(b"\xff\xff\xff\xff")
    with pytest.raises(ProtocolEncodeError):
        M.OffsetFetch.encode_request(1, {"group_id": "g", "topics": None})
    with pytest.raises(ProtocolDecodeError):
        M.OffsetFetch.decode_request(1, b"\x00\x01g\xff\xff\xff\xff")
    assert M.OffsetFetch.decode_request(2, b"\x00\x01g\xff\xff\xff\xff").topics is None


def test_trailing_bytes_are_rejected():
    wire = M.Heartbeat.encode_request(0, {"group_id": "g", "generation_id": 1, "member_id": "m"})
    with pytest.raises(ProtocolDecodeError, match="trailing"):
        M.Heartbeat.decode_request(0, wire + b"\x00")


def test_truncated_body_is_a_decode_error_at_every_cut():
    wire = M.Metadata.encode_response(4, {"brokers": [{"node_id": 1, "host": "h", "port": 9092}],
                                          "cluster_id": "c", "topics": [{"name": "t", "partitions": [
                                              {"partition_index": 0, "replica_nodes": [1], "isr_nodes": [1]}]}]})
    for cut in range(len(wire)):
        with pytest.raises(ProtocolDecodeError):
            M.Metadata.decode_response(4, wire[:cut])


def test_encode_errors_name_the_message():
    with pytest.raises(ProtocolEncodeError, match="Produce request v7"):
        M.Produce.encode_request(7, {"acks": 1 << 20})
    with pytest.raises(ProtocolEncodeError):
        M.Produce.encode_request(7, {"topic_data": [None]})
    with pytest.raises(ProtocolEncodeError):
        M.Produce.encode_request(7, None)


def test_records_decode_without_copy():
    wire = M.Produce.encode_request(3, {"acks": -1, "timeout_ms": 1, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"R" * 100}]}]})
    buf = bytearray(wire)
    req = M.Produce.decode_request(3, memoryview(buf))
    rec = req.topic_data[0].partition_data[0].records
    assert isinstance(rec, memoryview) and rec.obj is buf


@pytest.mark.parametrize("api,kind,v", walk_versions(),
                         ids=lambda x: getattr(x, "__name__", str(x)))
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_round_trip_every_message_every_version(api, kind, v, data):
    value = data.draw(message_strategy(api, kind, v))
    enc = api.encode_request if kind == "request" else api.encode_response
    dec = api.decode_request if kind == "request" else api.decode_response
    struct_ = api._request_struct if kind == "request" else api._response_struct
    wire = enc(v, value)
    decoded = dec(v, wire)
    assert project(normalize(decoded), struct_, v) == normalize(value)
    assert enc(v, decoded) == wire  # decoded objects re-encode to the same bytes


def test_records_none_and_empty_differ():
    for records, tail in ((None, b"\xff\xff\xff\xff"), (b"", b"\x00\x00\x00\x00")):
        wire = M.Produce.encode_request(3, {"topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": records}]}]})
        assert wire.endswith(tail)
    assert Records.nullable


def test_misspelled_key_is_refused_naming_it():
    # a misspelling must not silently send the field's default
    good = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "base_offset": 5}]}]}
    M.Produce.encode_response(7, good)
    bad = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "base_ofset": 5}]}]}
    with pytest.raises(ProtocolEncodeError, match=r"Produce\.Response\.Responses\.PartitionResponses v7: "
                                                  r"unknown field\(s\) 'base_ofset'"):
        M.Produce.encode_response(7, bad)
    with pytest.raises(ProtocolEncodeError, match="'throttle_ms'"):
        M.Produce.encode_response(7, {"throttle_ms": 0, "responses": []})
    # a field of another version of the message is not a misspelling: it is left out
    assert M.Produce.encode_response(0, good) == M.Produce.encode_response(
        0, {"responses": [{"name": "t", "partition_responses": [
            {"index": 0, "base_offset": 5, "log_start_offset": 9}]}], "throttle_time_ms": 3})
