"""Byte-for-byte agreement with kafka-python's own protocol code.

Two independent references: kafka-python 3's JSON-driven classes (generated from Kafka's
message JSON) for every API and version we advertise, and its older hand-written classes
(kafka.protocol.old) for the main APIs, including whole framed requests with headers.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol import api_message
from kafka.protocol.old import admin as old_admin
from kafka.protocol.old import api_versions as old_api_versions
from kafka.protocol.old import commit as old_commit
from kafka.protocol.old import fetch as old_fetch
from kafka.protocol.old import group as old_group
from kafka.protocol.old import list_offsets as old_list_offsets
from kafka.protocol.old import metadata as old_metadata
from kafka.protocol.old import produce as old_produce
from kafka.protocol.schemas.fields.codecs import BitField

from appliance.protocol import messages as M
from appliance.protocol.connection import ClientConnection, Request, ServerConnection
from appliance.protocol.frames import encode_request_frame, encode_response_bytes
from appliance.protocol.schema import Struct
from tests.protocol.schema_values import message_strategy, normalize, project, walk_versions


def _kp_classes() -> dict[tuple[int, str], type]:
    def subclasses(c):
        for s in c.__subclasses__():
            yield s
            yield from subclasses(s)
    found = {}
    for c in subclasses(api_message.ApiMessage):
        try:
            found.setdefault((c.API_KEY, c.type), c)
        except Exception:  # abstract intermediates without JSON
            continue
    return found


KP = _kp_classes()


def _is_bitfield(field) -> bool:
    # kafka-python presents Kafka's int32 "authorized operations" as a set of bit numbers
    return getattr(field, "_type", None) is BitField


def _to_bits(x: int) -> set[int] | None:
    bits = BitField.from_32_bit_field(x & 0xFFFFFFFF)
    return None if bits == {31} else bits


def _from_bits(bits: set[int] | None) -> int:
    n = BitField.to_32_bit_field({31} if bits is None else bits)
    return n - (1 << 32) if n >= 1 << 31 else n


# fields Kafka has renamed since kafka-python's copy of the JSON: ours -> theirs
_RENAMED = {"cluster_authorized_operations": "authorized_operations",
            "topic_authorized_operations": "authorized_operations",
            # AddPartitionsToTxn v0-3's fields, named for the versions before KIP-890's batch
            # (only looked up where a class lacks our name: InitProducerId keeps its own)
            "transactional_id": "v3_and_below_transactional_id",
            "producer_id": "v3_and_below_producer_id",
            "producer_epoch": "v3_and_below_producer_epoch",
            "topics": "v3_and_below_topics"}


def _is_uuid(field) -> bool:
    return getattr(field, "_type_str", None) == "uuid"


def to_kp(cls, v, value):
    kwargs = {}
    for name, x in value.items():
        name = name if name in cls._struct.fields else _RENAMED.get(name, name)
        field = cls._struct.fields[name]  # KeyError = a field name kafka-python does not know
        if x is not None and field.is_struct_array():
            x = [to_kp(field.data_class, v, e) for e in x]
        elif x is not None and field.is_struct():
            x = to_kp(field.data_class, v, x)
        elif _is_bitfield(field):
            x = _to_bits(x)
        elif _is_uuid(field):
            x = uuid.UUID(bytes=x)
        kwargs[name] = x
    return cls(version=v, **kwargs)


def _our_name(name: str, like: dict | None) -> str:
    if like is None or name in like:
        return name
    return next((k for k in like if _RENAMED.get(k) == name), name)


def from_kp(obj, v, like=None):
    """kafka-python's value as our plain dict (``like``: our value, to undo renames)."""
    out = {}
    for name, field in type(obj)._struct.fields.items():
        if not field.for_version_q(v):
            continue
        if field.tagged_field_q(v) and like is not None and _our_name(field.name, like) not in like:
            continue  # a tagged field we do not declare (ApiVersions' features): never sent
        x = getattr(obj, name)
        ours = _our_name(name, like)
        sub = like.get(ours) if like is not None else None
        if x is not None and field.is_struct_array():
            x = [from_kp(e, v, sub[i] if sub and i < len(sub) else None) for i, e in enumerate(x)]
        elif x is not None and field.is_struct():
            x = from_kp(x, v, sub)
        elif _is_bitfield(field):
            x = _from_bits(x)
        elif _is_uuid(field):
            x = x.bytes if x is not None else bytes(16)  # kafka-python reads the zero UUID as None
        out[ours] = x
    return out


