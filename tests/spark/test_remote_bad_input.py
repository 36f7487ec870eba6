"""Bad input of the remote path: an unreachable bootstrap server, a partition neither local nor
reachable, log dirs of another broker — each an error naming the problem, never a hang."""

from __future__ import annotations

import time

import pytest

from spark.datasource import _read_range
from spark.options import parse_read_options
from spark.planning import TopicRange
from tests.broker_process import BrokerProcess, free_port
from tests.spark.conftest import create_topic, produce


def test_unreachable_bootstrap_names_the_address(spark):
    addr = f"127.0.0.1:{free_port()}"  # nothing listens there
    t0 = time.monotonic()
    df = (spark.read.format("appliance").option("kafka.bootstrap.servers", addr)
          .option("subscribe", "t").option("kafka.request.timeout.ms", "3000").load())
    with pytest.raises(Exception, match=f"kafka.bootstrap.servers={addr}: no broker answered"):
        df.collect()
    assert time.monotonic() - t0 < 120  # bounded retries, not a hang


def test_malformed_bootstrap_is_refused(spark):
    with pytest.raises(Exception, match="kafka.bootstrap.servers.*expected host:port"):
        spark.read.format("appliance").option("kafka.bootstrap.servers", "nohostport") \
            .option("subscribe", "t").load().collect()


def _opts(**kw):
    return parse_read_options({"subscribe": "gone", **kw}, streaming=False)


def test_partition_neither_local_nor_reachable(tmp_path):
    # log.dirs only: the task's host does not hold the partition -> names it, says what to set
    opts = _opts(**{"log.dirs": str(tmp_path)})
    with pytest.raises(Exception, match=r"gone-3: not in log.dirs .*set kafka.bootstrap.servers"):
        list(_read_range(opts, TopicRange("gone", 3, "", 0, 10)))
    # both options, broker down: after bounded retries, names topic, partition and address
    addr = f"127.0.0.1:{free_port()}"
    opts = _opts(**{"log.dirs": str(tmp_path), "kafka.bootstrap.servers": addr,
                    "kafka.request.timeout.ms": "2000"})
    t0 = time.monotonic()
    with pytest.raises(Exception, match=rf"kafka.bootstrap.servers={addr}: cannot fetch gone-3"):
        list(_read_range(opts, TopicRange("gone", 3, "", 0, 10)))
    assert time.monotonic() - t0 < 120


def test_log_dirs_of_another_broker_are_refused(spark, broker, tmp_path):
    create_topic(broker, "mine", 1)
    produce(broker, "mine", [{"value": b"x"}])
    with BrokerProcess(tmp_path, overrides={"broker.id": "7"}) as other:
        df = (spark.read.format("appliance").option("log.dirs", ",".join(broker.log_dirs))
              .option("shm.name", f"appliance-test-{broker.port}")
              .option("kafka.bootstrap.servers", other.bootstrap).option("subscribe", "mine")
              .load())
        with pytest.raises(Exception, match=r"belong to broker id 0 .*broker id\(s\) 7"):
            df.collect()


def test_client_rack_option():
    opts = _opts(**{"kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.client.rack": " rack-1 "})
    assert opts.client_rack == "rack-1"
    assert _opts(**{"kafka.bootstrap.servers": "127.0.0.1:9092"}).client_rack == ""
    for bad in ("r" * 256, "rack\n1"):
        with pytest.raises(Exception, match=r"kafka.client.rack"):
            _opts(**{"kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.client.rack": bad})
