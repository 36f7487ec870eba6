"""The shared counters, the recorder and the listener parser on their own (no broker)."""

from __future__ import annotations

import os

import posix_ipc
import pytest

from appliance.metrics.listener import MetricsListener, parse_listener
from appliance.metrics.recorder import Recorder
from appliance.process.plumbing import PARTITION_TABLE_CAPACITY
from appliance.shm.counters import CountersVersionError, SharedCounters
from appliance.shm.layout import COUNTER_PARTITIONS, COUNTER_SLAB, HIST_BUCKETS, HIST_WORDS


@pytest.fixture
def counters():
    c = SharedCounters.create(f"/appliance-test-counters-{os.getpid()}")
    yield c
    c.close()
    c.unlink()


def test_partition_words_cover_every_table_slot():
    # the produce path indexes partition words by table slot without a bounds check
    assert PARTITION_TABLE_CAPACITY == COUNTER_PARTITIONS


def test_slabs_are_summed_per_worker(counters):
    a, b = Recorder(counters, 0), Recorder(counters, 5)
    a.count(3)
    b.count(3)
    b.count(1)
    a.error(0, -1)
    a.error(0, 3)
    b.bytes_out(10, 100)
    a.bytes_out(10, 23)
    assert counters.field("requests", [0, 5])[[1, 3]].tolist() == [1, 2]
    assert counters.field("requests", [0])[3] == 1  # other workers' slabs left out
    assert counters.field("bytes_out", [0, 5])[10] == 123
    errors = counters.field("errors", [0, 5])
    assert errors[0] == 1 and errors[4] == 1  # code + 1: UNKNOWN_SERVER_ERROR is word 0
    a.error(0, 500)  # outside the declared range: ignored, not written elsewhere
    assert counters.field("errors", [0, 5]).sum() == 2


def test_histogram_buckets_are_powers_of_two_microseconds(counters):
    r = Recorder(counters, 1)
    for seconds in (0.0, 0.0000005, 0.000001, 0.000003, 0.001, 3600.0):
        r.local(0, seconds)
    words = counters.field("local_time", [1])[:HIST_WORDS]
    # < 1 us (twice: 0 and 0.5 us) | 1 us -> [1, 2) | 3 us -> [2, 4) | 1000 us -> [512, 1024) | 1 h
    assert words[0] == 2 and words[1] == 1 and words[2] == 1 and words[10] == 1
    assert words[HIST_BUCKETS - 1] == 1
    assert words.sum() - words[HIST_BUCKETS] == 6  # the counts, without the sum word
    assert words[HIST_BUCKETS] == 1 + 3 + 1000 + 3_600_000_000  # the sum, in microseconds


def test_opened_sets_the_base_once_and_reset_clears_it(counters):
    r = Recorder(counters, 0)
    r.opened(4, 100)
    r.opened(4, 250)  # a respawned disk worker reopening it: the first base stays
    assert counters.field("leo_base", [0])[4] == 101
    r.reset_partition(4)
    assert counters.field("leo_base", [0])[4] == 0


def test_another_layout_version_is_refused(counters):
    buf = counters._buf
    buf[4:8] = (99).to_bytes(4, "little")
    with pytest.raises(CountersVersionError, match="version 99"):
        SharedCounters.attach(counters.name)
    with pytest.raises(posix_ipc.ExistentialError):
        SharedCounters.attach("/appliance-test-no-such-counters")


def test_slab_size_is_whole_words():
    assert COUNTER_SLAB.size % 8 == 0


@pytest.mark.parametrize("text,expected", [
    ("", None),
    ("http://127.0.0.1:9308/metrics", MetricsListener("127.0.0.1", 9308, "/metrics")),
    ("127.0.0.1:9308", MetricsListener("127.0.0.1", 9308, "/metrics")),
    ("http://:9400/m", MetricsListener("", 9400, "/m")),
    ("http://[::1]:9308/metrics", MetricsListener("::1", 9308, "/metrics")),
])
def test_listener_forms(text, expected):
    assert parse_listener(text) == expected


@pytest.mark.parametrize("text", ["9308", "http://host:0/m", "http://host:70000/", "ftp://h:1/",
                                  "http://h:12/a b"])
def test_bad_listener_names_key_and_value(text):
    with pytest.raises(ValueError, match=r"metrics.listener="):
        parse_listener(text)


def _fetch_body(as_dict: bool):
    from appliance.protocol.messages import Fetch
    from appliance.protocol.types import FileSlice

    parts = [{"partition_index": 0, "error_code": 1, "records": b""},
             {"partition_index": 1, "error_code": 0, "records": FileSlice("/x", 0, 500)},
             {"partition_index": 2, "error_code": 0, "records": b"abc"}]
    if as_dict:
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                "responses": [{"topic": "t", "partitions": parts}]}
    cls = Fetch.Response
    return cls(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        cls.Responses(topic="t", partitions=[cls.Responses.Partitions(**p) for p in parts])])


@pytest.mark.parametrize("as_dict", [True, False], ids=["dicts", "generated classes"])
def test_task_responses_are_read_as_dicts_or_generated_classes(counters, as_dict):
    from types import SimpleNamespace

    from appliance.metrics.responses import record_response

    rec = Recorder(counters, 3)
    ctx = SimpleNamespace(metrics=rec, index=SimpleNamespace(
        lookup=lambda topic, p: SimpleNamespace(slot=10 + p) if topic == "t" else None))
    record_response(ctx, SimpleNamespace(api_key=1), _fetch_body(as_dict), 1.0, 1.001, 1.002)
    assert counters.field("requests", [3])[1] == 1
    assert counters.field("errors", [3])[1 * 128 + 1 + 1] == 1  # Fetch, OFFSET_OUT_OF_RANGE
    assert counters.field("failed_fetch", [3])[0] == 1
    assert counters.field("bytes_out", [3])[[11, 12]].tolist() == [500, 3]
    assert counters.field("queue_time", [3])[HIST_WORDS + HIST_BUCKETS] in (999, 1000)  # us, Fetch


@pytest.mark.parametrize("as_dict", [True, False], ids=["dicts", "generated classes"])
def test_refused_produce_partitions_are_counted_from_either_form(counters, as_dict):
    from appliance.broker.handlers.produce import _failed
    from appliance.protocol.messages import Produce

    outs = [{"index": 0, "error_code": 3, "base_offset": -1}, {"index": 1, "error_code": 0}]
    if not as_dict:
        outs = [Produce.Response.Responses.PartitionResponses(**o) for o in outs]
    rec = Recorder(counters, 2)
    _failed(rec, outs)
    assert counters.field("failed_produce", [2])[0] == 1
    assert counters.field("errors", [2])[3 + 1] == 1  # Produce, UNKNOWN_TOPIC_OR_PARTITION