@pytest.mark.parametrize("api,kind,v", walk_versions(), ids=lambda x: getattr(x, "__name__", str(x)))
@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_same_bytes_as_kafka_python_json_classes(api, kind, v, data):
    kp_cls = KP[(api.API_KEY, kind)]
    assert kp_cls.flexible_version_q(v) == api.is_flexible(v), "flexible versions as Kafka's"
    value = data.draw(message_strategy(api, kind, v))
    if api is M.ApiVersions and kind == "response":
        # kafka-python reads any ApiVersions response with an error as v0 (the fallback
        # layout); our broker only sends errors in that layout, so test success here.
        value["error_code"] = 0
    ours = (api.encode_request if kind == "request" else api.encode_response)(v, value)
    theirs = to_kp(kp_cls, v, value).encode(version=v)
    assert ours == theirs
    assert normalize(from_kp(kp_cls.decode(ours, version=v), v, value)) == normalize(value)


def _inter_broker_versions():
    from appliance.protocol.messages.cluster import OffsetsForLeaderEpoch as api

    return [(api, kind, v) for kind in ("request", "response")
            for v in range(api.MIN_VERSION, api.MAX_VERSION + 1)]


@pytest.mark.parametrize("api,kind,v", _inter_broker_versions(), ids=lambda x: getattr(x, "__name__", str(x)))
@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_inter_broker_apis_kafka_python_knows_agree(api, kind, v, data):
    """OffsetsForLeaderEpoch (v4 flexible), which kafka-python also speaks."""
    test_same_bytes_as_kafka_python_json_classes.hypothesis.inner_test(api, kind, v, data)


# --- the hand-written (old) classes -------------------------------------------------------

def positional(value, s: Struct, v: int):
    """Our dict as the nested positional tuples the old classes take (schema order)."""
    out = []
    for f in s.fields:
        if not f.in_version(v):
            continue
        x = value[f.name]
        t = f.type_for(v)
        sub = getattr(t, "element", None)
        if isinstance(sub, Struct) and x is not None:
            x = [tuple(positional(e, sub, v)) for e in x]
        out.append(x)
    return out


PRODUCE_REQ = {"transactional_id": "tx", "acks": -1, "timeout_ms": 30000, "topic_data": [
    {"name": "orders", "partition_data": [{"index": 0, "records": b"\x01" * 70},
                                          {"index": 5, "records": b"batch"}]},
    {"name": "t2", "partition_data": []}]}
PRODUCE_RESP = {"responses": [{"name": "orders", "partition_responses": [
    {"index": 0, "error_code": 0, "base_offset": 1234, "log_append_time_ms": -1, "log_start_offset": 7}]}],
    "throttle_time_ms": 3}
FETCH_REQ = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800,
             "isolation_level": 1, "session_id": 0, "session_epoch": -1, "topics": [
                 {"topic": "orders", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                     "fetch_offset": 99, "log_start_offset": -1,
                                                     "partition_max_bytes": 1048576}]}],
             "forgotten_topics_data": [{"topic": "old", "partitions": [1, 2]}], "rack_id": "r1"}
FETCH_RESP = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
    {"topic": "orders", "partitions": [{"partition_index": 0, "error_code": 0, "high_watermark": 100,
                                        "last_stable_offset": 100, "log_start_offset": 0,
                                        "aborted_transactions": [{"producer_id": 4, "first_offset": 9}],
                                        "preferred_read_replica": -1, "records": b"RECORDS"}]}]}
METADATA_REQ = {"topics": [{"name": "a"}, {"name": "b"}], "allow_auto_topic_creation": False}
METADATA_RESP = {"throttle_time_ms": 0, "brokers": [{"node_id": 0, "host": "localhost", "port": 9092,
                                                      "rack": None}],
                 "cluster_id": "cid", "controller_id": 0, "topics": [
                     {"error_code": 0, "name": "a", "is_internal": False, "partitions": [
                         {"error_code": 0, "partition_index": 0, "leader_id": 0, "replica_nodes": [0],
                          "isr_nodes": [0]}]}]}
APIV_RESP = {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 7}],
             "throttle_time_ms": 0}
LIST_OFFSETS_REQ = {"replica_id": -1, "isolation_level": 0, "topics": [
    {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
LIST_OFFSETS_RESP = {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
    {"partition_index": 0, "error_code": 0, "timestamp": -1, "offset": 42}]}]}
CREATE_TOPICS_REQ = {"topics": [{"name": "new", "num_partitions": 3, "replication_factor": 1,
                                 "assignments": [], "configs": [{"name": "retention.ms", "value": "1000"},
                                                                {"name": "x", "value": None}]}],
                     "timeout_ms": 1000, "validate_only": False}
CREATE_TOPICS_RESP = {"throttle_time_ms": 0, "topics": [{"name": "new", "error_code": 36,
                                                          "error_message": "exists"}]}
JOIN_REQ = {"group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 300000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x01meta"}]}
JOIN_RESP = {"throttle_time_ms": 0, "error_code": 0, "generation_id": 1, "protocol_name": "range",
             "leader": "m1", "member_id": "m1", "members": [
                 {"member_id": "m1", "group_instance_id": None, "metadata": b"md"}]}
