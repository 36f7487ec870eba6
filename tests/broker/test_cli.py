"""The `appliance` command line as a subprocess against a real broker: topics, console producer
and consumer, dump-log, and how errors are reported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.broker_process import free_port

pytestmark = pytest.mark.timeout(120)


def cli(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance.cli.main", *args], input=stdin,
                          capture_output=True, timeout=timeout)


def ok(*args: str, stdin: bytes | None = None) -> str:
    res = cli(*args, stdin=stdin)
    assert res.returncode == 0, (res.stdout, res.stderr)
    return res.stdout.decode()


def test_topics_create_list_describe_alter_delete(module_broker):
    bs = ("--bootstrap-server", module_broker.bootstrap)
    assert ok("topics", "--create", "--topic", "cli-t", "--partitions", "3",
              "--config", "retention.ms=3600000", *bs).strip() == "Created topic cli-t."
    assert "cli-t" in ok("topics", "--list", *bs).split()
    desc = ok("topics", "--describe", "--topic", "cli-t", *bs)
    first, *parts = desc.strip().splitlines()
    assert "PartitionCount: 3" in first and "ReplicationFactor: 1" in first
    assert "retention.ms=3600000" in first
    assert [p.split("\t")[2] for p in parts] == ["Partition: 0", "Partition: 1", "Partition: 2"]
    assert all("Leader: 0" in p and "Isr: 0" in p for p in parts)
    # creating it again fails with the Kafka error name; --if-not-exists makes that fine
    res = cli("topics", "--create", "--topic", "cli-t", *bs)
    assert res.returncode == 1 and b"TOPIC_ALREADY_EXISTS" in res.stderr
    ok("topics", "--create", "--topic", "cli-t", "--if-not-exists", *bs)

    ok("topics", "--alter", "--topic", "cli-t", "--partitions", "5",
       "--config", "retention.ms=7200000", *bs)
    desc = ok("topics", "--describe", "--topic", "cli-t", *bs)
    assert "PartitionCount: 5" in desc and "retention.ms=7200000" in desc
    # what the CLI changed, a real client sees
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    cfg = admin.describe_configs([ConfigResource("topic", "cli-t")])
    assert next(iter(cfg.values())).result(timeout=10)["retention.ms"].value == "7200000"
    # --alter --config changes only the keys given: the other overrides stay (issue 43: they
    # were all replaced); --delete-config (0.8's --deleteConfig) removes one
    ok("topics", "--alter", "--topic", "cli-t", "--config", "segment.bytes=1048576", *bs)
    ok("topics", "--alter", "--topic", "cli-t", "--config", "max.message.bytes=128000", *bs)
    first = ok("topics", "--describe", "--topic", "cli-t", *bs).splitlines()[0]
    for kept in ("retention.ms=7200000", "segment.bytes=1048576", "max.message.bytes=128000"):
        assert kept in first
    ok("topics", "--alter", "--topic", "cli-t", "--deleteConfig", "segment.bytes", *bs)
    first = ok("topics", "--describe", "--topic", "cli-t", *bs).splitlines()[0]
    assert "segment.bytes" not in first and "retention.ms=7200000" in first
    res = cli("topics", "--alter", "--topic", "cli-t", "--config", "retention.ms=1",
              "--delete-config", "retention.ms", *bs)
    assert res.returncode == 2 and b"retention.ms: both in --config and --delete-config" in res.stderr

    assert ok("topics", "--delete", "--topic", "cli-t", *bs).strip() == "Deleted topic cli-t."
    assert "cli-t" not in ok("topics", "--list", *bs).split()
    res = cli("topics", "--delete", "--topic", "cli-t", *bs)
    assert res.returncode == 1 and b"UNKNOWN_TOPIC_OR_PARTITION" in res.stderr
    ok("topics", "--delete", "--topic", "cli-t", "--if-exists", *bs)


def test_console_producer_then_consumer(module_broker):
    bs = ("--bootstrap-server", module_broker.bootstrap)
    ok("topics", "--create", "--topic", "cli-pc", "--partitions", "1", *bs)
    lines = [f"key{i}:value {i} with spaces" for i in range(50)]
    ok("console-producer", "--topic", "cli-pc", "--property", "parse.key=true",
       "--property", "key.separator=:", *bs, stdin="\n".join(lines).encode() + b"\n")
    out = ok("console-consumer", "--topic", "cli-pc", "--from-beginning", "--max-messages", "50",
             "--property", "print.key=true", "--property", "key.separator=:", *bs)
    assert out.splitlines() == lines
    # --partition/--offset: exactly the messages from that offset on
    out = ok("console-consumer", "--topic", "cli-pc", "--partition", "0", "--offset", "47",
             "--max-messages", "3", "--property", "print.offset=true", *bs)
    assert out.splitlines() == [f"Offset:{i}\tvalue {i} with spaces" for i in (47, 48, 49)]


def test_console_producer_keys_spread_like_kafka(module_broker):
    """Keyed lines go to murmur2 partitions (as Java's producer); all come back once each."""
    from appliance.client.partitioner import partition_for
    bs = ("--bootstrap-server", module_broker.bootstrap)
    ok("topics", "--create", "--topic", "cli-keys", "--partitions", "3", *bs)
    lines = [f"k{i}\tv{i}" for i in range(60)]
    ok("console-producer", "--topic", "cli-keys", "--property", "parse.key=true", *bs,
       stdin="\n".join(lines).encode())
    out = ok("console-consumer", "--topic", "cli-keys", "--from-beginning", "--max-messages", "60",
             "--property", "print.key=true", "--property", "print.partition=true", *bs)
    got = [line.split("\t") for line in out.splitlines()]
    assert sorted(f"{k}\t{v}" for _, k, v in got) == sorted(lines)
    for part, key, _ in got:
        assert part == f"Partition:{partition_for(key.encode(), 3)}"
    # per key order is kept: values of one partition appear in production order
    for p in range(3):
        seq = [int(v[1:]) for part, _, v in got if part == f"Partition:{p}"]
        assert seq == sorted(seq)


def _segment(broker, topic: str) -> str:
    d = os.path.join(broker.log_dirs[0], f"{topic}-0")
    return os.path.join(d, "00000000000000000000.log")


def test_dump_log_verify_crc(module_broker, tmp_path):
    bs = ("--bootstrap-server", module_broker.bootstrap)
    ok("topics", "--create", "--topic", "cli-dump", "--partitions", "1", *bs)
    ok("console-producer", "--topic", "cli-dump", "--batch-size", "2", *bs,
       stdin=b"one\ntwo\nthree\n")
    seg = _segment(module_broker, "cli-dump")
    out = ok("dump-log", "--files", seg, "--verify-crc", "--print-data-log")
    batches = [line for line in out.splitlines() if line.startswith("baseOffset:")]
    assert len(batches) == 2 and all("isvalid: true" in b for b in batches)
    assert "baseOffset: 0 lastOffset: 1 count: 2" in batches[0]
    assert "baseOffset: 2 lastOffset: 2 count: 1" in batches[1]
    assert [line.rsplit("payload: ", 1)[1] for line in out.splitlines() if "payload: " in line] == \
        ["one", "two", "three"]
    # a copy with one flipped byte in the second batch's records: reported, non-zero exit
    bad = tmp_path / "00000000000000000000.log"
    shutil.copy(seg, bad)
    data = bytearray(bad.read_bytes())
    data[-2] ^= 0xFF
    bad.write_bytes(bytes(data))
    res = cli("dump-log", "--files", str(bad), "--verify-crc")
    assert res.returncode != 0
    text = res.stdout.decode()
    assert "isvalid: true" in text  # the first batch is still fine
    assert "isvalid: false" in text or "invalid bytes" in text, text
    assert b"Traceback" not in res.stderr


def test_errors_are_one_line_without_traceback(module_broker):
    dead = f"127.0.0.1:{free_port()}"
    res = cli("topics", "--list", "--bootstrap-server", dead, "--timeout", "1")
    err = res.stderr.decode()
    assert res.returncode == 1
    assert err.strip().count("\n") == 0 and dead in err and "Traceback" not in err, err
    res = cli("--verbose", "topics", "--list", "--bootstrap-server", dead, "--timeout", "1")
    assert res.returncode != 0 and "Traceback" in res.stderr.decode()

    bs = ("--bootstrap-server", module_broker.bootstrap)
    res = cli("topics", "--create", "--topic", "cli-bad", "--config", "retention.ms=forever", *bs)
    err = res.stderr.decode()
    assert res.returncode != 0 and "Traceback" not in err
    assert err.strip().count("\n") == 0, err
    assert "retention.ms" in err and "forever" in err, err
    assert "cli-bad" not in ok("topics", "--list", *bs).split()

    for args, needle in [
        (("topics", "--create", *bs), "--topic"),
        (("console-consumer", "--topic", "x", "--offset", "3", *bs), "--partition"),
        (("dump-log", "--files", "/nonexistent.log"), "/nonexistent.log"),
        (("topics", "--list", "--bootstrap-server", "nohostport"), "nohostport"),
    ]:
        res = cli(*args)
        err = res.stderr.decode()
        assert res.returncode == 2, (args, err)
        assert needle in err and "Traceback" not in err, (args, err)
