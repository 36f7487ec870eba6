"""Bad input gives an error naming the problem, never a wrong answer; and the high watermark
bound when no broker runs (checkpoint files)."""

from __future__ import annotations

import json
import os

import pytest

from appliance.config import TopicConfig
from appliance.records.batch import build_batch
from appliance.storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT, write_checkpoint
from appliance.storage.log import PartitionLog
from spark.options import parse_read_options
from tests.spark.conftest import create_topic, produce, reader


def _offline_log_dir(tmp_path, n_batches: int = 30, hw: int | None = None) -> str:
    """A log dir written by the storage library, with no broker (checkpoint files only)."""
    d = tmp_path / "logs"
    path = str(d / "off-0")
    lg = PartitionLog.open(path, TopicConfig.defaults(segment_bytes=1024,
                                                      segment_index_bytes=4096))
    for i in range(n_batches):
        lg.append(build_batch([(b"k", b"v%02d-%d" % (i, j) + b"." * 50) for j in range(2)]))
    lg.flush()
    write_checkpoint(os.path.join(str(d), REPLICATION_OFFSET_CHECKPOINT),
                     {("off", 0): lg.log_end_offset if hw is None else hw})
    lg.close()
    return str(d)


def _offline(spark, log_dir, **opts):
    r = spark.read.format("appliance").option("log.dirs", log_dir)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def test_high_watermark_from_checkpoint_bounds_reads(spark, tmp_path):
    d = _offline_log_dir(tmp_path, hw=25)  # 60 records on disk, 25 committed
    offs = sorted(r.offset for r in _offline(spark, d, subscribe="off").collect())
    assert offs == list(range(25))
    # a broker name that is not running: falls back to the checkpoint too
    assert _offline(spark, d, subscribe="off", **{"shm.name": "no-such-broker"}).count() == 25
    with pytest.raises(Exception, match="beyond the high watermark 25"):
        _offline(spark, d, subscribe="off", endingOffsets='{"off": {"0": 40}}').collect()


def test_unknown_option(spark, tmp_path):
    d = _offline_log_dir(tmp_path)
    with pytest.raises(Exception, match="unknown option.*startingoffset\\b"):
        _offline(spark, d, subscribe="off", startingOffset="earliest").collect()


@pytest.mark.parametrize("opts,msg", [
    ({"startingOffsets": '{"off": {"0": 1'}, "startingOffsets=.*malformed JSON"),
    ({"startingOffsets": '{"off": [1]}'}, "expected an object"),
    ({"startingOffsets": '{"off": {"x": 1}}'}, "partition 'x' is not a number"),
    ({"endingOffsets": '{"off": {"0": -2}}'}, "value -2 is not allowed"),
    ({"assign": '{"off": "0"}', "subscribe": None}, "expected a list of partition numbers"),
    ({"failOnDataLoss": "maybe"}, "expected true or false"),
    ({"minPartitions": "0"}, "must be >= 1"),
])
def test_malformed_options(opts, msg):
    base = {"log.dirs": "/x", "subscribe": "off"}
    base.update(opts)
    base = {k: v for k, v in base.items() if v is not None}
    with pytest.raises(Exception, match=msg):
        parse_read_options(base, streaming=False)


def test_malformed_offsets_json_through_spark(spark, tmp_path):
    d = _offline_log_dir(tmp_path)
    with pytest.raises(Exception, match="malformed JSON"):
        _offline(spark, d, subscribe="off", startingOffsets="{not json").collect()


def test_topic_that_does_not_exist(spark, tmp_path):
    d = _offline_log_dir(tmp_path)
    with pytest.raises(Exception, match="topic\\(s\\) nope not found in log.dirs"):
        _offline(spark, d, subscribe="nope").collect()
    with pytest.raises(Exception, match="assigned partition\\(s\\) off-3 not found"):
        _offline(spark, d, assign='{"off": [3]}').collect()


def test_log_dir_that_is_not_a_log_dir(spark, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("hello")
    with pytest.raises(Exception, match="is not a log dir"):
        _offline(spark, str(plain), subscribe="off").collect()
    with pytest.raises(Exception, match="does not exist"):
        _offline(spark, str(tmp_path / "missing"), subscribe="off").collect()


def test_corrupt_batch_names_file_and_position(spark, broker):
    create_topic(broker, "bad", 1, **{"segment.bytes": "2000"})
    produce(broker, "bad", ({"value": b"c%04d" % i + b"." * 80} for i in range(200)),
            **{"batch.num.messages": 5})
    path = next(os.path.join(d, "bad-0") for d in broker.log_dirs
                if os.path.isdir(os.path.join(d, "bad-0")))
    segs = sorted(n for n in os.listdir(path) if n.endswith(".log"))
    assert len(segs) > 2
    closed = os.path.join(path, segs[1])
    # Flip one byte inside the records of the second batch of a closed segment.
    with open(closed, "rb") as f:
        data = f.read()
    first_len = int.from_bytes(data[8:12], "big") + 12
    pos = first_len + 70
    with open(closed, "r+b") as f:
        f.seek(pos)
        f.write(bytes([data[pos] ^ 0xFF]))
    with pytest.raises(Exception) as ei:
        reader(spark, broker, subscribe="bad").load().collect()
    text = str(ei.value)
    assert f"{closed}: corrupt batch at byte {first_len}: CRC32C mismatch" in text
    # the segments before it still read fine
    ok = reader(spark, broker, subscribe="bad",
                endingOffsets=json.dumps({"bad": {"0": int(segs[1][:20])}})).load()
    assert ok.count() == int(segs[1][:20])


def test_write_bad_input(spark, broker):
    df = spark.createDataFrame([("a",)], "v string")
    with pytest.raises(Exception, match="needs a 'value' column"):
        (df.write.format("appliance").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", "w2").mode("append").save())
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="kafka.bootstrap.servers is required"):
        df.write.format("appliance").option("topic", "w2").mode("append").save()
