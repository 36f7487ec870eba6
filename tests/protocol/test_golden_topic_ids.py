"""Golden bytes for the versions that came with topic ids and batching, written down by hand from
Kafka's message JSON (all flexible: compact strings and arrays are varint length + 1, every struct
ends with a tagged-field count): Fetch v13/v15, Metadata v12, DeleteTopics v6, ListOffsets v7,
FindCoordinator v4, OffsetFetch v8, DescribeCluster v0/v1, DescribeProducers v0. Our declarations
must encode exactly these bytes and decode them back; cut frames and bad lengths are refused."""

from __future__ import annotations

import pytest

from appliance.protocol import messages as M
from appliance.protocol.errors import ProtocolDecodeError

ID = "000102030405060708090a0b0c0d0e0f"  # a topic id's 16 bytes
T = "02" "74"          # compact string "t"
G = "02" "67"          # compact string "g"
ONE = "02"             # compact array of one
NONE = "00"            # null (compact) / no tagged fields
TAGS = "00"            # an empty tagged-field section

GOLDEN = [
    # Fetch v13 request: replica, max wait, min bytes, max bytes, isolation, session, epoch,
    # [topic id, [partition, leader epoch, offset, last fetched epoch, log start, max bytes]],
    # forgotten [], rack "", tags
    (M.Fetch, 13, "request",
     {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1024, "isolation_level": 0,
      "session_id": 0, "session_epoch": -1,
      "topics": [{"topic_id": bytes.fromhex(ID), "partitions": [
          {"partition": 2, "fetch_offset": 7, "partition_max_bytes": 512}]}],
      "forgotten_topics_data": [], "rack_id": ""},
     "ffffffff" "000001f4" "00000001" "00000400" "00" "00000000" "ffffffff"
     + ONE + ID + ONE + "00000002" "ffffffff" "0000000000000007" "ffffffff" "ffffffffffffffff"
     "00000200" + TAGS + TAGS + "01" "01" + TAGS),
    # Fetch v15 request: no replica id field; ReplicaState is tag 1 (absent at its defaults)
    (M.Fetch, 15, "request",
     {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1, "isolation_level": 1,
      "session_id": 0, "session_epoch": -1, "topics": [], "forgotten_topics_data": [], "rack_id": ""},
     "00000000" "00000001" "00000001" "01" "00000000" "ffffffff" "01" "01" "01" + TAGS),
    # Fetch v13 response: throttle, error, session, [topic id, [partition, error, hw, log_start,
    # log start, aborted (null), preferred replica, records (null), tags], tags], tags
    (M.Fetch, 13, "response",
     {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
         {"topic_id": bytes.fromhex(ID), "partitions": [
             {"partition_index": 0, "error_code": 100, "high_watermark": -1,
              "aborted_transactions": None, "records": None}]}]},
     "00000000" "0000" "00000000" + ONE + ID + ONE + "00000000" "0064" "ffffffffffffffff"
     "ffffffffffffffff" "ffffffffffffffff" + NONE + "ffffffff" + NONE + TAGS + TAGS + TAGS),
    # Metadata v12 response topic: error, name, topic id, internal, partitions, auth ops, tags
    (M.Metadata, 12, "response",
     {"throttle_time_ms": 0, "brokers": [], "cluster_id": None, "controller_id": 0, "topics": [
         {"error_code": 0, "name": "t", "topic_id": bytes.fromhex(ID), "is_internal": False,
          "partitions": []}]},
     "00000000" "01" + NONE + "00000000" + ONE + "0000" + T + ID + "00" "01" "80000000" + TAGS + TAGS),
    # DeleteTopics v6 request: [name (nullable), topic id, tags], timeout, tags
    (M.DeleteTopics, 6, "request",
     {"topics": [{"name": None, "topic_id": bytes.fromhex(ID)}], "timeout_ms": 1000},
     ONE + NONE + ID + TAGS + "000003e8" + TAGS),
    (M.DeleteTopics, 6, "response",
     {"throttle_time_ms": 0, "responses": [
         {"name": None, "topic_id": bytes.fromhex(ID), "error_code": 100, "error_message": None}]},
     "00000000" + ONE + NONE + ID + "0064" + NONE + TAGS + TAGS),
    # ListOffsets v7 request: replica, isolation, [name, [partition, leader epoch, timestamp -3]]
    (M.ListOffsets, 7, "request",
     {"replica_id": -1, "isolation_level": 0, "topics": [
         {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -3}]}]},
     "ffffffff" "00" + ONE + T + ONE + "00000000" "ffffffff" "fffffffffffffffd" + TAGS + TAGS + TAGS),
    # FindCoordinator v4 request: key type, [keys], tags
    (M.FindCoordinator, 4, "request",
     {"key_type": 0, "coordinator_keys": ["g", ""]},
     "00" "03" + G + "01" + TAGS),
    # response: throttle, [key, node, host, port, error, message, tags], tags
    (M.FindCoordinator, 4, "response",
     {"throttle_time_ms": 0, "coordinators": [
         {"key": "g", "node_id": 1, "host": "h", "port": 9092, "error_code": 0, "error_message": None}]},
     "00000000" + ONE + G + "00000001" "02" "68" "00002384" "0000" + NONE + TAGS + TAGS),
    # OffsetFetch v8 request: [group, [topic, [partition]] (nullable), tags], require stable, tags
    (M.OffsetFetch, 8, "request",
     {"groups": [{"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]},
                 {"group_id": "g", "topics": None}], "require_stable": True},
     "03" + G + ONE + T + ONE + "00000000" + TAGS + TAGS + G + NONE + TAGS + "01" + TAGS),
    # response: throttle, [group, [topic, [partition, offset, leader epoch, metadata, error]],
    # error], tags
    (M.OffsetFetch, 8, "response",
     {"throttle_time_ms": 0, "groups": [{"group_id": "g", "error_code": 0, "topics": [
         {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                       "metadata": "", "error_code": 0}]}]}]},
     "00000000" + ONE + G + ONE + T + ONE + "00000000" "0000000000000005" "ffffffff" "01" "0000"
     + TAGS + TAGS + "0000" + TAGS + TAGS),
    # DescribeCluster v0 request / v1 request (endpoint type), v1 response
    (M.DescribeCluster, 0, "request", {"include_cluster_authorized_operations": False}, "00" + TAGS),
    (M.DescribeCluster, 1, "request",
     {"include_cluster_authorized_operations": True, "endpoint_type": 1}, "01" "01" + TAGS),
    (M.DescribeCluster, 1, "response",
     {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
      "cluster_id": "c", "controller_id": 0, "brokers": [
          {"broker_id": 0, "host": "h", "port": 9092, "rack": None}]},
     "00000000" "0000" + NONE + "01" "02" "63" "00000000" + ONE + "00000000" "02" "68" "00002384"
     + NONE + TAGS + "80000000" + TAGS),
    # DescribeProducers v0: [topic, [partition]] / throttle, [topic, [partition, error, message,
    # [producer id, epoch, last sequence, last timestamp, coordinator epoch, txn start]]]
    (M.DescribeProducers, 0, "request",
     {"topics": [{"name": "t", "partition_indexes": [0, 1]}]},
     ONE + T + "03" "00000000" "00000001" + TAGS + TAGS),
    (M.DescribeProducers, 0, "response",
     {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
         {"partition_index": 0, "error_code": 0, "error_message": None, "active_producers": [
             {"producer_id": 9, "producer_epoch": 0, "last_sequence": 41, "last_timestamp": 1000,
              "coordinator_epoch": -1, "current_txn_start_offset": -1}]}]}]},
     "00000000" + ONE + T + ONE + "00000000" "0000" + NONE + ONE + "0000000000000009" "00000000"
     "00000029" "00000000000003e8" "ffffffff" "ffffffffffffffff" + TAGS + TAGS + TAGS + TAGS),
]


