"""Golden bytes for the old versions old clients speak (Kafka 0.8.2-2.0), written down by hand
from Kafka's published message schemas (the protocol guide's BNF and the ``*.json`` files'
version ranges), not produced by any library: our declarations must encode exactly these bytes
and decode them back to the same values."""

from __future__ import annotations

import pytest

from appliance.protocol import messages as M
from appliance.protocol.errors import ProtocolDecodeError

T = "0001" "74"        # the string "t"
G = "0001" "67"        # the string "g"
ONE = "00000001"       # an array of one
P0 = "00000000"        # partition 0

# (api, version, "request"/"response", body, hex)
GOLDEN = [
    # Produce v0: acks, timeout, [topic [partition, message set as bytes]]
    (M.Produce, 0, "request",
     {"acks": 1, "timeout_ms": 1000, "topic_data": [{"name": "t", "partition_data": [
         {"index": 0, "records": b"\x01\x02"}]}]},
     "0001" "000003e8" + ONE + T + ONE + P0 + "00000002" "0102"),
    # Produce v0 answer: [topic [partition, error, base offset]]
    (M.Produce, 0, "response",
     {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 5}]}]},
     ONE + T + ONE + P0 + "0000" "0000000000000005"),
    # v1 adds throttle time at the end; v2 the log append time after the base offset
    (M.Produce, 1, "response",
     {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 5}]}],
      "throttle_time_ms": 0},
     ONE + T + ONE + P0 + "0000" "0000000000000005" "00000000"),
    (M.Produce, 2, "response",
     {"responses": [{"name": "t", "partition_responses": [
         {"index": 0, "error_code": 0, "base_offset": 5, "log_append_time_ms": -1}]}], "throttle_time_ms": 0},
     ONE + T + ONE + P0 + "0000" "0000000000000005" "ffffffffffffffff" "00000000"),
    # Fetch v0: replica, max wait, min bytes, [topic [partition, offset, max bytes]]
    (M.Fetch, 0, "request",
     {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "topics": [{"topic": "t", "partitions": [
         {"partition": 0, "fetch_offset": 7, "partition_max_bytes": 1 << 20}]}]},
     "ffffffff" "00000064" "00000001" + ONE + T + ONE + P0 + "0000000000000007" "00100000"),
    # Fetch v3 adds the response's max bytes after min bytes
    (M.Fetch, 3, "request",
     {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 24, "topics": [
         {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 7, "partition_max_bytes": 1 << 20}]}]},
     "ffffffff" "00000064" "00000001" "01000000" + ONE + T + ONE + P0 + "0000000000000007" "00100000"),
    # Fetch v0 answer: [topic [partition, error, high watermark, message set]]
    (M.Fetch, 0, "response",
     {"responses": [{"topic": "t", "partitions": [
         {"partition_index": 0, "error_code": 0, "high_watermark": 10, "records": b"\xaa"}]}]},
     ONE + T + ONE + P0 + "0000" "000000000000000a" "00000001" "aa"),
    # v1 puts the throttle time first
    (M.Fetch, 1, "response",
     {"throttle_time_ms": 0, "responses": [{"topic": "t", "partitions": [
         {"partition_index": 0, "error_code": 0, "high_watermark": 10, "records": b"\xaa"}]}]},
     "00000000" + ONE + T + ONE + P0 + "0000" "000000000000000a" "00000001" "aa"),
    # ListOffsets (Offsets) v0: replica, [topic [partition, time, max number of offsets]]
    (M.ListOffsets, 0, "request",
     {"replica_id": -1, "topics": [{"name": "t", "partitions": [
         {"partition_index": 0, "timestamp": -1, "max_num_offsets": 1}]}]},
     "ffffffff" + ONE + T + ONE + P0 + "ffffffffffffffff" "00000001"),
    # ... answered with [topic [partition, error, [offset]]]
    (M.ListOffsets, 0, "response",
     {"topics": [{"name": "t", "partitions": [
         {"partition_index": 0, "error_code": 0, "old_style_offsets": [42]}]}]},
     ONE + T + ONE + P0 + "0000" + ONE + "000000000000002a"),
    # Metadata v0: [topic]; an empty array asks for every topic
    (M.Metadata, 0, "request", {"topics": [{"name": "t"}]}, ONE + T),
    (M.Metadata, 0, "request", {"topics": []}, "00000000"),
    # ... answered with [broker: id, host, port], [topic: error, name, [partition: error, id,
    # leader, [replica], [isr]]]
    (M.Metadata, 0, "response",
     {"brokers": [{"node_id": 1, "host": "h", "port": 9092}], "topics": [
         {"error_code": 0, "name": "t", "partitions": [
             {"error_code": 0, "partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}]}]},
     ONE + "00000001" "0001" "68" "00002384" + ONE + "0000" + T + ONE
     + "0000" + P0 + "00000001" + ONE + "00000001" + ONE + "00000001"),
    # v5 adds each partition's offline replicas
    (M.Metadata, 5, "response",
     {"throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
      "cluster_id": None, "controller_id": 1, "topics": [
          {"error_code": 0, "name": "t", "is_internal": False, "partitions": [
              {"error_code": 0, "partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1],
               "offline_replicas": []}]}]},
     "00000000" + ONE + "00000001" "0001" "68" "00002384" "ffff" "ffff" "00000001" + ONE + "0000" + T + "00"
     + ONE + "0000" + P0 + "00000001" + ONE + "00000001" + ONE + "00000001" "00000000"),
    # OffsetCommit v0: group, [topic [partition, offset, metadata]]
    (M.OffsetCommit, 0, "request",
     {"group_id": "g", "topics": [{"name": "t", "partitions": [
         {"partition_index": 0, "committed_offset": 5, "committed_metadata": "m"}]}]},
     G + ONE + T + ONE + P0 + "0000000000000005" "0001" "6d"),
    # v1: group, generation, member, [topic [partition, offset, timestamp, metadata]]
    (M.OffsetCommit, 1, "request",
     {"group_id": "g", "generation_id_or_member_epoch": 3, "member_id": "m1", "topics": [
         {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5, "commit_timestamp": -1,
                                       "committed_metadata": "m"}]}]},
     G + "00000003" "0002" "6d31" + ONE + T + ONE + P0 + "0000000000000005" "ffffffffffffffff" "0001" "6d"),
    (M.OffsetCommit, 0, "response",
     {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]},
     ONE + T + ONE + P0 + "0000"),
    # OffsetFetch v0: group, [topic [partition]] -> [topic [partition, offset, metadata, error]]
    (M.OffsetFetch, 0, "request",
     {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]},
     G + ONE + T + ONE + P0),
    (M.OffsetFetch, 0, "response",
     {"topics": [{"name": "t", "partitions": [
         {"partition_index": 0, "committed_offset": 5, "metadata": "m", "error_code": 0}]}]},
     ONE + T + ONE + P0 + "0000000000000005" "0001" "6d" "0000"),
    # ConsumerMetadata = FindCoordinator v0: group -> error, coordinator id, host, port
    (M.FindCoordinator, 0, "request", {"key": "g"}, G),
    (M.FindCoordinator, 0, "response",
     {"error_code": 0, "node_id": 1, "host": "h", "port": 9092},
     "0000" "00000001" "0001" "68" "00002384"),
    # CreateTopics v0 has no validate-only flag; its answer no throttle time nor message
    (M.CreateTopics, 0, "request",
     {"topics": [{"name": "t", "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}],
      "timeout_ms": 1000},
     ONE + T + "00000002" "0001" "00000000" "00000000" "000003e8"),
    (M.CreateTopics, 0, "response", {"topics": [{"name": "t", "error_code": 0}]}, ONE + T + "0000"),
    # DeleteTopics v0: its answer has no throttle time
    (M.DeleteTopics, 0, "response", {"responses": [{"name": "t", "error_code": 0}]}, ONE + T + "0000"),
]


def _ids():
    return [f"{api.__name__}-v{v}-{kind}-{i}" for i, (api, v, kind, _, _) in enumerate(GOLDEN)]


@pytest.mark.parametrize("api,version,kind,body,wire", GOLDEN, ids=_ids())
def test_golden_bytes(api, version, kind, body, wire):
    expected = bytes.fromhex(wire)
    encode = api.encode_request if kind == "request" else api.encode_response
    decode = api.decode_request if kind == "request" else api.decode_response
    assert encode(version, body) == expected
    value = decode(version, expected)
    assert _written(body, value.to_dict())  # every field we wrote comes back as written
    assert encode(version, value) == expected


def _written(want, got) -> bool:
    """Whether ``got`` (a decoded value as a dict) holds every field of ``want`` unchanged."""
    if isinstance(want, dict):
        return all(_written(v, got[k]) for k, v in want.items())
    if isinstance(want, list):
        return len(want) == len(got) and all(_written(w, g) for w, g in zip(want, got, strict=True))
    if isinstance(want, bytes):
        return bytes(got) == want
    return want == got


def test_metadata_v0_refuses_a_null_topic_array():
    # null (-1) means "all topics" only from v1; v0 spells that as an empty array
    with pytest.raises(ProtocolDecodeError):
        M.Metadata.decode_request(0, bytes.fromhex("ffffffff"))
    assert M.Metadata.decode_request(1, bytes.fromhex("ffffffff")).topics is None


def test_golden_offset_delete_and_incremental_alter_configs():
    # OffsetDelete v0: group, [topic [partition]] -> error, throttle, [topic [partition, error]]
    assert M.OffsetDelete.encode_request(0, {"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}]}]}) == bytes.fromhex(G + ONE + T + ONE + P0)
    assert M.OffsetDelete.encode_response(0, {"error_code": 0, "throttle_time_ms": 0, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "error_code": 86}]}]}) == bytes.fromhex(
        "0000" "00000000" + ONE + T + ONE + P0 + "0056")
    # IncrementalAlterConfigs v0: [resource type, name, [key, operation, value]], validate only
    wire = bytes.fromhex(ONE + "02" + T + ONE + "0002" "6b31" "02" "0001" "76" "00")
    body = {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "k1", "config_operation": 2, "value": "v"}]}], "validate_only": False}
    assert M.IncrementalAlterConfigs.encode_request(0, body) == wire
    assert M.IncrementalAlterConfigs.decode_request(0, wire).resources[0].configs[0].config_operation == 2
