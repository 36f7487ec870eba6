"""The ``appliance`` PySpark data source: batch and streaming reads in place, writes over Kafka.

Register it once per session, then use it like Spark's Kafka source::

    from spark import ApplianceDataSource
    spark.dataSource.register(ApplianceDataSource)
    df = (spark.read.format("appliance").option("log.dirs", "/data/d0,/data/d1")
          .option("subscribe", "events").option("shm.name", "appliance-b0-p9092").load())

Reads never go through the broker: the driver plans offset ranges from the partition
directories and the high watermarks (shared partition table, or checkpoint files when no broker
runs), and each task mmaps the segment files and yields Arrow record batches. Writes go through
the broker (Kafka Produce) from one writer per task.

Spark instantiates these classes in its Python workers; each object lives in one worker and is
used by one thread at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from appliance.errors import OffsetOutOfRangeError
from spark.arrow_reader import read_range
from spark.catalog import load_catalog
from spark.options import (
    ReadOptions,
    bool_option,
    parse_read_options,
    parse_write_options,
)
from spark.planning import (
    TopicRange,
    _check_json_covers,
    check_data_loss,
    offsets_json,
    resolve_offsets,
    resolve_start,
    select_partitions,
    split_ranges,
)
from spark.schema import arrow_schema, spark_schema

__all__ = ["ApplianceDataSource", "ApplianceBatchReader", "ApplianceStreamReader"]


def _read(opts: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, TopicRange):
        return iter(())  # Spark hands over InputPartition(None) when planning found nothing
    return read_range(partition.path, partition.topic, partition.partition, partition.start,
                      partition.end, include_headers=opts.include_headers,
                      fail_on_data_loss=opts.fail_on_data_loss, chunk_bytes=opts.chunk_bytes,
                      schema=arrow_schema(opts.include_headers))


class ApplianceDataSource(DataSource):
    """Format ``appliance``. Options: see :mod:`spark.options` and ``spark/README.md``."""

    @classmethod
    def name(cls) -> str:
        return "appliance"

    def schema(self) -> StructType:
        return spark_schema(bool_option(self.options, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        """Raises InvalidConfigError for bad options."""
        return ApplianceBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Raises InvalidConfigError for bad options."""
        return ApplianceStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):
        from spark.writer import ApplianceWriter

        return ApplianceWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from spark.writer import ApplianceStreamWriter

        return ApplianceStreamWriter(parse_write_options(self.options), schema)


class ApplianceBatchReader(DataSourceReader):
    """Plans one task per partition range (more with minPartitions); reads Arrow batches."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        """Raises KafkaStorageError, UnknownTopicOrPartitionError, InvalidConfigError,
        OffsetOutOfRangeError (see :func:`spark.planning.resolve_offsets`)."""
        opts = self.opts
        catalog = load_catalog(opts.log_dirs, opts.shm_name)
        plans = resolve_offsets(opts, catalog)
        return list(split_ranges([(p.state, p.start, p.end) for p in plans], opts.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


def _parse_offsets(doc: dict) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}


class ApplianceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of offset ranges; offsets are Spark's Kafka JSON ({"t": {"0": 23}}).

    New partitions (and topics matching subscribePattern) start at their earliest offset, as in
    Spark. maxOffsetsPerTrigger caps each micro-batch, shared among partitions by backlog.
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._cap: dict[tuple[str, int], int] | None = None  # Trigger.AvailableNow snapshot

    def _states(self):
        catalog = load_catalog(self.opts.log_dirs, self.opts.shm_name)
        return {(s.topic, s.partition): s for s in select_partitions(self.opts, catalog)}

    def initialOffset(self) -> dict:
        states = self._states()
        spec = self.opts.starting
        if spec.kind in ("offsets", "timestamps"):
            _check_json_covers(spec, "startingOffsets", list(states.values()))
        return offsets_json({tp: resolve_start(spec, s, self.opts) for tp, s in states.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._cap = {tp: s.high_watermark for tp, s in self._states().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        states = self._states()
        begin = _parse_offsets(start or {})
        latest: dict[tuple[str, int], int] = {}
        for tp, s in states.items():
            hw = s.high_watermark
            if self._cap is not None:
                hw = min(hw, self._cap.get(tp, s.earliest))
            a = begin.get(tp, s.earliest)
            latest[tp] = max(a, hw)
        if isinstance(limit, ReadMaxRows):
            latest = _rate_limit(begin, latest, states, limit.max_rows)
        # Partitions that vanished (topic deleted) keep their offset; partitions() reports them.
        for tp, o in begin.items():
            latest.setdefault(tp, o)
        return offsets_json(latest)

    def reportLatestOffset(self) -> dict | None:
        return offsets_json({tp: s.high_watermark for tp, s in self._states().items()})

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """Raises OffsetOutOfRangeError on data loss with failOnDataLoss."""
        states = self._states()
        begin, stop = _parse_offsets(start or {}), _parse_offsets(end)
        plans = []
        for tp, b in sorted(stop.items()):
            s = states.get(tp)
            if s is None:
                if self.opts.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"{tp[0]}-{tp[1]}: the partition is gone from log.dirs (topic "
                        "deleted?); set failOnDataLoss=false to skip it")
                continue
            a = begin.get(tp, s.earliest)
            if b <= a:
                continue
            a = check_data_loss(s, a, self.opts.fail_on_data_loss)
            if b > a:
                plans.append((s, a, b))
        return list(split_ranges(plans, self.opts.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: the segment files belong to the broker."""


def _rate_limit(begin, latest, states, max_rows: int) -> dict[tuple[str, int], int]:
    """Cap the total offsets of a micro-batch at ``max_rows``, shared by backlog size."""
    backlog = {tp: latest[tp] - begin.get(tp, states[tp].earliest) for tp in latest}
    total = sum(v for v in backlog.values() if v > 0)
    if total <= max_rows:
        return latest
    out = {}
    given = 0
    for tp in sorted(latest):
        a = begin.get(tp, states[tp].earliest)
        share = backlog[tp] * max_rows // total if backlog[tp] > 0 else 0
        given += share
        out[tp] = a + share
    # Hand out what integer division left over, so a micro-batch is never empty.
    left = max_rows - given
    for tp in sorted(latest, key=lambda k: -backlog[k]):
        if left <= 0:
            break
        a = out[tp]
        extra = min(left, latest[tp] - a)
        out[tp] = a + extra
        left -= extra
    return out
