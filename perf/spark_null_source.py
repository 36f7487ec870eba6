"""A Python data source that does no work of its own: Spark's ceiling for a Python source.

Format ``appliance_null``: the same schema as the ``appliance`` source (:mod:`spark.schema`,
no headers), read by the same query, but each task yields one pre-built Arrow record batch of
100-byte records over and over: no mmap, no CRC scan, no decode, no I/O. What a query over it
costs is what Spark itself costs for those rows (planning, scheduling, Arrow from the Python
worker to the executor JVM, rows, the aggregation), so its records/s is the ceiling that no
Python data source with this schema can pass on this machine and this Spark cluster
(perf/bench_spark_cluster.py prints it next to the real paths).

The batch is built once per Python worker (kept in a module global: with
``spark.python.worker.reuse`` the warm-up run builds it and later runs only yield it), and is
shaped like the in-place reader's batches: null keys, ``value_bytes``-byte values, the topic
name, the partition, consecutive offsets from 0, CreateTime timestamps. Rows of different
yields repeat the same offsets: the ceiling query only counts rows and sums value lengths.

Options: ``records`` (total rows, required), ``partitions`` (tasks, default 2; rows are shared
out like the topic's partitions), ``batch.rows`` (rows per Arrow batch, default 78000: what
the in-place reader's 8 MiB chunks hold of 100-byte records), ``value.bytes`` (default 100),
``topic`` (default ``bench``).

Thread-safety: one reader per task; the module's batch cache is per process and only grows.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

__all__ = ["NullSource", "null_batch"]

_BATCHES: dict[tuple[str, int, int, int], pa.RecordBatch] = {}


def null_batch(topic: str, partition: int, rows: int, value_bytes: int) -> pa.RecordBatch:
    """The batch a task yields (built on first use in this process, then reused)."""
    key = (topic, partition, rows, value_bytes)
    rb = _BATCHES.get(key)
    if rb is None:
        from spark.schema import arrow_schema

        schema = arrow_schema(False)
        value_offsets = np.arange(0, (rows + 1) * value_bytes, value_bytes, dtype=np.int32)
        values = np.frombuffer(bytes(range(65, 91)) * (rows * value_bytes // 26 + 1), np.uint8)
        cols = [
            pa.nulls(rows, pa.binary()),
            pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(value_offsets),
                                                      pa.py_buffer(values[:rows * value_bytes])]),
            pa.array([topic] * rows, pa.string()),
            pa.array(np.full(rows, partition, np.int32), pa.int32()),
            pa.array(np.arange(rows, dtype=np.int64), pa.int64()),
            pa.array(np.full(rows, 1_700_000_000_000_000, np.int64)).cast(
                schema.field("timestamp").type),
            pa.array(np.zeros(rows, np.int32), pa.int32()),
        ]
        rb = _BATCHES[key] = pa.RecordBatch.from_arrays(cols, schema=schema)
    return rb


class _Share(InputPartition):
    def __init__(self, partition: int, rows: int) -> None:
        super().__init__(partition)
        self.partition = partition
        self.rows = rows


class _Reader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.records = int(options["records"])
        self.partitions_n = int(options.get("partitions", "2"))
        self.batch_rows = int(options.get("batch.rows", "78000"))
        self.value_bytes = int(options.get("value.bytes", "100"))
        self.topic = options.get("topic", "bench")
        if self.records < 0 or self.partitions_n < 1 or self.batch_rows < 1:
            raise ValueError(f"appliance_null: bad options {dict(options)}")

    def partitions(self) -> list[InputPartition]:
        if self.records == 0:
            # As the appliance source plans an empty read: no range, so pyspark runs one task
            # with InputPartition(None) (empty reads are the per-query baseline of
            # bench_spark_cpu.py: same number of tasks on both sides).
            return []
        per, extra = divmod(self.records, self.partitions_n)
        return [_Share(p, per + (p < extra)) for p in range(self.partitions_n)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, _Share):
            return
        rb = null_batch(self.topic, partition.partition, self.batch_rows, self.value_bytes)
        left = partition.rows
        while left >= self.batch_rows:
            yield rb
            left -= self.batch_rows
        if left:
            yield rb.slice(0, left)


class NullSource(DataSource):
    """Format ``appliance_null`` (options: see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "appliance_null"

    def schema(self) -> StructType:
        from spark.schema import spark_schema

        return spark_schema(False)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(dict(self.options))
