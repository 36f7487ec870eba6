"""Micro-benchmarks of the hot protocol paths (run: .venv/bin/python -m tests.protocol.bench_protocol).

Prints the median time per operation over several repeats; kafka-python's JSON-driven
classes are timed on the same messages for reference."""

from __future__ import annotations

import statistics
import time
import warnings

from appliance.protocol import messages as M
from appliance.protocol.connection import ServerConnection
from appliance.protocol.frames import FileSlice, encode_request_frame, encode_response_frame

RECORDS = bytes(16 * 1024)
PRODUCE = {"acks": -1, "timeout_ms": 30000, "topic_data": [
    {"name": f"topic-{t}", "partition_data": [{"index": p, "records": RECORDS} for p in range(4)]}
    for t in range(2)]}
FETCH_REQ = {"max_wait_ms": 500, "min_bytes": 1, "isolation_level": 0, "session_id": 0, "topics": [
    {"topic": f"topic-{t}", "partitions": [
        {"partition": p, "fetch_offset": 1000 * p, "partition_max_bytes": 1 << 20} for p in range(8)]}
    for t in range(4)]}
FETCH_RESP = {"responses": [{"topic": f"topic-{t}", "partitions": [
    {"partition_index": p, "high_watermark": 10**6, "last_stable_offset": 10**6, "log_start_offset": 0,
     "records": FileSlice(3, 4096 * p, 1 << 20)} for p in range(8)]} for t in range(4)]}


def bench(name: str, fn, n: int) -> float:
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n)
    med = statistics.median(times)
    print(f"{name:58s} {med * 1e6:9.2f} us")
    return med


def main() -> None:
    produce_body = M.Produce.encode_request(7, PRODUCE)
    fetch_body = M.Fetch.encode_request(11, FETCH_REQ)
    frame = encode_request_frame(0, 7, 1, "bench", PRODUCE)

    def server_roundtrip():
        conn = ServerConnection()
        conn.receive_data(frame)
        conn.next_event()

    bench("Produce v7 request decode (2 topics x 4 parts, 16 KiB)", lambda: M.Produce.decode_request(7, produce_body), 20000)
    bench("Produce v7 request via ServerConnection (frame in/event)", server_roundtrip, 5000)
    bench("Fetch v11 request decode (4 topics x 8 parts)", lambda: M.Fetch.decode_request(11, fetch_body), 20000)
    bench("Fetch v11 response encode, 32 FileSlices", lambda: encode_response_frame(1, 11, 1, FETCH_RESP), 20000)
    resp = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "base_offset": 5}]}]}
    bench("Produce v7 response encode (1 partition)", lambda: encode_response_frame(0, 7, 1, resp), 50000)

    # flexible versions (KIP-482): compact lengths, tagged-field sections, header v2 / v1
    produce9 = M.Produce.encode_request(9, PRODUCE)
    fetch12 = M.Fetch.encode_request(12, FETCH_REQ)
    frame9 = encode_request_frame(0, 9, 1, "bench", PRODUCE)

    def server_roundtrip9():
        conn = ServerConnection()
        conn.receive_data(frame9)
        conn.next_event()

    bench("Produce v9 request decode (flexible)", lambda: M.Produce.decode_request(9, produce9), 20000)
    bench("Produce v9 request via ServerConnection (flexible)", server_roundtrip9, 5000)
    bench("Fetch v12 request decode (flexible)", lambda: M.Fetch.decode_request(12, fetch12), 20000)
    bench("Fetch v12 response encode, 32 FileSlices (flexible)",
          lambda: encode_response_frame(1, 12, 1, FETCH_RESP), 20000)
    bench("Produce v9 response encode (flexible)", lambda: encode_response_frame(0, 9, 1, resp), 50000)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.protocol.consumer import FetchRequest
        from kafka.protocol.producer import ProduceRequest
    bench("  [kafka-python] Produce v7 request decode", lambda: ProduceRequest.decode(produce_body, version=7), 5000)
    bench("  [kafka-python] Fetch v11 request decode", lambda: FetchRequest.decode(fetch_body, version=11), 5000)


if __name__ == "__main__":
    main()
