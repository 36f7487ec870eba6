"""Golden bytes for the transaction APIs (24-28), written down by hand from Kafka's message JSON:
our declarations must encode exactly these bytes and decode them back."""

from __future__ import annotations

import pytest

from appliance.protocol.messages import transactions as M

TID = "0002" "7478"          # the string "tx"
T = "0001" "74"              # the string "t"
ONE = "00000001"             # an array of one
PID = "0000000000000007"     # producer id 7
EPOCH = "0002"               # producer epoch 2

GOLDEN = [
    (M.AddPartitionsToTxn, 0, "request",
     {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 2,
      "topics": [{"name": "t", "partitions": [0, 3]}]},
     TID + PID + EPOCH + ONE + T + "00000002" "00000000" "00000003"),
    (M.AddPartitionsToTxn, 0, "response",
     {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [{"name": "t", "results_by_partition": [
         {"partition_index": 3, "partition_error_code": 48}]}]},
     "00000000" + ONE + T + ONE + "00000003" "0030"),
    # flexible: compact strings and arrays (length + 1), an empty tag buffer after each struct
    (M.AddOffsetsToTxn, 3, "request",
     {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 2, "group_id": "g"},
     "03" "7478" + PID + EPOCH + "02" "67" "00"),
    (M.EndTxn, 0, "request",
     {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 2, "committed": True},
     TID + PID + EPOCH + "01"),
    (M.EndTxn, 1, "response", {"throttle_time_ms": 5, "error_code": 47}, "00000005" "002f"),
    (M.WriteTxnMarkers, 0, "request",
     {"markers": [{"producer_id": 7, "producer_epoch": 2, "transaction_result": False,
                   "topics": [{"name": "t", "partition_indexes": [1]}], "coordinator_epoch": 4}]},
     ONE + PID + EPOCH + "00" + ONE + T + ONE + "00000001" + "00000004"),
    (M.WriteTxnMarkers, 1, "response",
     {"markers": [{"producer_id": 7, "topics": [{"name": "t", "partitions": [
         {"partition_index": 1, "error_code": 0}]}]}]},
     "02" + PID + "02" "0274" "02" "00000001" "0000" "00" "00" "00" "00"),
    (M.TxnOffsetCommit, 0, "request",
     {"transactional_id": "tx", "group_id": "g", "producer_id": 7, "producer_epoch": 2,
      "topics": [{"name": "t", "partitions": [
          {"partition_index": 0, "committed_offset": 10, "committed_metadata": None}]}]},
     TID + "0001" "67" + PID + EPOCH + ONE + T + ONE + "00000000" "000000000000000a" "ffff"),
    (M.TxnOffsetCommit, 3, "request",
     {"transactional_id": "tx", "group_id": "g", "producer_id": 7, "producer_epoch": 2,
      "generation_id": 5, "member_id": "m", "group_instance_id": None,
      "topics": [{"name": "t", "partitions": [
          {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 1,
           "committed_metadata": ""}]}]},
     "03" "7478" "02" "67" + PID + EPOCH + "00000005" "02" "6d" "00"
     + "02" "0274" "02" "00000000" "000000000000000a" "00000001" "01" "00" "00" "00"),
]


@pytest.mark.parametrize("api,version,kind,body,wire", GOLDEN,
                         ids=[f"{a.__name__}-v{v}-{k}" for a, v, k, _, _ in GOLDEN])
def test_golden_bytes(api, version, kind, body, wire):
    expected = bytes.fromhex(wire)
    encode = api.encode_request if kind == "request" else api.encode_response
    decode = api.decode_request if kind == "request" else api.decode_response
    assert encode(version, body) == expected
    assert encode(version, decode(version, expected)) == expected
