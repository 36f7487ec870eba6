"""Turn options plus what is on disk into offset ranges: one Spark task per range.

Resolution follows Spark's Kafka source: earliest/latest/JSON offsets (-2 earliest, -1 latest),
timestamps (the first offset whose record timestamp is >= the given one), and JSON offsets must
name every selected partition. Ranges never reach the high watermark (the last stable offset
under read_committed). ``minPartitions`` splits
large ranges, cutting at segment base offsets where one is near the ideal cut so that each task
walks whole segment files.

Thread-safety: pure functions over snapshots.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from appliance.errors import InvalidConfigError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from spark.catalog import (
    Catalog,
    PartitionState,
    offset_for_timestamp,
    segment_bases,
)
from spark.options import EARLIEST, LATEST, OffsetSpec, ReadOptions

__all__ = ["TopicRange", "select_partitions", "resolve_offsets", "split_ranges", "offsets_json"]

log = logging.getLogger(__name__)


class TopicRange(InputPartition):
    """One task's work: offsets [start, end) of one partition (picklable).

    ``path`` is the partition directory on the driver's host ("" when it has none there);
    ``brokers`` the broker ids the bootstrap server listed at planning, and ``leader``, ``isr``,
    ``replicas`` the partition's as Metadata gave them then (remote planning only).
    """

    brokers: tuple[int, ...] = ()
    leader: int = -1
    isr: tuple[int, ...] = ()
    replicas: tuple[int, ...] = ()

    def __init__(self, topic: str, partition: int, path: str, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.path = path
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"TopicRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


@dataclass(frozen=True)
class _Plan:
    state: PartitionState
    start: int
    end: int


def select_partitions(opts: ReadOptions, catalog: Catalog) -> list[PartitionState]:
    """The partitions selected by subscribe / subscribePattern / assign, sorted.

    Raises UnknownTopicOrPartitionError for a subscribed topic or assigned partition that is
    not in the log dirs (a pattern matching nothing selects nothing, as in Spark).
    """
    where = (f"log.dirs {','.join(opts.log_dirs)}" if not opts.remote
             else f"the broker at kafka.bootstrap.servers={opts.bootstrap_servers}")
    if opts.subscribe is not None:
        missing_topics = sorted(set(opts.subscribe) - catalog.topics())
        if missing_topics:
            raise UnknownTopicOrPartitionError(
                f"topic(s) {', '.join(missing_topics)} not found in {where}")
    if opts.assign is not None:
        missing = [f"{t}-{p}" for t, p in opts.assign if (t, p) not in catalog.partitions]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"assigned partition(s) {', '.join(missing)} not found in {where}")
        keys = sorted(set(opts.assign))
    else:
        keys = sorted(k for k in catalog.partitions if opts.matches(k[0]))
    return [catalog.partitions[k] for k in keys]


def _check_json_covers(spec: OffsetSpec, name: str, parts: list[PartitionState]) -> None:
    given = {(t, p) for t, p, _ in spec.per_partition}
    have = {(s.topic, s.partition) for s in parts}
    extra = sorted(given - have)
    if extra:
        raise UnknownTopicOrPartitionError(
            f"{name} names partition(s) that are not selected or do not exist: "
            + ", ".join(f"{t}-{p}" for t, p in extra))
    missing = sorted(have - given)
    if missing:
        raise InvalidConfigError(
            f"{name} must give every selected partition an offset; missing: "
            + ", ".join(f"{t}-{p}" for t, p in missing))


def _resolve(spec: OffsetSpec, s: PartitionState, *, starting: bool, opts: ReadOptions) -> int:
    what = "starting" if starting else "ending"
    if spec.kind == "earliest":
        return s.earliest
    if spec.kind == "latest":
        return s.end
    if spec.kind in ("timestamp", "timestamps"):
        ts = spec.timestamp if spec.kind == "timestamp" else spec.lookup(s.topic, s.partition)
        assert ts is not None
        off = _offset_for_timestamp(s, ts, opts)
        if off is None:
            if starting and opts.timestamp_strategy == "error":
                raise OffsetOutOfRangeError(
                    f"{s.topic}-{s.partition}: no record has a timestamp >= {ts} (the {what} "
                    "timestamp); set startingOffsetsByTimestampStrategy=latest to start at the end")
            return s.end
        return off
    v = spec.lookup(s.topic, s.partition)
    assert v is not None
    if v == EARLIEST:
        return s.earliest
    if v == LATEST:
        return s.end
    if v > s.end:
        bound = (f"the high watermark {s.end}" if s.end == s.high_watermark else
                 f"the last stable offset {s.end} (read_committed; the high watermark is "
                 f"{s.high_watermark})")
        raise OffsetOutOfRangeError(
            f"{s.topic}-{s.partition}: {what} offset {v} is beyond {bound}")
    return v


def _offset_for_timestamp(s: PartitionState, ts: int, opts: ReadOptions) -> int | None:
    if s.path:
        return offset_for_timestamp(s.path, ts, s.earliest, s.end)
    # Not on this host: ask the broker (ListOffsets by time), bounded by the planned watermark.
    from spark.broker_catalog import BrokerView

    view = BrokerView(opts.bootstrap_servers, opts.request_timeout_ms)
    try:
        off = view.offset_for_timestamp(s.topic, s.partition, ts)
    finally:
        view.close()
    return None if off is None or off >= s.end else max(off, s.earliest)


def resolve_start(spec: OffsetSpec, s: PartitionState, opts: ReadOptions) -> int:
    """The starting offset of one partition, with data-loss handling (see module docstring)."""
    off = _resolve(spec, s, starting=True, opts=opts)
    return check_data_loss(s, off, opts.fail_on_data_loss)


def check_data_loss(s: PartitionState, off: int, fail: bool) -> int:
    """``off`` itself, or the earliest offset still on disk when retention removed ``off``.

    Raises OffsetOutOfRangeError when it was removed and ``fail`` is set.
    """
    if off >= s.earliest:
        return off
    msg = (f"{s.topic}-{s.partition}: offset {off} was removed by retention (the earliest "
           f"offset on disk is {s.earliest})")
    if fail:
        raise OffsetOutOfRangeError(msg + "; set failOnDataLoss=false to skip the lost records")
    log.warning("%s; starting at %d (failOnDataLoss=false)", msg, s.earliest)
    return s.earliest


def resolve_offsets(opts: ReadOptions, catalog: Catalog) -> list[_Plan]:
    """Starting and ending offset of every selected partition (batch reads).

    Raises InvalidConfigError, UnknownTopicOrPartitionError, OffsetOutOfRangeError (offset past
    the high watermark, a timestamp with no record, data loss with failOnDataLoss).
    """
    parts = select_partitions(opts, catalog)
    for spec, name in ((opts.starting, "startingOffsets"), (opts.ending, "endingOffsets")):
        if spec.kind in ("offsets", "timestamps"):
            _check_json_covers(spec, name, parts)
    plans = []
    for s in parts:
        start = resolve_start(opts.starting, s, opts)
        end = _resolve(opts.ending, s, starting=False, opts=opts)
        if end < start:
            raise InvalidConfigError(
                f"{s.topic}-{s.partition}: ending offset {end} is before starting offset {start}")
        plans.append(_Plan(s, start, end))
    return plans


def split_ranges(plans: list[tuple[PartitionState, int, int]], min_partitions: int | None
                 ) -> list[TopicRange]:
    """One TopicRange per non-empty (state, start, end); with ``min_partitions``, large ranges
    are cut (proportionally to their size) so that at least that many ranges result."""
    live = [(s, a, b) for s, a, b in plans if b > a]
    total = sum(b - a for _, a, b in live)
    out: list[TopicRange] = []
    for s, a, b in live:
        parts = 1
        if min_partitions and min_partitions > len(live) and total:
            parts = max(1, round(min_partitions * (b - a) / total))
        for lo, hi in _cuts(s.path, a, b, parts):
            r = TopicRange(s.topic, s.partition, s.path, lo, hi)
            r.leader, r.isr, r.replicas = s.leader, s.isr, s.replicas
            out.append(r)
    return out


def _cuts(path: str, start: int, end: int, parts: int) -> list[tuple[int, int]]:
    parts = min(parts, end - start)
    if parts <= 1:
        return [(start, end)]
    size = (end - start) / parts
    bases = [x for x in segment_bases(path) if start < x < end]
    cuts = []
    for k in range(1, parts):
        ideal = start + round(k * size)
        near = min(bases, key=lambda x: abs(x - ideal), default=None)
        # Snap to a segment boundary when it is within a quarter of a part of the ideal cut.
        cuts.append(near if near is not None and abs(near - ideal) <= size / 4 else ideal)
    edges = sorted({start, end, *cuts})
    return list(zip(edges, edges[1:], strict=False))


def offsets_json(offsets: dict[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offsets JSON shape: {"topic": {"0": 23}}."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = o
    return out