@pytest.mark.parametrize("api,version,kind,body,wire", GOLDEN,
                         ids=[f"{a.__name__}-v{v}-{k}" for a, v, k, _, _ in GOLDEN])
def test_golden_bytes(api, version, kind, body, wire):
    expected = bytes.fromhex(wire)
    encode = api.encode_request if kind == "request" else api.encode_response
    decode = api.decode_request if kind == "request" else api.decode_response
    assert encode(version, body) == expected
    assert encode(version, decode(version, expected)) == expected


@pytest.mark.parametrize("api,version,kind,body,wire", [g for g in GOLDEN if g[2] == "request"],
                         ids=[f"{a.__name__}-v{v}" for a, v, k, _, _ in GOLDEN if k == "request"])
def test_every_cut_request_is_refused(api, version, kind, body, wire):
    """Any prefix of a request is refused as truncated, never read as a shorter request."""
    full = bytes.fromhex(wire)
    for n in range(len(full)):
        with pytest.raises(ProtocolDecodeError):
            api.decode_request(version, full[:n])


def test_topic_id_array_length_past_the_frame_is_refused():
    # DeleteTopics v6 claiming 1,000,000 topics in a 30-byte frame
    wire = bytes.fromhex("c0843d" + NONE + ID + TAGS + "000003e8" + TAGS)
    with pytest.raises(ProtocolDecodeError):
        M.DeleteTopics.decode_request(6, wire)
