"""DescribeLogDirs (API 35) and `appliance log-dirs --describe` against a real two-dir broker:
the sizes are the bytes of the segment files, asked through kafka-python's admin client (its
own DescribeLogDirs v0 encoding) and through our command line (Kafka's kafka-log-dirs JSON)."""

from __future__ import annotations

import os
import subprocess
import sys

from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient

from tests.broker.clients import create_topic
from tests.faults.procs import cli_describe


def _log_bytes(log_dir: str, topic: str, partition: int) -> int:
    d = os.path.join(log_dir, f"{topic}-{partition}")
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".log"))


def test_describe_log_dirs_sizes_match_the_segment_files(broker_factory):
    b = broker_factory(num_log_dirs=2).start()
    create_topic(b.bootstrap, "sized", partitions=4)
    create_topic(b.bootstrap, "other", partitions=1)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(400):
        p.produce("sized", b"x" * (10 + i), partition=i % 4)
    assert p.flush(30) == 0

    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=20000)
    try:
        resp = admin.describe_log_dirs()
    finally:
        admin.close()
    seen = {}
    (only,) = resp
    for d in only["log_dirs"]:
        assert d["error_code"] == 0 and d["log_dir"] in b.log_dirs, d
        for t in d["topics"]:
            for q in t["partitions"]:
                assert q["offset_lag"] == 0 and q["is_future_key"] is False, q
                seen[(t["name"], q["partition_index"])] = (d["log_dir"], q["partition_size"])
    assert {k for k in seen if k[0] == "sized"} == {("sized", q) for q in range(4)}
    assert ("other", 0) in seen
    for (name, part), (log_dir, size) in seen.items():
        assert size == _log_bytes(log_dir, name, part), (name, part)
    assert all(seen[("sized", q)][1] > 0 for q in range(4))

    out = cli_describe(b.bootstrap, "--topic-list", "sized")
    (broker,) = out["brokers"]
    assert out["version"] == 1 and broker["broker"] == 0
    dirs = {d["logDir"]: d for d in broker["logDirs"]}
    assert set(dirs) == set(b.log_dirs) and all(d["error"] is None for d in dirs.values())
    parts = {p["partition"]: (d, p) for d in dirs for p in dirs[d]["partitions"]}
    assert set(parts) == {f"sized-{q}" for q in range(4)}  # --topic-list: only that topic
    for q in range(4):
        d, row = parts[f"sized-{q}"]
        assert row["size"] == _log_bytes(d, "sized", q) and row["offsetLag"] == 0
        assert row["isFuture"] is False


def test_log_dirs_without_an_action_is_a_usage_error(broker):
    r = subprocess.run([sys.executable, "-m", "appliance.cli.main", "log-dirs",
                        "--bootstrap-server", "127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--describe" in r.stderr and "Traceback" not in r.stderr
