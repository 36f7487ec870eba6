"""Golden bytes for the transaction APIs (24-28, 65, 66), written down by hand from Kafka's message JSON:
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
    # DescribeTransactions / ListTransactions: flexible from v0 (KIP-664)
    (M.DescribeTransactions, 0, "request", {"transactional_ids": ["tx"]}, "02" "03" "7478" "00"),
    (M.DescribeTransactions, 0, "response",
     {"throttle_time_ms": 0, "transaction_states": [
         {"error_code": 0, "transactional_id": "tx", "transaction_state": "Ongoing",
          "transaction_timeout_ms": 60000, "transaction_start_time_ms": 1000, "producer_id": 7,
          "producer_epoch": 2, "topics": [{"topic": "t", "partitions": [0, 3]}]}]},
     "00000000" "02" "0000" "03" "7478" "08" + b"Ongoing".hex() + "0000ea60"
     "00000000000003e8" + PID + EPOCH + "02" "02" "74" "03" "00000000" "00000003" "00" "00" "00"),
    (M.DescribeTransactions, 0, "response",  # an unknown id: its error, the rest empty
     {"throttle_time_ms": 0, "transaction_states": [
         {"error_code": 105, "transactional_id": "x", "transaction_state": "",
          "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
          "producer_epoch": -1, "topics": []}]},
     "00000000" "02" "0069" "02" "78" "01" "00000000" "ffffffffffffffff" "ffffffffffffffff" "ffff"
     "01" "00" "00"),
    (M.ListTransactions, 0, "request", {"state_filters": ["Ongoing"], "producer_id_filters": [7]},
     "02" "08" + b"Ongoing".hex() + "02" + PID + "00"),
    (M.ListTransactions, 1, "request",
     {"state_filters": [], "producer_id_filters": [], "duration_filter": 5000},
     "01" "01" "0000000000001388" "00"),
    (M.ListTransactions, 1, "response",
     {"throttle_time_ms": 0, "error_code": 0, "unknown_state_filters": ["Nope"],
      "transaction_states": [{"transactional_id": "tx", "producer_id": 7, "transaction_state": "Empty"}]},
     "00000000" "0000" "02" "05" + b"Nope".hex() + "02" "03" "7478" + PID
     + "06" + b"Empty".hex() + "00" "00"),
]


@pytest.mark.parametrize("api,version,kind,body,wire", GOLDEN,
                         ids=[f"{a.__name__}-v{v}-{k}" for a, v, k, _, _ in GOLDEN])
def test_golden_bytes(api, version, kind, body, wire):
    expected = bytes.fromhex(wire)
    encode = api.encode_request if kind == "request" else api.encode_response
    decode = api.decode_request if kind == "request" else api.decode_response
    assert encode(version, body) == expected
    assert encode(version, decode(version, expected)) == expected