COMMIT_REQ = {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m1",
              "retention_time_ms": -1, "topics": [{"name": "t", "partitions": [
                  {"partition_index": 0, "committed_offset": 77, "committed_metadata": ""}]}]}
COMMIT_RESP = {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
    {"partition_index": 0, "error_code": 0}]}]}

OLD_CASES = [
    (M.Produce, old_produce.ProduceRequest, old_produce.ProduceResponse, PRODUCE_REQ, PRODUCE_RESP, (3, 5, 7)),
    (M.Fetch, old_fetch.FetchRequest, old_fetch.FetchResponse, FETCH_REQ, FETCH_RESP, (4, 7, 11)),
    (M.Metadata, old_metadata.MetadataRequest, old_metadata.MetadataResponse,
     METADATA_REQ, METADATA_RESP, (1, 2, 4)),
    (M.ApiVersions, old_api_versions.ApiVersionsRequest, old_api_versions.ApiVersionsResponse,
     {}, APIV_RESP, (0, 1, 2)),
    (M.ListOffsets, old_list_offsets.ListOffsetsRequest, old_list_offsets.ListOffsetsResponse,
     LIST_OFFSETS_REQ, LIST_OFFSETS_RESP, (1, 2)),
    (M.CreateTopics, old_admin.CreateTopicsRequest, old_admin.CreateTopicsResponse,
     CREATE_TOPICS_REQ, CREATE_TOPICS_RESP, (2, 3)),
    (M.JoinGroup, old_group.JoinGroupRequest, old_group.JoinGroupResponse, JOIN_REQ, JOIN_RESP, (0, 2, 5)),
    (M.OffsetCommit, old_commit.OffsetCommitRequest, old_commit.OffsetCommitResponse,
     COMMIT_REQ, COMMIT_RESP, (2, 3)),
]
OLD_PARAMS = [(api, oreq[v], oresp[v], req, resp, v)
              for api, oreq, oresp, req, resp, versions in OLD_CASES for v in versions]


@pytest.mark.parametrize("api,old_req,old_resp,req,resp,v", OLD_PARAMS,
                         ids=[f"{p[0].__name__}-v{p[5]}" for p in OLD_PARAMS])
def test_same_bytes_as_kafka_python_old_classes(api, old_req, old_resp, req, resp, v):
    # request: their framed request (header v1, client id) == ours, and our server decodes it
    args = positional(req, api._request_struct, v)
    if api is M.Metadata:
        # the old class declares topics as Array(String); Kafka's JSON as an array of
        # {name} structs: the same bytes on the wire
        args[0] = [name for (name,) in args[0]]
    theirs = old_req(*args)
    theirs.with_header(correlation_id=17, client_id="kafka-python")
    frame = theirs.encode(header=True, framed=True)
    assert encode_request_frame(api.API_KEY, v, 17, "kafka-python", req) == frame
    server = ServerConnection()
    server.receive_data(frame)
    event = server.next_event()
    assert isinstance(event, Request)
    assert (event.api_key, event.api_version, event.correlation_id, event.client_id) == (
        api.API_KEY, v, 17, "kafka-python")
    assert project(normalize(event.body), api._request_struct, v) == project(req, api._request_struct, v)

    # response: our body == theirs, and they decode ours to the same tuple
    ours = encode_response_bytes(event, resp)
    their_resp = old_resp(*positional(resp, api._response_struct, v))
    their_resp.with_header(correlation_id=17)
    assert ours == their_resp.encode(header=True, framed=True)
    assert old_resp.decode(ours[8:]).encode() == ours[8:]

    # and our client decodes their response frame
    client = ClientConnection(client_id="kafka-python")
    client._next_correlation_id = 17
    cid, wire = client.send_request(api.API_KEY, v, req)
    assert (cid, wire) == (17, frame)
    client.receive_data(their_resp.encode(header=True, framed=True))
    got = client.next_event()
    assert got.correlation_id == 17
    assert project(normalize(got.body), api._response_struct, v) == project(resp, api._response_struct, v)


def test_kafka_python_api_versions_v4_gets_a_fallback_it_understands():
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    from appliance.protocol.connection import UnsupportedVersion
    from appliance.protocol.registry import SUPPORTED_VERSIONS

    req = ApiVersionsRequest(version=4, client_software_name="kafka-python", client_software_version="3.0")
    req.with_header(correlation_id=11, client_id="kp")
    server = ServerConnection()
    server.receive_data(req.encode(header=True, framed=True))  # flexible header v2 + compact body
    ev = server.next_event()
    assert isinstance(ev, UnsupportedVersion) and not ev.close_connection and ev.client_id == "kp"
    resp = ApiVersionsResponse.decode(ev.response[4:], version=4, header=True)
    assert resp.header.correlation_id == 11 and resp.error_code == 35
    assert {(k.api_key, k.min_version, k.max_version) for k in resp.api_keys} == {
        (k, lo, hi) for k, (lo, hi) in SUPPORTED_VERSIONS.items()}
