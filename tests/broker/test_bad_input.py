"""Malformed and hostile requests on raw sockets: each gets a specific error or a closed
connection, never a crash; the broker, other connections and stored data carry on."""

from __future__ import annotations

import socket
import struct

import pytest

from appliance.errors import ErrorCode
from appliance.records.batch import build_batch
from tests.broker.clients import create_topic
from tests.broker.wire import (
    RawConnection,
    fetch_body,
    metadata_body,
    produce_body,
    read_frame,
    request_frame,
)
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(60)

MAX_REQUEST = 200_000
MAX_MESSAGE = 8_000
KEPT = "kept"  # written once; must read back unchanged after every test
KEPT_BATCHES = [build_batch([(b"k%d" % i, b"v%d" % i) for i in range(j, j + 3)]) for j in (0, 3)]
# request frame layout: size:int32, api_key:int16, api_version:int16, correlation_id:int32,
# client_id:int16-length string, then the body
_HEADER = struct.Struct(">ihhi")
CLIENT_ID = "raw-test"
BODY_AT = _HEADER.size + 2 + len(CLIENT_ID)


@pytest.fixture(scope="module")
def bad_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("bad"), overrides={
        "socket.request.max.bytes": str(MAX_REQUEST), "message.max.bytes": str(MAX_MESSAGE)})
    with b:
        create_topic(b.bootstrap, KEPT, partitions=2)
        with RawConnection(b.port) as c:
            for batch in KEPT_BATCHES:
                r = c.request(0, 7, produce_body(KEPT, 0, batch, acks=-1))
                assert r.responses[0].partition_responses[0].error_code == 0
        yield b


@pytest.fixture(scope="module")
def bystander(bad_broker):
    """A connection opened before the abuse starts; it must keep working throughout."""
    with RawConnection(bad_broker.port) as c:
        yield c


def _kept_bytes(conn: RawConnection) -> bytes:
    r = conn.request(1, 11, fetch_body(KEPT, 0, 0))
    part = r.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 6
    return bytes(part.records)


@pytest.fixture(autouse=True)
def still_serving(bad_broker, bystander):
    """After each test: the broker, the bystander connection and the stored data are intact."""
    before = _kept_bytes(bystander)
    yield
    md = bystander.request(3, 4, metadata_body([KEPT]))
    assert md.topics[0].error_code == 0 and len(md.topics[0].partitions) == 2
    assert _kept_bytes(bystander) == before
    with RawConnection(bad_broker.port) as fresh:
        assert _kept_bytes(fresh) == before == b"".join(
            _with_offsets(KEPT_BATCHES))  # byte-identical to what was produced (offsets 0, 3)
    assert bad_broker.proc.poll() is None


def _with_offsets(batches: list[bytes]) -> list[bytes]:
    from appliance.records.batch import set_base_offset
    out, next_offset = [], 0
    for b in batches:
        buf = bytearray(b)
        set_base_offset(buf, 0, next_offset)
        next_offset += 3
        out.append(bytes(buf))
    return out


