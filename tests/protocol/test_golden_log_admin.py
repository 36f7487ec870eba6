"""Golden bytes for DeleteRecords (21) v0-1 and AlterReplicaLogDirs (34) v0-1, written down by
hand from Kafka's DeleteRecords*.json / AlterReplicaLogDirs*.json (non-flexible versions): our
declarations must encode exactly these bytes and decode them back."""

from __future__ import annotations

import pytest

from appliance.protocol import messages as M

T = "0001" "74"        # the string "t"
ONE = "00000001"       # an array of one
P0 = "00000000"        # partition 0
P3 = "00000003"

GOLDEN = [
    # DeleteRecords: [topic [partition, offset]], timeout
    (M.DeleteRecords, v, "request",
     {"topics": [{"name": "t", "partitions": [{"partition_index": 3, "offset": -1}]}], "timeout_ms": 1000},
     ONE + T + ONE + P3 + "ffffffffffffffff" "000003e8")
    for v in (0, 1)
] + [
    # answer: throttle, [topic [partition, low watermark, error]]
    (M.DeleteRecords, v, "response",
     {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
         {"partition_index": 0, "low_watermark": 40, "error_code": 0},
         {"partition_index": 3, "low_watermark": -1, "error_code": 1}]}]},
     "00000000" + ONE + T + "00000002" + P0 + "0000000000000028" "0000" + P3 + "ffffffffffffffff" "0001")
    for v in (0, 1)
] + [
    # AlterReplicaLogDirs: [dir path, [topic, [partition]]]
    (M.AlterReplicaLogDirs, v, "request",
     {"dirs": [{"path": "/d", "topics": [{"name": "t", "partitions": [0, 3]}]}]},
     ONE + "0002" "2f64" + ONE + T + "00000002" + P0 + P3)
    for v in (0, 1)
] + [
    # answer: throttle, [topic, [partition, error]]
    (M.AlterReplicaLogDirs, v, "response",
     {"throttle_time_ms": 0, "results": [{"topic_name": "t", "partitions": [
         {"partition_index": 0, "error_code": 57}]}]},
     "00000000" + ONE + T + ONE + P0 + "0039")
    for v in (0, 1)
]


@pytest.mark.parametrize("api,version,kind,body,wire", GOLDEN,
                         ids=[f"{a.__name__}-v{v}-{k}" for a, v, k, _, _ in GOLDEN])
def test_golden_bytes(api, version, kind, body, wire):
    expected = bytes.fromhex(wire)
    encode = api.encode_request if kind == "request" else api.encode_response
    decode = api.decode_request if kind == "request" else api.decode_response
    assert encode(version, body) == expected
    assert encode(version, decode(version, expected)) == expected
    assert decode(version, expected).to_dict() == decode(version, encode(version, body)).to_dict()

