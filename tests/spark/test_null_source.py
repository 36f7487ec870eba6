"""The benchmark's ceiling source (perf/spark_null_source.py) reads like the appliance source.

perf/bench_spark_cluster.py calls its records/s Spark's ceiling for our schema: that holds only
if it has the appliance source's schema, yields Arrow batches Spark accepts, and gives the rows
the query counts (here through a real local Spark session).
"""

from __future__ import annotations

from pyspark.sql import functions as F

from perf.spark_null_source import NullSource
from spark.schema import spark_schema


def test_null_source_has_our_schema_and_its_rows(spark):
    spark.dataSource.register(NullSource)
    df = (spark.read.format("appliance_null").option("records", "1001")
          .option("partitions", "2").option("batch.rows", "300").option("value.bytes", "100")
          .load())
    assert df.schema == spark_schema(False)
    row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b"),
                 F.countDistinct("partition").alias("p"), F.max("offset").alias("o"),
                 F.sum(F.col("key").isNull().cast("int")).alias("nk"),
                 F.min("topic").alias("t0"), F.max("topic").alias("t1")).collect()[0]
    # 501 + 500 rows: batches of 300 and a slice of the last one in each task
    assert (row.n, row.b, row.p, row.o, row.nk) == (1001, 100_100, 2, 299, 1001)
    assert row.t0 == row.t1 == "bench"
