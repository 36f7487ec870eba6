"""Real Kafka clients (kcat, kafka-python, confluent-kafka, aiokafka) against the real broker
process over TCP: produce/consume, metadata, offsets, admin, and 100k messages per codec."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from appliance.client.connection import BrokerConnection
from appliance.errors import ErrorCode
from appliance.records.batch import (
    build_batch,
    decode_batch,
    decode_records,
    iter_batches,
    read_header,
)
from tests.broker.clients import (
    check_numbered,
    consume_confluent,
    consume_kafka_python,
    consume_kcat,
    create_topic,
    produce_numbered,
)
from tests.broker.wire import RawConnection, produce_body

pytestmark = pytest.mark.timeout(180)


def kcat(bootstrap: str, *args: str, stdin: bytes | None = None) -> str:
    res = subprocess.run(["kcat", "-b", bootstrap, *args], input=stdin, capture_output=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    return res.stdout.decode()


def fetch_raw(bootstrap: str, topic: str, partition: int, offset: int = 0) -> bytes:
    """The record bytes a plain Fetch returns (our client; no library decoding in between)."""
    host, port = bootstrap.rsplit(":", 1)
    with BrokerConnection(host, int(port)) as c:
        resp = c.request(1, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                             "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                             "topics": [{"topic": topic, "partitions": [
                                 {"partition": partition, "fetch_offset": offset,
                                  "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                             "forgotten_topics_data": [], "rack_id": ""})
    pr = resp.responses[0].partitions[0]
    assert pr.error_code == 0
    return bytes(pr.records or b"")


# -- kcat -----------------------------------------------------------------------------------

def test_kcat_produce_consume_keys_headers_offsets(module_broker):
    bs = module_broker.bootstrap
    create_topic(bs, "kc-basic")
    kcat(bs, "-P", "-t", "kc-basic", "-p", "0", "-K", ":", "-H", "h1=v1", "-H", "h2=v2",
         stdin=b"a:one\nb:two\nc:three\n")
    out = kcat(bs, "-C", "-t", "kc-basic", "-o", "beginning", "-e", "-q",
               "-f", "%p|%o|%k|%s|%h\n")
    assert out.splitlines() == ["0|0|a|one|h1=v1,h2=v2", "0|1|b|two|h1=v1,h2=v2",
                                "0|2|c|three|h1=v1,h2=v2"]
    # a consumer starting at an offset sees only the rest
    out = kcat(bs, "-C", "-t", "kc-basic", "-o", "1", "-e", "-q", "-f", "%o %s\n")
    assert out.splitlines() == ["1 two", "2 three"]


def test_kcat_metadata_lists_broker_and_partitions(module_broker):
    bs = module_broker.bootstrap
    create_topic(bs, "kc-meta", partitions=4)
    out = kcat(bs, "-L", "-t", "kc-meta")
    assert f"broker 0 at 127.0.0.1:{module_broker.port}" in out
    assert 'topic "kc-meta" with 4 partitions' in out
    for p in range(4):
        assert f"partition {p}, leader 0, replicas: 0, isrs: 0" in out
    full = kcat(bs, "-L")  # all topics
    assert 'topic "kc-meta" with 4 partitions' in full
    listed = {line.split('"')[1] for line in full.splitlines() if line.strip().startswith("topic ")}
    md = AdminClient({"bootstrap.servers": bs}).list_topics(timeout=10)
    assert listed == set(md.topics) and "kc-meta" in listed


def test_kcat_query_offset_by_timestamp(module_broker):
    bs = module_broker.bootstrap
    create_topic(bs, "kc-times")
    p = Producer({"bootstrap.servers": bs})
    base = 1_700_000_000_000
    for i in range(5):  # timestamps base, base+1000, ... at offsets 0..4
        p.produce("kc-times", b"m%d" % i, partition=0, timestamp=base + 1000 * i)
    assert p.flush(10) == 0
    out = kcat(bs, "-Q", "-t", f"kc-times:0:{base + 1500}")
    assert "offset 2" in out, out  # first message at or after the time
    out = kcat(bs, "-Q", "-t", f"kc-times:0:{base}")
    assert "offset 0" in out, out
    out = kcat(bs, "-Q", "-t", f"kc-times:0:{base + 10_000}")
    assert "offset -1" in out, out  # after the last message: none (Kafka answers -1)


# -- kafka-python ---------------------------------------------------------------------------

def test_kafka_python_default_producer_is_idempotent(module_broker):
    from kafka import KafkaProducer
    bs = module_broker.bootstrap
    create_topic(bs, "kp-idem")
    prod = KafkaProducer(bootstrap_servers=bs)
    try:
        assert prod.config["enable_idempotence"] is True
        assert prod.config["acks"] in (-1, "all")
        metas = [prod.send("kp-idem", value=b"v%d" % i, key=b"k", partition=0).get(timeout=20)
                 for i in range(3)]
        pid = prod._transaction_manager.producer_id_and_epoch.producer_id
    finally:
        prod.close(timeout=10)
    assert [m.offset for m in metas] == [0, 1, 2]
    assert pid >= 0  # it asked the broker (InitProducerId) for a producer id
    data = fetch_raw(bs, "kp-idem", 0)
    headers = [read_header(data, pos) for pos, _ in iter_batches(data)]
    # the stored batches carry that id and consecutive sequences: idempotence really was on
    assert {h.producer_id for h in headers} == {pid}
    seqs = []
    for h in headers:
        seqs.extend(range(h.base_sequence, h.base_sequence + h.records_count))
    assert seqs == [0, 1, 2]


def test_kafka_python_acks1_and_groupless_consumer(module_broker):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    bs = module_broker.bootstrap
    create_topic(bs, "kp-acks1", partitions=2)
    prod = KafkaProducer(bootstrap_servers=bs, acks=1, enable_idempotence=False)
    try:
        for i in range(20):
            prod.send("kp-acks1", value=b"val-%d" % i, key=b"key-%d" % i, partition=i % 2,
                      headers=[("n", b"%d" % i)])
        prod.flush(20)
    finally:
        prod.close(timeout=10)
    cons = KafkaConsumer(bootstrap_servers=bs, group_id=None, auto_offset_reset="earliest",
                         enable_auto_commit=False)
    try:
        tps = [KTP("kp-acks1", 0), KTP("kp-acks1", 1)]
        cons.assign(tps)
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 20 and time.monotonic() < deadline:
            for msgs in cons.poll(timeout_ms=500).values():
                got.extend(msgs)
    finally:
        cons.close()
    assert sorted((m.partition, m.offset, m.key, m.value, tuple(m.headers)) for m in got) == sorted(
        (i % 2, i // 2, b"key-%d" % i, b"val-%d" % i, (("n", b"%d" % i),)) for i in range(20))


# -- confluent-kafka and aiokafka -----------------------------------------------------------

def test_confluent_binary_values_round_trip(module_broker):
    """All 256 byte values, a null key, empty and null values, many headers: byte-identical."""
    bs = module_broker.bootstrap
    create_topic(bs, "ck-bin")
    msgs = [(None, bytes(range(256))), (b"\x00\xff", b""), (b"k", None),
            (b"big", bytes(range(256)) * 400)]
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    for k, v in msgs:
        p.produce("ck-bin", v, k, partition=0, headers=[("a", b"\x00\x01"), ("b", None), ("a", b"2")])
    assert p.flush(10) == 0
    got = consume_confluent(bs, "ck-bin", 1, len(msgs))[0]
    assert [(k, v) for _, k, v, _ in got] == msgs
    assert all(h == [("a", b"\x00\x01"), ("b", None), ("a", b"2")] for *_, h in got)


def test_aiokafka_producer_consumer(module_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP
    bs = module_broker.bootstrap
    create_topic(bs, "aio", partitions=2)

    async def run() -> list:
        prod = AIOKafkaProducer(bootstrap_servers=bs, enable_idempotence=True)
        await prod.start()
        try:
            for i in range(30):
                await prod.send_and_wait("aio", b"v%d" % i, key=b"k%d" % i, partition=i % 2,
                                         headers=[("i", b"%d" % i)])
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(bootstrap_servers=bs, group_id=None, auto_offset_reset="earliest",
                                enable_auto_commit=False)
        await cons.start()
        try:
            cons.assign([ATP("aio", 0), ATP("aio", 1)])
            got = []
            deadline = time.monotonic() + 20
            while len(got) < 30 and time.monotonic() < deadline:
                batch = await cons.getmany(timeout_ms=500)
                for msgs in batch.values():
                    got.extend(msgs)
            return got
        finally:
            await cons.stop()

    got = asyncio.run(run())
    assert sorted((m.partition, m.offset, m.key, m.value, tuple(m.headers)) for m in got) == sorted(
        (i % 2, i // 2, b"k%d" % i, b"v%d" % i, (("i", b"%d" % i),)) for i in range(30))


# -- 100,000 messages per codec -------------------------------------------------------------

COUNT = 100_000


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_100k_messages_per_codec(module_broker, codec):
    bs = module_broker.bootstrap
    topic = f"bulk-{codec}"
    create_topic(bs, topic, partitions=3)
    produce_numbered(bs, topic, COUNT, 3, compression=codec)
    check_numbered(consume_confluent(bs, topic, 3, COUNT), COUNT, 3)
    # the stored batches really use the codec (the broker keeps the producer's compression);
    # librdkafka sends a batch that compression would not shrink (a first batch of one or two
    # small records) uncompressed, so some may be plain
    data = fetch_raw(bs, topic, 0)
    codecs, pos = [], 0
    while pos + 61 <= len(data):
        head = read_header(data, pos)
        if pos + head.size > len(data):
            break  # the fetch's last batch, cut by max_bytes
        codecs.append(head.compression.name.lower())
        pos += head.size
    assert codec in codecs and set(codecs) <= {codec, "none"}, codecs
    if codec == "zstd":
        check_numbered(consume_kcat(bs, topic, 3), COUNT, 3)
    if codec == "lz4":
        check_numbered(consume_kafka_python(bs, topic, 3, COUNT), COUNT, 3)


# -- admin ----------------------------------------------------------------------------------

def test_kafka_python_admin(module_broker):
    from kafka.admin import ConfigResource as KCR
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewPartitions as KNP
    from kafka.admin import NewTopic as KNT
    from kafka.errors import (
        InvalidPartitionsError,
        InvalidReplicationFactorError,
        InvalidTopicError,
        TopicAlreadyExistsError,
        UnknownTopicOrPartitionError,
    )
    bs = module_broker.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        admin.create_topics([KNT("kpa-1", 2, 1, topic_configs={"retention.ms": "123456"})])
        assert "kpa-1" in admin.list_topics()
        res = admin.describe_configs([KCR(ConfigResourceType.TOPIC, "kpa-1")])
        modified = res["topic"]["kpa-1"]  # kafka-python's default filter: overrides only
        assert list(modified) == ["retention.ms"], modified
        assert modified["retention.ms"]["value"] == "123456"
        everything = admin.describe_configs([KCR(ConfigResourceType.TOPIC, "kpa-1")],
                                            config_filter="all")["topic"]["kpa-1"]
        assert everything["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([KNT("kpa-1", 1, 1)])
        with pytest.raises(InvalidTopicError):
            admin.create_topics([KNT("bad/name", 1, 1)])
        with pytest.raises(InvalidPartitionsError):
            admin.create_topics([KNT("kpa-zero", 0, 1)])
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics([KNT("kpa-rf3", 1, 3)])
        admin.create_partitions({"kpa-1": KNP(total_count=5)})
        md = admin.describe_topics(["kpa-1"])
        assert len(md[0]["partitions"]) == 5
        with pytest.raises(InvalidPartitionsError):  # never shrink
            admin.create_partitions({"kpa-1": KNP(total_count=3)})
        admin.delete_topics(["kpa-1"])
        assert "kpa-1" not in admin.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics(["kpa-1"])
    finally:
        admin.close()


def _admin_error(fut) -> int:
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=20)
    return ei.value.args[0].code()


def test_confluent_admin(module_broker):
    bs = module_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    fs = admin.create_topics([NewTopic("cka-1", 3, 1, config={"retention.ms": "98765",
                                                               "cleanup.policy": "delete"})])
    fs["cka-1"].result(timeout=20)
    desc = admin.describe_configs([ConfigResource("topic", "cka-1")])
    cfg = next(iter(desc.values())).result(timeout=20)
    assert cfg["retention.ms"].value == "98765"
    assert not cfg["retention.ms"].is_default
    assert cfg["segment.bytes"].is_default
    assert admin.list_topics(timeout=10).topics["cka-1"].partitions.keys() == {0, 1, 2}
    assert _admin_error(admin.create_topics([NewTopic("cka-1", 1, 1)])["cka-1"]) == \
        ErrorCode.TOPIC_ALREADY_EXISTS
    assert _admin_error(admin.create_topics([NewTopic("x" * 250, 1, 1)])["x" * 250]) == \
        ErrorCode.INVALID_TOPIC_EXCEPTION
    assert _admin_error(admin.create_topics([NewTopic("cka-0", 0, 1)])["cka-0"]) == \
        ErrorCode.INVALID_PARTITIONS
    assert _admin_error(admin.create_topics([NewTopic("cka-rf", 1, 3)])["cka-rf"]) == \
        ErrorCode.INVALID_REPLICATION_FACTOR
    assert _admin_error(admin.create_topics(
        [NewTopic("cka-cfg", 1, 1, config={"retention.ms": "soon"})])["cka-cfg"]) == \
        ErrorCode.INVALID_CONFIG
    admin.create_partitions([NewPartitions("cka-1", 4)])["cka-1"].result(timeout=20)
    assert len(admin.list_topics(timeout=10).topics["cka-1"].partitions) == 4
    admin.delete_topics(["cka-1"])["cka-1"].result(timeout=20)
    assert "cka-1" not in admin.list_topics(timeout=10).topics
    assert _admin_error(admin.delete_topics(["cka-1"])["cka-1"]) == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # a deleted topic's name can be used again, and starts empty
    admin.create_topics([NewTopic("cka-1", 1, 1)])["cka-1"].result(timeout=20)
    c = Consumer({"bootstrap.servers": bs, "group.id": "unused"})
    try:
        assert c.get_watermark_offsets(TopicPartition("cka-1", 0), timeout=10) == (0, 0)
    finally:
        c.close()


# IncrementalAlterConfigs (API 44) is not served yet; the classic AlterConfigs is
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_alter_and_describe_configs(module_broker):
    bs = module_broker.bootstrap
    create_topic(bs, "cfg", config={"retention.ms": "1000000"})
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource("topic", "cfg", set_config={"segment.ms": "600000"})
    next(iter(admin.alter_configs([res]).values())).result(timeout=20)
    cfg = next(iter(admin.describe_configs([ConfigResource("topic", "cfg")]).values())).result(20)
    assert cfg["segment.ms"].value == "600000" and not cfg["segment.ms"].is_default
    # AlterConfigs replaces the whole override set (Kafka's semantics): retention.ms is default again
    assert cfg["retention.ms"].is_default
    bad = ConfigResource("topic", "cfg", set_config={"segment.ms": "often"})
    with pytest.raises(KafkaException) as ei:
        next(iter(admin.alter_configs([bad]).values())).result(timeout=20)
    assert ei.value.args[0].code() == ErrorCode.INVALID_CONFIG
    missing = ConfigResource("topic", "no-such-cfg")
    with pytest.raises(KafkaException) as ei:
        next(iter(admin.describe_configs([missing]).values())).result(timeout=20)
    assert ei.value.args[0].code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    broker_cfg = next(iter(admin.describe_configs([ConfigResource("broker", "0")]).values())).result(20)
    assert broker_cfg["num.partitions"].value == "1"
    assert broker_cfg["log.dirs"].value == module_broker.log_dirs[0]


# -- ListOffsets ----------------------------------------------------------------------------

def test_confluent_list_offsets(module_broker):
    bs = module_broker.bootstrap
    create_topic(bs, "lo", partitions=2)
    p = Producer({"bootstrap.servers": bs})
    base = 1_600_000_000_000
    for i in range(10):  # partition 0: offsets 0..9 at base + 10*i
        p.produce("lo", b"x", partition=0, timestamp=base + 10 * i)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": bs, "group.id": "unused"})
    try:
        assert c.get_watermark_offsets(TopicPartition("lo", 0), timeout=10) == (0, 10)
        assert c.get_watermark_offsets(TopicPartition("lo", 1), timeout=10) == (0, 0)
        def at(ts: int, partition: int = 0) -> int:
            (r,) = c.offsets_for_times([TopicPartition("lo", partition, ts)], timeout=10)
            assert r.error is None
            return r.offset

        assert at(base + 35) == 4  # first message at or after the time
        assert at(base + 40) == 4
        assert at(base) == 0
        assert at(0) == 0
        assert at(base + 90) == 9
        assert at(base + 91) == -1  # after the last message: none
        assert at(base, partition=1) == -1  # empty partition
    finally:
        c.close()


def test_records_decode_with_our_reader_too(module_broker):
    """What the clients wrote decodes with our own batch reader (same keys, values, headers)."""
    bs = module_broker.bootstrap
    create_topic(bs, "ours")
    kcat(bs, "-P", "-t", "ours", "-p", "0", "-K", ":", "-H", "x=y", stdin=b"k1:v1\nk2:v2\n")
    data = fetch_raw(bs, "ours", 0)
    recs = [r for pos, _ in iter_batches(data) for r in decode_batch(data, pos)[1]]
    assert [(r.offset, r.key, r.value, list(r.headers)) for r in recs] == [
        (0, b"k1", b"v1", [("x", b"y")]), (1, b"k2", b"v2", [("x", b"y")])]


def test_auto_create_on_produce(module_broker):
    """A producer writing to an unknown topic creates it (auto.create.topics.enable, default)."""
    bs = module_broker.bootstrap
    kcat(bs, "-P", "-t", "auto-made", stdin=b"first\n")
    out = kcat(bs, "-C", "-t", "auto-made", "-o", "beginning", "-e", "-q", "-f", "%p %o %s\n")
    assert out.splitlines() == ["0 0 first"]
    assert 'topic "auto-made" with 1 partitions' in kcat(bs, "-L", "-t", "auto-made")


def test_concurrent_create_same_topic_exactly_one_wins(module_broker):
    """Racing CreateTopics on many connections (spread over the network workers by
    SO_REUSEPORT): one succeeds, the rest get TOPIC_ALREADY_EXISTS, the topic is whole."""
    import concurrent.futures

    host, port = module_broker.bootstrap.rsplit(":", 1)
    conns = [BrokerConnection(host, int(port)) for _ in range(8)]
    barrier = __import__("threading").Barrier(len(conns))

    def create(c: BrokerConnection) -> int:
        barrier.wait()
        r = c.request(19, {"topics": [{"name": "race", "num_partitions": 4, "replication_factor": 1,
                                       "assignments": [], "configs": []}],
                           "timeout_ms": 20000, "validate_only": False})
        return r.topics[0].error_code

    try:
        with concurrent.futures.ThreadPoolExecutor(len(conns)) as ex:
            codes = list(ex.map(create, conns))
    finally:
        for c in conns:
            c.close()
    assert sorted(codes) == [0] + [ErrorCode.TOPIC_ALREADY_EXISTS] * 7, codes
    md = AdminClient({"bootstrap.servers": module_broker.bootstrap}).list_topics(timeout=10)
    assert sorted(md.topics["race"].partitions) == [0, 1, 2, 3]
    assert all(p.error is None for p in md.topics["race"].partitions.values())


def test_index_entry_does_not_read_around_the_sparse_index(module_broker):
    """The first entry of a new segment's offset and time index (written by the second batch:
    the first is less than index.interval.bytes after the segment start) puts one page of the
    index in the page cache. The index files are sparse 10 MiB files mapped by the disk worker;
    a fault with the kernel's read-around filled 8 MiB of each with zeros (fincore: 2048 pages)
    and cost the disk worker's only thread 2-8 ms per file, which collapsed perf/run.py's
    1,000-partition produce."""
    from pathlib import Path

    bs = module_broker.bootstrap
    create_topic(bs, "idx-cold")
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for _ in range(2):  # two batches of 10 KB: the second is indexed
        for _ in range(100):
            p.produce("idx-cold", b"v" * 100, partition=0)
        assert p.flush(10) == 0
    part = Path(module_broker.log_dirs[0]) / "idx-cold-0"
    for name in ("00000000000000000000.index", "00000000000000000000.timeindex"):
        path = part / name
        with open(path, "rb") as f:  # the entry is there (the disk worker wrote its page)
            assert f.read(8) != bytes(8), f"{name} has no entry: the test would prove nothing"
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "PAGES,SIZE", str(path)],
                             capture_output=True, text=True, timeout=30, check=True).stdout.split()
        pages, size = int(out[0]), int(out[1])
        assert size >= 1 << 20, f"{name} is {size} bytes: not the preallocated index this test is about"
        assert pages <= 4, f"{name}: {pages} pages in the page cache for one entry (read-around)"


# -- the produce fast path ---------------------------------------------------------------------

def _answers_of(c: RawConnection, frames: list[bytes], cut: bool = False) -> list:
    """Send ``frames`` with one write (``cut``: one frame, in two writes 50 ms apart, so the
    broker reads half a request first) and return their decoded answers in order."""
    import appliance.protocol as proto
    if cut:
        (frame,) = frames
        c.send_raw(frame[:len(frame) // 2])
        time.sleep(0.05)
        c.send_raw(frame[len(frame) // 2:])
    else:
        c.send_raw(b"".join(frames))
    out: list = []
    while len(out) < len(frames):
        event = c.conn.next_event()
        if isinstance(event, proto.Response):
            out.append(event.body)
        elif event is proto.NEED_DATA:
            c.conn.receive_data(c.sock.recv(1 << 20))
        else:
            raise ConnectionResetError(f"broker closed the connection ({event})")
    return out


def test_fast_and_generic_produce_answer_alike(module_broker):
    """A request alone in its read and requests pipelined in one read take the fast path, a
    request cut across two reads the generic path: for every version 3-9 the same answers, and
    the records land in request order."""
    create_topic(module_broker.bootstrap, "fastpath-alike", partitions=1)
    sent: list[bytes] = []
    answers: list = []
    with RawConnection(module_broker.port) as c:
        for version in range(3, 10):
            values = [b"v%d-%d" % (version, i) for i in range(4)]
            sent += values
            frames = [c.conn.send_request(0, version, produce_body(
                "fastpath-alike", 0, build_batch([(None, v)]), acks=-1 if i % 2 else 1))[1]
                for i, v in enumerate(values)]
            answers += [(version, a) for a in _answers_of(c, frames[:1])]
            answers += [(version, a) for a in _answers_of(c, frames[1:3])]
            answers += [(version, a) for a in _answers_of(c, frames[3:], cut=True)]
    for offset, (version, a) in enumerate(answers):
        (topic,) = a.responses
        (p,) = topic.partition_responses
        assert (topic.name, p.index, p.error_code, p.base_offset) == ("fastpath-alike", 0, 0, offset)
        assert p.log_append_time_ms == -1
        assert p.log_start_offset == (0 if version >= 5 else -1)
    got = [r.value for r in decode_records(fetch_raw(module_broker.bootstrap, "fastpath-alike", 0))]
    assert got == sent


def test_fast_path_keeps_idempotence(module_broker):
    """A retried idempotent batch (same producer id, epoch, sequence) sent alone is answered
    with its first offset and not written again; a sequence gap is refused."""
    create_topic(module_broker.bootstrap, "fastpath-idem", partitions=1)
    with RawConnection(module_broker.port) as c:
        pid = c.request(22, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert pid.error_code == 0

        def produce(seq: int, value: bytes):
            batch = build_batch([(None, value)], producer_id=pid.producer_id,
                                producer_epoch=pid.producer_epoch, base_sequence=seq)
            r = c.request(0, 7, produce_body("fastpath-idem", 0, batch, acks=-1))
            p = r.responses[0].partition_responses[0]
            return p.error_code, p.base_offset

        assert produce(0, b"a") == (0, 0)
        assert produce(1, b"b") == (0, 1)
        assert produce(1, b"b") == (0, 1)  # the retry: acknowledged at its first offset
        assert produce(3, b"d")[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(2, b"c") == (0, 2)
    got = [r.value for r in decode_records(fetch_raw(module_broker.bootstrap, "fastpath-idem", 0))]
    assert got == [b"a", b"b", b"c"]
