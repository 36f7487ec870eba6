"""Pre-0.11 topics: the source reads magic 0/1 message sets (alone and mixed with v2 batches in
one segment) into the rows v2 batches give, in place and through the broker.

Two kinds of input. Log dirs written here, with no broker: segments of the down-converter's
magic 0/1 sets (every legacy codec, magic 0's lz4 with Kafka 0.8's frame checksum, LogAppendTime,
offset gaps) and one segment of v2, magic 1, magic 0 and v2 again; the expected rows come from
the project's Python readers of both formats. And a real broker storing topics created with
``message.format.version`` 0.8.2 and 0.10.2, one of them switched to 3.0 midway; there kcat is
the reference, and the in-place and remote reads must give the same rows.
"""

from __future__ import annotations

import os
import random
import struct

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from appliance.records.batch import build_batch, iter_batches
from appliance.records.batch import decode_batch as decode_v2
from appliance.records.down_convert import down_convert_batches
from appliance.records.legacy import iter_message_set
from appliance.records.record_types import Compression, Record, TimestampType
from appliance.storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT, write_checkpoint
from appliance.storage.reader import LogReader
from spark.catalog import offset_for_timestamp
from tests.spark.conftest import create_topic, kcat, produce

_LEGACY = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4)
_MAGIC_AT = 16
_COLS = "topic, partition, offset, key, value, unix_micros(timestamp) AS ts, timestampType, headers"


def _v2(rng: random.Random, base: int, codecs, headers: bool = False) -> tuple[bytes, int]:
    out = b""
    for i, codec in enumerate(codecs):
        recs, off = [], base
        for _ in range(rng.randint(5, 40)):
            hdrs = (("h", rng.randbytes(3)),) if headers and rng.random() < 0.5 else ()
            recs.append(Record(off, 1_700_000_000_000 + rng.randint(0, 900),
                               None if rng.random() < 0.25 else rng.randbytes(rng.randint(0, 20)),
                               None if rng.random() < 0.05 else rng.randbytes(rng.randint(0, 150)),
                               hdrs))
            off += rng.choice((1, 1, 2))  # gaps, as compaction leaves them
        lat = {"timestamp_type": TimestampType.LOG_APPEND_TIME} if i == 1 else {}
        out += build_batch(recs, base_offset=base, compression=codec, **lat)
        base = off
    return out, base


def _expected(topic: str, parts: list[tuple[int, bytes]]) -> list[tuple]:
    """Rows as _collect shapes them, from the Python readers: parts are (magic, bytes)."""
    rows = []
    for magic, data in parts:
        if magic == 2:
            for pos, _ in iter_batches(data):
                h, recs = decode_v2(data, pos)
                lat = h.timestamp_type == TimestampType.LOG_APPEND_TIME
                rows += [(topic, 0, r.offset, r.key, r.value, r.timestamp * 1000, int(lat),
                          [(k, v) for k, v in r.headers]) for r in recs]
        else:
            rows += [(topic, 0, m.offset, m.key, m.value, m.timestamp * 1000,
                      -1 if magic == 0 else int(m.timestamp_type == TimestampType.LOG_APPEND_TIME),
                      []) for m in iter_message_set(data)]
    return rows


def _collect(df) -> list[tuple]:
    return sorted(
        (r.topic, r.partition, r.offset, None if r.key is None else bytes(r.key),
         None if r.value is None else bytes(r.value), r.ts, r.timestampType,
         [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers])
        for r in df.selectExpr(*_COLS.split(", ")).collect())


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """A log dir with three one-segment partitions and no broker: (path, expected rows)."""
    d = str(tmp_path_factory.mktemp("legacy-logdir"))
    rng = random.Random(16)
    topics: dict[str, list[tuple[int, bytes]]] = {}
    v2, _ = _v2(rng, 0, (*_LEGACY, Compression.NONE))
    topics["old0"] = [(0, down_convert_batches(v2, magic=0))]
    v2, _ = _v2(rng, 5, (*_LEGACY, Compression.GZIP))
    topics["old1"] = [(1, down_convert_batches(v2, magic=1))]
    a, base = _v2(rng, 0, (Compression.NONE, Compression.ZSTD), headers=True)
    b, base = _v2(rng, base, _LEGACY)
    c, base = _v2(rng, base, _LEGACY)
    e, base = _v2(rng, base, (Compression.LZ4, Compression.NONE), headers=True)
    topics["mixed"] = [(2, a), (1, down_convert_batches(b, magic=1)),
                       (0, down_convert_batches(c, magic=0)), (2, e)]
    # One flipped byte in the value of an uncompressed message: its CRC32 no longer matches.
    v2, _ = _v2(rng, 0, (Compression.NONE,))
    bad = bytearray(down_convert_batches(v2, magic=1))
    second = 12 + struct.unpack_from(">i", bad, 8)[0]
    bad[second + 12 + struct.unpack_from(">i", bad, second + 8)[0] - 1] ^= 0x20
    topics["bad"] = [(1, bytes(bad))]
    hws = {}
    expected = []
    for topic, parts in topics.items():
        os.mkdir(os.path.join(d, f"{topic}-0"))
        with open(os.path.join(d, f"{topic}-0", f"{0:020d}.log"), "wb") as f:
            f.write(b"".join(data for _, data in parts))
        if topic == "bad":
            hws[(topic, 0)] = 1 << 20
            continue
        rows = _expected(topic, parts)
        hws[(topic, 0)] = rows[-1][2] + 1
        expected += rows
    write_checkpoint(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT), hws)
    if LogReader(os.path.join(d, "old0-0")).read(0, 1 << 20) is None:
        pytest.skip("the storage reader does not walk magic 0/1 entries (they come with the "
                    "legacy store, branch wip5/legacy_store)")
    return d, sorted(expected), second


