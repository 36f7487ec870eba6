"""The inter-broker API schemas: golden bytes written down field by field from Kafka's published
schemas (clients/src/main/resources/common/message/*.json), property round trips of every
version, truncation, and that standalone brokers do not advertise them."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.protocol.errors import ProtocolDecodeError
from appliance.protocol.messages import (
    AlterPartitionReassignments,
    ElectLeaders,
    ListPartitionReassignments,
)
from appliance.protocol.messages.cluster import (
    INTER_BROKER_APIS,
    ControlledShutdown,
    LeaderAndIsr,
    OffsetsForLeaderEpoch,
    StopReplica,
    UpdateMetadata,
)
from appliance.protocol.registry import SUPPORTED_VERSIONS, inter_broker_api_for_key
from tests.protocol.schema_values import message_strategy, normalize, project

T = "0001" "74"          # STRING "t"
H = "0001" "68"          # STRING "h"
PLAINTEXT = "0009" + b"PLAINTEXT".hex()
P9092 = "00002384"
NO_EPOCH = "ffffffffffffffff"  # broker_epoch -1


def i32s(*xs: int) -> str:
    """An ARRAY of INT32: count, then the values."""
    return f"{len(xs):08x}" + "".join(f"{x & 0xFFFFFFFF:08x}" for x in xs)


GOLDEN = [
    # --- LeaderAndIsr ---
    (LeaderAndIsr, "request", 1, {
        "controller_id": 1, "controller_epoch": 2,
        "ungrouped_partition_states": [{"topic_name": "t", "partition_index": 0, "controller_epoch": 2,
                                        "leader": 1, "leader_epoch": 4, "isr": [1, 2], "zk_version": 7,
                                        "replicas": [1, 2], "is_new": True}],
        "live_leaders": [{"broker_id": 1, "host_name": "h", "port": 9092}]},
     "00000001" "00000002"
     "00000001" + T + "00000000" "00000002" "00000001" "00000004" + i32s(1, 2) + "00000007" + i32s(1, 2) + "01"
     "00000001" "00000001" + H + P9092),
    (LeaderAndIsr, "request", 3, {
        "controller_id": 1, "controller_epoch": 2, "broker_epoch": -1,
        "topic_states": [{"topic_name": "t", "partition_states": [
            {"partition_index": 0, "controller_epoch": 2, "leader": 1, "leader_epoch": 4, "isr": [1, 2],
             "zk_version": 7, "replicas": [1, 2, 3], "adding_replicas": [3], "removing_replicas": [],
             "is_new": False}]}],
        "live_leaders": []},
     "00000001" "00000002" + NO_EPOCH +
     "00000001" + T + "00000001" "00000000" "00000002" "00000001" "00000004" + i32s(1, 2) + "00000007"
     + i32s(1, 2, 3) + i32s(3) + i32s() + "00" "00000000"),
    (LeaderAndIsr, "response", 3, {"error_code": 0, "partition_errors": [
        {"topic_name": "t", "partition_index": 2, "error_code": 11}]},
     "0000" "00000001" + T + "00000002" "000b"),
    # --- StopReplica ---
    (StopReplica, "request", 0, {"controller_id": 1, "controller_epoch": 3, "delete_partitions": True,
                                 "ungrouped_partitions": [{"topic_name": "t", "partition_index": 0}]},
     "00000001" "00000003" "01" "00000001" + T + "00000000"),
    (StopReplica, "request", 1, {"controller_id": 1, "controller_epoch": 3, "broker_epoch": -1,
                                 "delete_partitions": True,
                                 "topics": [{"name": "t", "partition_indexes": [0, 2]}]},
     "00000001" "00000003" + NO_EPOCH + "01" "00000001" + T + i32s(0, 2)),
    # --- UpdateMetadata ---
    (UpdateMetadata, "request", 0, {
        "controller_id": 1, "controller_epoch": 2,
        "ungrouped_partition_states": [{"topic_name": "t", "partition_index": 0, "controller_epoch": 2,
                                        "leader": 1, "leader_epoch": 0, "isr": [1], "zk_version": 0,
                                        "replicas": [1]}],
        "live_brokers": [{"id": 1, "v0_host": "h", "v0_port": 9092}]},
     "00000001" "00000002"
     "00000001" + T + "00000000" "00000002" "00000001" "00000000" + i32s(1) + "00000000" + i32s(1) +
     "00000001" "00000001" + H + P9092),
    (UpdateMetadata, "request", 5, {
        "controller_id": 1, "controller_epoch": 2, "broker_epoch": -1,
        "topic_states": [{"topic_name": "t", "partition_states": [
            {"partition_index": 0, "controller_epoch": 2, "leader": 1, "leader_epoch": 0, "isr": [1],
             "zk_version": 0, "replicas": [1], "offline_replicas": []}]}],
        "live_brokers": [{"id": 1, "endpoints": [{"port": 9092, "host": "h", "listener": "PLAINTEXT",
                                                  "security_protocol": 0}], "rack": None}]},
     "00000001" "00000002" + NO_EPOCH +
     "00000001" + T + "00000001" "00000000" "00000002" "00000001" "00000000" + i32s(1) + "00000000"
     + i32s(1) + i32s() +
     "00000001" "00000001" "00000001" + P9092 + H + PLAINTEXT + "0000" "ffff"),
    (UpdateMetadata, "response", 5, {"error_code": 11}, "000b"),
    # --- ControlledShutdown ---
    (ControlledShutdown, "request", 1, {"broker_id": 2}, "00000002"),
    (ControlledShutdown, "request", 2, {"broker_id": 2, "broker_epoch": 37}, "00000002" "0000000000000025"),
    (ControlledShutdown, "response", 1, {"error_code": 0, "remaining_partitions": [
        {"topic_name": "t", "partition_index": 3}]},
     "0000" "00000001" + T + "00000003"),
    # --- OffsetsForLeaderEpoch ---
    (OffsetsForLeaderEpoch, "request", 0, {"topics": [{"topic": "t", "partitions": [
        {"partition": 0, "leader_epoch": 5}]}]},
     "00000001" + T + "00000001" "00000000" "00000005"),
    (OffsetsForLeaderEpoch, "request", 3, {"replica_id": 1, "topics": [{"topic": "t", "partitions": [
        {"partition": 0, "current_leader_epoch": 6, "leader_epoch": 5}]}]},
     "00000001" "00000001" + T + "00000001" "00000000" "00000006" "00000005"),
    (OffsetsForLeaderEpoch, "response", 0, {"topics": [{"topic": "t", "partitions": [
        {"error_code": 0, "partition": 0, "end_offset": 100}]}]},
     "00000001" + T + "00000001" "0000" "00000000" "0000000000000064"),
    (OffsetsForLeaderEpoch, "response", 2, {"throttle_time_ms": 0, "topics": [{"topic": "t", "partitions": [
        {"error_code": 0, "partition": 0, "leader_epoch": 5, "end_offset": 100}]}]},
     "00000000" "00000001" + T + "00000001" "0000" "00000000" "00000005" "0000000000000064"),
    # --- ElectLeaders ---
    (ElectLeaders, "request", 0, {"topic_partitions": None, "timeout_ms": 60000}, "ffffffff" "0000ea60"),
    (ElectLeaders, "request", 1, {"election_type": 1, "topic_partitions": [
        {"topic": "t", "partitions": [0, 1]}], "timeout_ms": 1000},
     "01" "00000001" + T + i32s(0, 1) + "000003e8"),
    (ElectLeaders, "response", 1, {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": [
        {"topic": "t", "partition_result": [{"partition_id": 0, "error_code": 84, "error_message": None}]}]},
     "00000000" "0000" "00000001" + T + "00000001" "00000000" "0054" "ffff"),
    # --- AlterPartitionReassignments / ListPartitionReassignments (flexible from v0): the bytes
    # kafka-python 3.0.12 encodes for the same values (a null replica list = cancel) ---
    (AlterPartitionReassignments, "request", 0, {"timeout_ms": 1000, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "replicas": [1, 2]}, {"partition_index": 1, "replicas": None}]}]},
     "000003e8" "02" "0274" "03" "00000000" "03" "00000001" "00000002" "00" "00000001" "00" "00" "00" "00"),
    (AlterPartitionReassignments, "request", 1, {"timeout_ms": 1000, "allow_replication_factor_change": False,
                                                 "topics": [{"name": "t", "partitions": [
                                                     {"partition_index": 0, "replicas": [1, 2]},
                                                     {"partition_index": 1, "replicas": None}]}]},
     "000003e8" "00" "02" "0274" "03" "00000000" "03" "00000001" "00000002" "00" "00000001" "00" "00" "00" "00"),
    (AlterPartitionReassignments, "response", 1, {
        "throttle_time_ms": 0, "allow_replication_factor_change": True, "error_code": 0, "error_message": None,
        "responses": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 39, "error_message": "bad"}]}]},
     "00000000" "01" "0000" "00" "02" "0274" "02" "00000000" "0027" "04626164" "00" "00" "00"),
    (ListPartitionReassignments, "request", 0, {"timeout_ms": 1000, "topics": None}, "000003e8" "00" "00"),
    (ListPartitionReassignments, "request", 0, {"timeout_ms": 1000, "topics": [{"name": "t", "partition_indexes": [0, 3]}]},
     "000003e8" "02" "0274" "03" "00000000" "00000003" "00" "00"),
    (ListPartitionReassignments, "response", 0, {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "replicas": [0, 1], "adding_replicas": [1],
                                      "removing_replicas": []}]}]},
     "00000000" "0000" "00" "02" "0274" "02" "00000000" "03" "00000000" "00000001" "02" "00000001" "01" "00" "00" "00"),
]


@pytest.mark.parametrize("api,kind,v,body,hexed", GOLDEN,
                         ids=[f"{a.__name__}-{k}-v{v}" for a, k, v, _, _ in GOLDEN])
def test_golden_bytes(api, kind, v, body, hexed):
    enc = api.encode_request if kind == "request" else api.encode_response
    dec = api.decode_request if kind == "request" else api.decode_response
    wire = enc(v, body)
    assert wire.hex() == hexed
    decoded = dec(v, bytes.fromhex(hexed))
    assert enc(v, decoded) == wire
    struct_ = api._request_struct if kind == "request" else api._response_struct
    assert project(normalize(decoded), struct_, v) == body


# the admin APIs a cluster's controller answers, client APIs every broker advertises
CONTROLLER_ADMIN_APIS = (ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments)


def _walk():
    for api in (*INTER_BROKER_APIS.values(), *CONTROLLER_ADMIN_APIS):
        for v in range(api.MIN_VERSION, api.MAX_VERSION + 1):
            for kind in ("request", "response"):
                yield api, kind, v


@pytest.mark.parametrize("api,kind,v", list(_walk()), ids=lambda x: getattr(x, "__name__", str(x)))
@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_round_trip_every_version(api, kind, v, data):
    value = data.draw(message_strategy(api, kind, v))
    enc = api.encode_request if kind == "request" else api.encode_response
    dec = api.decode_request if kind == "request" else api.decode_response
    struct_ = api._request_struct if kind == "request" else api._response_struct
    wire = enc(v, value)
    decoded = dec(v, wire)
    assert project(normalize(decoded), struct_, v) == normalize(value)
    assert enc(v, decoded) == wire
    # strict prefixes (a spread of cut points) are refused cleanly, never a crash or a partial value
    for cut in range(0, len(wire), max(1, len(wire) // 24)):
        with pytest.raises(ProtocolDecodeError):
            dec(v, wire[:cut])


def test_not_advertised_by_standalone_brokers():
    for key, api in INTER_BROKER_APIS.items():
        assert key not in SUPPORTED_VERSIONS
        assert inter_broker_api_for_key(key) is api
    assert inter_broker_api_for_key(0) is None
    assert sorted(INTER_BROKER_APIS) == [4, 5, 6, 7, 23]


def test_the_controllers_admin_apis_are_advertised_by_every_broker():
    for api in CONTROLLER_ADMIN_APIS:
        assert SUPPORTED_VERSIONS[api.API_KEY] == (api.MIN_VERSION, api.MAX_VERSION)
        assert inter_broker_api_for_key(api.API_KEY) is None