def _log_end(conn: RawConnection, topic: str, partition: int) -> int:
    r = conn.request(2, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
    return r.topics[0].partitions[0].offset


def _raw(broker: BrokerProcess) -> RawConnection:
    return RawConnection(broker.port)


# -- framing --------------------------------------------------------------------------------

@pytest.mark.parametrize("cut", [1, 3, 4, 10, 25])
def test_truncated_frame_then_close(bad_broker, cut):
    frame = request_frame(3, 4, metadata_body([KEPT]), client_id=CLIENT_ID)
    with _raw(bad_broker) as c:
        c.send_raw(frame[:cut])
        c.sock.shutdown(socket.SHUT_WR)  # the peer sees EOF mid-frame
        assert c.closed_by_peer()


def test_truncated_frame_is_answered_once_complete(bad_broker):
    """Bytes that arrive in tiny pieces are one request, not many bad ones."""
    frame = request_frame(3, 4, metadata_body([KEPT]), client_id=CLIENT_ID)
    with _raw(bad_broker) as c:
        for i in range(len(frame)):
            c.send_raw(frame[i:i + 1])
        payload = read_frame(c.sock)
    assert struct.unpack_from(">i", payload)[0] == 7  # our correlation id


@pytest.mark.parametrize("size", [MAX_REQUEST + 1, 2**31 - 1, 0, -1, -(2**31)])
def test_bad_size_prefix_closes(bad_broker, size):
    with _raw(bad_broker) as c:
        c.send_raw(struct.pack(">i", size) + b"\x00" * 16)
        assert c.closed_by_peer()


def test_request_at_max_size_is_read(bad_broker):
    """A request of exactly socket.request.max.bytes is read and answered (the limit is
    inclusive); its batch exceeds message.max.bytes, which the answer says."""
    n = MAX_REQUEST - 200
    for _ in range(5):  # grow the value until the frame is exactly the limit (varints shift)
        frame = request_frame(0, 7, produce_body(KEPT, 1, build_batch([(None, bytes(n))])),
                              client_id=CLIENT_ID)
        n += MAX_REQUEST - (len(frame) - 4)
    assert struct.unpack_from(">i", frame)[0] == MAX_REQUEST
    with _raw(bad_broker) as c:
        c.send_raw(frame)
        payload = read_frame(c.sock)
        assert struct.unpack_from(">i", payload)[0] == 7
        r = c.request(0, 7, produce_body(KEPT, 1, build_batch([(None, bytes(10))])))
        assert r.responses[0].partition_responses[0].error_code == 0


# -- API keys and versions ------------------------------------------------------------------

@pytest.mark.parametrize("api_key", [999, -1, 67, 1000])
def test_unknown_api_key_closes(bad_broker, api_key):
    frame = bytearray(request_frame(3, 4, metadata_body([KEPT]), client_id=CLIENT_ID))
    struct.pack_into(">h", frame, 4, api_key)
    with _raw(bad_broker) as c:
        c.send_raw(bytes(frame))
        assert c.closed_by_peer()


@pytest.mark.parametrize("api_key,version", [(0, 99), (0, 0), (1, 99), (1, -1), (3, 99)])
def test_unsupported_version_closes(bad_broker, api_key, version):
    body = produce_body(KEPT, 0, KEPT_BATCHES[0]) if api_key == 0 else (
        fetch_body(KEPT, 0, 0) if api_key == 1 else metadata_body([KEPT]))
    frame = bytearray(request_frame(api_key, 7 if api_key == 0 else 4, body, client_id=CLIENT_ID))
    struct.pack_into(">h", frame, 6, version)
    with _raw(bad_broker) as c:
        c.send_raw(bytes(frame))
        assert c.closed_by_peer()


def _api_versions_v0_entries(port: int) -> bytes:
    """The api_keys array bytes (count + entries) of a proper ApiVersions v0 answer."""
    with RawConnection(port) as c:
        c.send_raw(request_frame(18, 0, {}, correlation_id=1, client_id=CLIENT_ID))
        payload = read_frame(c.sock)
    assert payload[:6] == struct.pack(">ih", 1, 0)
    return payload[6:]


@pytest.mark.parametrize("version", [4, 9, 32767])  # v3 is ours (flexible)
def test_api_versions_above_range_gets_v0_layout_answer(bad_broker, version):
    entries = _api_versions_v0_entries(bad_broker.port)
    count = struct.unpack_from(">i", entries)[0]
    assert len(entries) == 4 + 6 * count  # v0 layout: no throttle time, no tagged fields
    keys = {struct.unpack_from(">h", entries, 4 + 6 * i)[0] for i in range(count)}
    assert {0, 1, 2, 3, 18} <= keys
    # ApiVersions v3+ bodies are flexible (compact strings, tagged fields): send real v3 bytes
    body = b"\x05appl\x040.1\x00"  # client_software_name, client_software_version, no tags
    header = struct.pack(">hhih", 18, version, 4242, len(CLIENT_ID)) + CLIENT_ID.encode() + b"\x00"
    with _raw(bad_broker) as c:
        c.send_raw(struct.pack(">i", len(header) + len(body)) + header + body)
        payload = read_frame(c.sock)
        # exactly: correlation id (response header v0), UNSUPPORTED_VERSION, our v0 list
        assert payload == struct.pack(">ih", 4242, ErrorCode.UNSUPPORTED_VERSION) + entries
        # and the connection stays usable: the client retries with a version from the list
        c.send_raw(request_frame(18, 2, {}, correlation_id=4243, client_id=CLIENT_ID))
        again = read_frame(c.sock)
    assert again[:6] == struct.pack(">ih", 4243, 0)


# -- malformed bodies -----------------------------------------------------------------------

@pytest.mark.parametrize("length", [-2, -(2**31), 2**31 - 1, 1000, 2])
def test_bad_array_length_closes(bad_broker, length):
    frame = bytearray(request_frame(3, 4, metadata_body([KEPT]), client_id=CLIENT_ID))
    assert struct.unpack_from(">i", frame, BODY_AT)[0] == 1  # the topics array's count
    struct.pack_into(">i", frame, BODY_AT, length)
    with _raw(bad_broker) as c:
        c.send_raw(bytes(frame))
        assert c.closed_by_peer()


@pytest.mark.parametrize("length", [100, 32767, -2])
def test_string_length_past_end_closes(bad_broker, length):
    frame = bytearray(request_frame(3, 4, metadata_body([KEPT]), client_id=CLIENT_ID))
    struct.pack_into(">h", frame, BODY_AT + 4, length)  # the topic name's length
    with _raw(bad_broker) as c:
        c.send_raw(bytes(frame))
        assert c.closed_by_peer()


def test_invalid_utf8_topic_name_closes(bad_broker):
    frame = bytearray(request_frame(3, 4, metadata_body(["abcd"]), client_id=CLIENT_ID))
    at = frame.index(b"abcd")
    frame[at:at + 4] = b"\xff\xfe\xc3\x28"
    with _raw(bad_broker) as c:
        c.send_raw(bytes(frame))
        assert c.closed_by_peer()


def test_garbage_after_valid_request_closes_after_answer(bad_broker):
    """A valid request is answered; the garbage frame behind it closes the connection."""
    frame = request_frame(3, 4, metadata_body([KEPT]), client_id=CLIENT_ID)
    with _raw(bad_broker) as c:
        c.send_raw(frame + struct.pack(">i", 12) + b"\xff" * 12)
        payload = read_frame(c.sock)
        assert struct.unpack_from(">i", payload)[0] == 7
        assert c.closed_by_peer()


# -- produce errors (per partition, the connection stays open) -------------------------------

def _produce(c: RawConnection, topic: str, partition: int, records: bytes | None,
             acks: int = -1) -> tuple[int, int]:
    r = c.request(0, 7, produce_body(topic, partition, records, acks=acks))
    pr = r.responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def test_corrupt_crc_rejected_nothing_written(bad_broker):
    with _raw(bad_broker) as c:
        end = _log_end(c, KEPT, 1)
        batch = bytearray(build_batch([(b"k", b"value-%d" % i) for i in range(5)]))
        batch[-1] ^= 0x55  # a record byte: the CRC32C no longer matches
        assert _produce(c, KEPT, 1, bytes(batch))[0] == ErrorCode.CORRUPT_MESSAGE
        assert _log_end(c, KEPT, 1) == end
        # a good batch after it lands at the very offset the bad one did not take
        assert _produce(c, KEPT, 1, build_batch([(None, b"good")])) == (0, end)


@pytest.mark.parametrize("version", range(3, 10))
def test_corrupt_crc_rejected_at_every_produce_version(bad_broker, version):
    """One request per read: the produce fast path (v3-9) hands the batch to the disk worker,
    which checks the CRC as for every produce; the error answer is in the request's version."""
    with _raw(bad_broker) as c:
        end = _log_end(c, KEPT, 1)
        batch = bytearray(build_batch([(b"k", b"value")]))
        batch[-1] ^= 0x55
        r = c.request(0, version, produce_body(KEPT, 1, bytes(batch), acks=1))
        pr = r.responses[0].partition_responses[0]
        assert (pr.error_code, pr.base_offset) == (ErrorCode.CORRUPT_MESSAGE, -1)
        assert _log_end(c, KEPT, 1) == end


def _recrc(batch: bytearray) -> bytes:
    """Give a hand-damaged batch a valid CRC32C again (over attributes..end, per the v2 layout)."""
    import crc32c
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def _damaged(damage: str) -> bytes:
    batch = bytearray(build_batch([(b"k", b"v")]))
    if damage == "length_past_end":
        struct.pack_into(">i", batch, 8, len(batch) + 100)  # batchLength
    elif damage == "length_too_small":
        struct.pack_into(">i", batch, 8, 20)
    elif damage == "bad_magic":
        batch[16] = 7
    elif damage == "truncated":
        batch = batch[:30]
    elif damage == "trailing_garbage":
        batch = batch + batch + b"\x01\x02"
    elif damage == "record_count_wrong":  # CRC fine, but the count disagrees with the records
        struct.pack_into(">i", batch, 57, 5)
        return _recrc(batch)
    elif damage == "unknown_codec":
        batch[22] = (batch[22] & ~7) | 6
        return _recrc(batch)
    elif damage == "corrupt_gzip_stream":  # CRC fine, the compressed bytes are not
        from appliance.records.batch import Compression
        batch = bytearray(build_batch([(b"k", b"v" * 100)], compression=Compression.GZIP))
        batch[-10] ^= 0xFF
        return _recrc(batch)
    elif damage == "empty":
        batch = bytearray()
    return bytes(batch)


@pytest.mark.parametrize("damage,code", [
    ("length_past_end", ErrorCode.CORRUPT_MESSAGE),
    ("length_too_small", ErrorCode.CORRUPT_MESSAGE),
    ("bad_magic", ErrorCode.CORRUPT_MESSAGE),
    ("truncated", ErrorCode.CORRUPT_MESSAGE),
    ("trailing_garbage", ErrorCode.INVALID_RECORD),
    ("record_count_wrong", ErrorCode.INVALID_RECORD),
    ("unknown_codec", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    ("corrupt_gzip_stream", ErrorCode.CORRUPT_MESSAGE),
    ("empty", ErrorCode.INVALID_RECORD),
])
def test_malformed_batch_rejected(bad_broker, damage, code):
    with _raw(bad_broker) as c:
        end = _log_end(c, KEPT, 1)
        assert _produce(c, KEPT, 1, _damaged(damage))[0] == code
        assert _log_end(c, KEPT, 1) == end


def test_batch_over_message_max_bytes(bad_broker):
    with _raw(bad_broker) as c:
        end = _log_end(c, KEPT, 1)
        big = build_batch([(None, bytes(MAX_MESSAGE))])
        assert _produce(c, KEPT, 1, big)[0] == ErrorCode.MESSAGE_TOO_LARGE
        assert _log_end(c, KEPT, 1) == end


def test_acks_2_is_invalid_required_acks(bad_broker):
    with _raw(bad_broker) as c:
        end = _log_end(c, KEPT, 1)
        assert _produce(c, KEPT, 1, build_batch([(None, b"x")]), acks=2)[0] == \
            ErrorCode.INVALID_REQUIRED_ACKS
        assert _log_end(c, KEPT, 1) == end


@pytest.mark.parametrize("topic,partition", [(KEPT, 2), (KEPT, -1), ("no-such-topic", 0)])
def test_produce_unknown_partition(bad_broker, topic, partition):
    with _raw(bad_broker) as c:
        assert _produce(c, topic, partition, build_batch([(None, b"x")]))[0] == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_null_records(bad_broker):
    with _raw(bad_broker) as c:
        end = _log_end(c, KEPT, 1)
        assert _produce(c, KEPT, 1, None)[0] != 0
        assert _log_end(c, KEPT, 1) == end


# -- fetch errors ---------------------------------------------------------------------------

@pytest.mark.parametrize("offset", [7, 1000, 2**62, -5])
def test_fetch_out_of_range(bad_broker, offset):
    with _raw(bad_broker) as c:
        r = c.request(1, 11, fetch_body(KEPT, 0, offset))
        part = r.responses[0].partitions[0]
        assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert part.high_watermark == 6
        # the log end itself is in range (an empty answer, a consumer waits there)
        r = c.request(1, 11, fetch_body(KEPT, 0, 6))
        assert r.responses[0].partitions[0].error_code == 0


def test_fetch_unknown_partition(bad_broker):
    with _raw(bad_broker) as c:
        r = c.request(1, 11, fetch_body(KEPT, 9, 0))
        assert r.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_partition_counts_no_table_holds_are_refused_at_once(bad_broker, bystander):
    """A fuzzed CreatePartitions asked for 2**31-1 partitions and held its network worker for
    30 s (until the supervisor aborted it): a count beyond the partition table is refused at
    once with INVALID_PARTITIONS, for CreateTopics too, and nothing is created."""
    import time

    huge = 2**31 - 1
    with RawConnection(bad_broker.port) as c:
        started = time.monotonic()
        r = c.request(37, 1, {"topics": [{"name": KEPT, "count": huge, "assignments": None}],
                              "timeout_ms": 30000, "validate_only": False})
        assert r.results[0].error_code == ErrorCode.INVALID_PARTITIONS
        assert "partition table" in r.results[0].error_message
        r = c.request(19, 4, {"topics": [{"name": "huge", "num_partitions": huge, "replication_factor": -1,
                                          "assignments": [], "configs": []}],
                              "timeout_ms": 30000, "validate_only": False})
        assert r.topics[0].error_code == ErrorCode.INVALID_PARTITIONS
        assert time.monotonic() - started < 10
        md = c.request(3, 1, metadata_body())  # all topics (v1 would auto-create a named one)
    parts = {t.name: len(t.partitions) for t in md.topics}
    assert parts[KEPT] == 2 and parts.get("huge", 0) == 0
    assert _kept_bytes(bystander)


def test_create_partitions_with_a_wrong_assignment_changes_nothing(bad_broker, bystander):
    """Kafka's CreatePartitions errors on one broker: a lower count, one assignment too few, a
    broker that is not this one; the topic keeps its partitions."""
    me = int(bad_broker.overrides.get("broker.id", 0))

    def ask(count, assignments):
        with RawConnection(bad_broker.port) as c:
            r = c.request(37, 1, {"topics": [{"name": KEPT, "count": count, "assignments": assignments}],
                                  "timeout_ms": 10000, "validate_only": False})
        return r.results[0].error_code

    assert ask(1, None) == ErrorCode.INVALID_PARTITIONS
    assert ask(4, [{"broker_ids": [me]}]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert ask(3, [{"broker_ids": [me + 1]}]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    with RawConnection(bad_broker.port) as c:
        md = c.request(3, 1, metadata_body())
    assert {t.name: len(t.partitions) for t in md.topics}[KEPT] == 2
    assert _kept_bytes(bystander)


def test_create_topics_with_an_assignment_on_one_broker(bad_broker):
    """A standalone broker makes one partition per assignment entry (confluent-kafka sends
    num_partitions -1 with it: issue 43, it made num.partitions), and refuses, with Kafka's
    codes and nothing created, an assignment beside a count, a gap, or another broker."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bad_broker.bootstrap})
    admin.create_topics([NewTopic("assigned-22", num_partitions=22, replica_assignment=[[0]] * 22)])[
        "assigned-22"].result(30)
    md = admin.list_topics("assigned-22", timeout=10)
    assert len(md.topics["assigned-22"].partitions) == 22

    def create(name: str, num_partitions: int, entries: list) -> int:
        with RawConnection(bad_broker.port) as c:
            r = c.request(19, 4, {"topics": [{"name": name, "num_partitions": num_partitions,
                                              "replication_factor": -1, "assignments": entries,
                                              "configs": []}], "timeout_ms": 10000,
                                  "validate_only": False})
        return r.topics[0].error_code

    one = [{"partition_index": 0, "broker_ids": [0]}]
    assert create("a-both", 2, one) == ErrorCode.INVALID_REQUEST
    assert create("a-gap", -1, one + [{"partition_index": 5, "broker_ids": [0]}]) == \
        ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert create("a-other", -1, [{"partition_index": 0, "broker_ids": [3]}]) == \
        ErrorCode.INVALID_REPLICA_ASSIGNMENT
    names = set(admin.list_topics(timeout=10).topics)
    assert not names & {"a-both", "a-gap", "a-other"}