def _local(spark, log_dir: str, topics: str, **opts: str):
    r = (spark.read.format("appliance").option("log.dirs", log_dir).option("subscribe", topics)
         .option("includeHeaders", "true"))
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def test_offline_legacy_and_mixed_segments(spark, offline):
    log_dir, expected, _ = offline
    # One query: the smallest chunks allowed (4 KiB, ~6 per mixed segment) cut the runs, and
    # the mixed topic is read from inside its first compressed magic 1 wrapper, whose tail only
    # is kept.
    mixed = [r for r in expected if r[0] == "mixed"]
    lo = mixed[len(mixed) // 3][2] + 1
    got = _collect(_local(spark, log_dir, "old0,old1,mixed", **{
        "read.chunk.bytes": "4096",
        "startingOffsets": f'{{"old0": {{"0": -2}}, "old1": {{"0": -2}}, "mixed": {{"0": {lo}}}}}'}))
    assert got == [r for r in expected if r[0] != "mixed" or r[2] >= lo]
    assert {r[6] for r in got if r[0] == "old0"} == {-1}  # magic 0: no timestamp
    assert {r[6] for r in got if r[0] == "old1"} == {0, 1}
    assert {r[6] for r in got if r[0] == "mixed"} == {-1, 0, 1}


def test_offline_crc_mismatch_names_file_and_byte(spark, offline):
    log_dir, _, second = offline
    with pytest.raises(Exception) as e:
        _local(spark, log_dir, "bad").collect()
    seg = os.path.join(log_dir, "bad-0", f"{0:020d}.log")
    assert f"{seg}: corrupt batch at byte {second}: CRC32 mismatch" in str(e.value)


def test_offline_timestamp_lookup(offline):
    """startingTimestamp's lookup (ListOffsets by time) in legacy segments: magic 1 messages
    carry timestamps (wrappers their inner ones), magic 0 none, so nothing is found there."""
    log_dir, expected, _ = offline
    old1 = [r for r in expected if r[0] == "old1"]
    for r in old1[::7]:
        ts = r[5] // 1000
        want = next(x[2] for x in old1 if x[5] // 1000 >= ts)
        assert offset_for_timestamp(os.path.join(log_dir, "old1-0"), ts, 0, 1 << 20) == want
    assert offset_for_timestamp(os.path.join(log_dir, "old0-0"), 0, 0, 1 << 20) is None


@pytest.fixture(scope="module")
def stored(broker):
    """Topics a real broker stores in magic 0 and 1 (one switched to v2 midway)."""
    plan = {"f08": ("0.8.2", "gzip"), "f010": ("0.10.2", "snappy"), "f010lz4": ("0.10.2", "lz4"),
            "fswitch": ("0.10.2", "none")}
    for topic, (version, _) in plan.items():
        create_topic(broker, topic, 2, **{"message.format.version": version})
    for topic, (_, codec) in plan.items():
        produce(broker, topic, ({"value": b"v%d-" % i + b"x" * (i % 60),
                                 **({"key": b"k%d" % (i % 13)} if i % 4 else {})}
                                for i in range(400)), compression=codec,
                **{"batch.num.messages": 40})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ResourceType.TOPIC, "fswitch", incremental_configs=[ConfigEntry(
        "message.format.version", "3.0", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)
    produce(broker, "fswitch", ({"value": b"new%d" % i, "headers": [("h", b"%d" % i)]}
                                for i in range(300)), compression="zstd")
    return broker, list(plan)


def _magics(broker, topic: str) -> set[int]:
    """The magic byte of every entry of the topic's .log files."""
    seen = set()
    for d in broker.log_dirs:
        for name in os.listdir(d):
            if not name.startswith(f"{topic}-"):
                continue
            for seg in sorted(os.listdir(os.path.join(d, name))):
                if seg.endswith(".log"):
                    data = open(os.path.join(d, name, seg), "rb").read()
                    p = 0
                    while p + _MAGIC_AT < len(data):
                        seen.add(data[p + _MAGIC_AT])
                        p += 12 + struct.unpack_from(">i", data, p + 8)[0]
    return seen


def test_broker_stored_legacy_topics(spark, stored):
    broker, topics = stored
    if _magics(broker, "f08") != {0}:
        pytest.skip("the broker stores v2 for pre-0.11 topics (the legacy store comes with "
                    "branch wip5/legacy_store)")
    assert _magics(broker, "f010") == {1} and _magics(broker, "fswitch") == {1, 2}
    names = ",".join(topics)
    in_place = (spark.read.format("appliance").option("log.dirs", ",".join(broker.log_dirs))
                .option("shm.name", f"appliance-test-{broker.port}").option("subscribe", names)
                .option("includeHeaders", "true").load())
    remote = (spark.read.format("appliance").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", names).option("includeHeaders", "true")
              .option("read.chunk.bytes", "4096").load())
    got = _collect(in_place)
    assert got == _collect(remote)
    for topic in topics:
        ref = kcat(broker, topic)
        mine = [(p, o, "NULL" if k is None else k.decode(), "NULL" if v is None else v.decode(),
                 ",".join(f"{hk}={hv.decode()}" for hk, hv in h))
                for t, p, o, k, v, _ts, _tt, h in got if t == topic]
        assert mine == ref, topic
    types = {t: {r[6] for r in got if r[0] == t} for t in topics}
    assert types["f08"] == {-1} and types["f010"] == {0} and types["fswitch"] == {0}
