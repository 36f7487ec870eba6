"""Shared helpers for storage tests: real files under tmp_path, batches from records.build_batch."""

from __future__ import annotations

import os

import pytest

from appliance.config import TopicConfig
from appliance.records.batch import build_batch, decode_records
from appliance.storage.log import PartitionLog


def batch(n: int = 3, ts: int = 1_000, value_size: int = 50, key: bytes = b"k", **kw) -> bytes:
    return build_batch([(key, bytes([65 + i % 26]) * value_size) for i in range(n)],
                       base_timestamp=ts, **kw)


def cfg(**kw) -> TopicConfig:
    base = dict(segment_index_bytes=4096, index_interval_bytes=256, file_delete_delay_ms=0)
    base.update(kw)
    return TopicConfig.defaults(**base)


class Clock:
    """Injected time: tests move it explicitly."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log_path(tmp_path) -> str:
    return os.path.join(str(tmp_path), "topic-0")


def open_log(path: str, config: TopicConfig | None = None, clock: Clock | None = None,
             **kw) -> PartitionLog:
    return PartitionLog.open(path, config or cfg(), now_ms=clock or Clock(), **kw)


def all_records(lg, start: int = 0):
    """Every record from ``start`` to the end, reading slice after slice."""
    out = []
    off = start
    while off < lg.log_end_offset:
        data = lg.read_bytes(off, 1 << 20)
        recs = decode_records(data)
        out.extend(r for r in recs if r.offset >= off)
        off = recs[-1].offset + 1
    return out


def snapshot_files(path: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
    return out
