"""ListOffsets v0 (0.8's OffsetRequest) answers up to max_num_offsets offsets, newest first: the
high watermark for -1, then the base offsets of the segments last written at or before the time,
as 0.8's getOffsetsBefore did; sent as protocol bytes through a raw socket."""

from __future__ import annotations

import os
import time

import pytest

from appliance.records.batch import build_batch
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection, produce_body

pytestmark = pytest.mark.timeout(60)

BATCHES = 5
RECORDS = 3  # per batch


def _offsets(c: RawConnection, topic: str, ts: int, max_num: int) -> list[int]:
    body = {"replica_id": -1, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "timestamp": ts, "max_num_offsets": max_num}]}]}
    p = c.request(2, 0, body).topics[0].partitions[0]
    assert p.error_code == 0
    return list(p.old_style_offsets)


def test_v0_lists_segment_offsets_newest_first(module_broker, tmp_path):
    topic = "offsets-v0"
    # a segment holds about one batch: every batch after the first rolls a new segment
    create_topic(module_broker.bootstrap, topic, config={"segment.bytes": "200"})
    with RawConnection(module_broker.port) as c:
        for i in range(BATCHES):
            records = build_batch([(b"k", b"v%d-%d" % (i, j) + b"x" * 60) for j in range(RECORDS)])
            r = c.request(0, 7, produce_body(topic, 0, records))
            assert r.responses[0].partition_responses[0].error_code == 0
        part_dir = os.path.join(module_broker.log_dirs[0], f"{topic}-0")
        bases = sorted(int(n[:-4]) for n in os.listdir(part_dir) if n.endswith(".log"))
        assert len(bases) >= 3, bases
        end = BATCHES * RECORDS
        newest_first = [end] + [b for b in reversed(bases) if b < end]

        assert _offsets(c, topic, -1, 100) == newest_first
        assert _offsets(c, topic, -1, 2) == newest_first[:2]
        assert _offsets(c, topic, -1, 1) == [end]  # what v1+ answers as the one offset
        assert _offsets(c, topic, -2, 100) == [0]
        assert _offsets(c, topic, -1, 0) == []
        # by time: segments are dated by their files' modification times, the end by now
        now_ms = int(time.time() * 1000)
        assert _offsets(c, topic, now_ms + 3_600_000, 100) == newest_first
        assert _offsets(c, topic, 1_000, 100) == []  # before anything was written
        day = 86_400_000
        for i, base in enumerate(bases):  # segment i last written i days after an epoch
            ns = (now_ms - (len(bases) - i) * day) * 1_000_000  # exact: no float rounding
            os.utime(os.path.join(part_dir, f"{base:020d}.log"), ns=(ns, ns))
        second_written = now_ms - (len(bases) - 1) * day
        assert _offsets(c, topic, second_written, 100) == [bases[1], bases[0]]
        assert _offsets(c, topic, second_written, 1) == [bases[1]]
        assert _offsets(c, topic, second_written - 1, 100) == [bases[0]]
